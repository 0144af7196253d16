"""Expected test ids → what the runner is asked to run and which of its results answer them.

SWE-bench's lists of FAIL_TO_PASS/PASS_TO_PASS tests come from its log parser, which keeps a pytest
node id only up to its first whitespace: ``test_fail[required-Missing data for required field.]`` is
listed as ``test_fail[required-Missing``. Asked for verbatim, pytest would not find such an id (and
would stop the whole run), so the runner is given the test function it names (every
parametrization) and the id is answered by the real node ids it abbreviates: passed only when all of
them passed. SWE-bench instances run whole test files, as SWE-bench does (:func:`selection`).
"""

from __future__ import annotations

__all__ = ["answer", "is_truncated", "selection"]

_RANK = {"passed": 0, "xpass": 1, "skipped": 2, "xfail": 2, "missing": 3, "failed": 4, "error": 5}


def is_truncated(nodeid: str) -> bool:
    """An id cut inside its parameter brackets (an unclosed ``[``)."""
    return "[" in nodeid and not nodeid.endswith("]")


def selection(expected: list[str], whole_files: bool = False) -> list[str]:
    """The pytest arguments that run every test of ``expected`` (each once, in order). With
    ``whole_files``, the test files they are in, as SWE-bench runs them: an id pytest would not
    find (a parameter that names the machine it was recorded on) then costs that test, not the run."""
    if whole_files:
        return list(dict.fromkeys(nid.split("::", 1)[0] for nid in expected))
    out = [nid.split("[", 1)[0] if is_truncated(nid) else nid for nid in expected]
    return list(dict.fromkeys(out))


def answer(outcomes: dict[str, str], expected: list[str]) -> dict[str, tuple[str, list[str]]]:
    """For each expected id: (its outcome, the real node ids that gave it). An id seen verbatim is
    its own answer; otherwise every node id whose text up to the first whitespace is the id answers
    it, with the worst of their outcomes; none is ``missing``."""
    by_prefix: dict[str, list[str]] = {}
    for nodeid in outcomes:
        parts = nodeid.split()
        if parts and parts[0] != nodeid:
            by_prefix.setdefault(parts[0], []).append(nodeid)
    out: dict[str, tuple[str, list[str]]] = {}
    for nid in expected:
        if nid in outcomes:
            out[nid] = (outcomes[nid], [nid])
            continue
        real = by_prefix.get(nid, [])
        if not real:
            out[nid] = ("missing", [])
            continue
        worst = max((outcomes[r] for r in real), key=lambda o: _RANK.get(o, 6))
        out[nid] = (worst, real)
    return out
