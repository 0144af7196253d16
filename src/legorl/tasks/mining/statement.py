"""Problem statements written without a model (SWE-smith's test-only statements).

What a mined task tells the agent: which tests fail, each one's crash message (the assertion and
its values, or the exception) and the traceback entries that lead there (``file:line: function``,
no source lines), for the first few failing tests; then that the other tests pass and that the
tests must not change. Never the mutation, the commit or its message. Records mark these
statements synthetic (``mined.synthetic_statement``). What differs from run to run (object
addresses, pytest's temporary directories) is written as ``0x…`` and ``/tmp/…/``, so the same
sources give the same statement.
"""

from __future__ import annotations

import re

# what differs between two runs of the same failing test: object addresses, pytest's temporary paths
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,16}\b")
_TMP = re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/")
_DETAILED = 3  # tests quoted in full; the rest are listed
_LISTED = 20


def problem_statement(repo: str, f2p: list[str], messages: dict[str, str], frames: dict[str, list[str]]) -> str:
    """The statement of a task whose FAIL_TO_PASS tests are ``f2p`` (in order), from the failing run's
    ``messages`` and ``frames`` by test id."""
    noun = "test fails" if len(f2p) == 1 else f"{len(f2p)} tests fail"
    lines = [f"In `{repo}`, {noun}:", ""]
    for nodeid in f2p[:_DETAILED]:
        message = _stable(messages.get(nodeid, "").strip())
        where = frames.get(nodeid, [])
        if not message and not where:
            lines += [f"`{nodeid}` fails.", ""]
            continue
        lines += [f"`{nodeid}` fails:", "", "```"]
        lines += [f"  {_stable(frame)}" for frame in where]
        lines += [message or "(no message)", "```", ""]
    rest = f2p[_DETAILED:]
    if rest:
        listed = ", ".join(f"`{t}`" for t in rest[:_LISTED])
        more = f" and {len(rest) - _LISTED} more" if len(rest) > _LISTED else ""
        lines += [f"Also failing: {listed}{more}.", ""]
    lines.append("The other tests pass. Fix the code so that these tests pass; do not change the tests.")
    return "\n".join(lines)


def _stable(text: str) -> str:
    return _TMP.sub("/tmp/…/", _ADDRESS.sub("0x…", text))
