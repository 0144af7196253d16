"""pytest's junit XML: the one reader, for the grader's cross-check and the task synthesizer.

A test case's outcome is ``error`` (an ``<error>`` child: setup/teardown or collection), ``failed``
(``<failure>``), ``skipped`` (``<skipped>``, which is also how xfail is written) or ``passed``; a test
that appears more than once (a passing call and a failing teardown) keeps the worst outcome
(:func:`worse`). Node ids map to pytest's junit ``(classname, name)`` with :func:`nodeid_key`.

A leaf module: imports only the standard library. ``xml.etree.ElementTree.ParseError`` propagates:
unreadable junit means something different to each caller (forgery to the grader, no data to the
synthesizer).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass

OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}

Outcomes = dict[tuple[str, str], str]


@dataclass(frozen=True)
class JunitCase:
    classname: str
    name: str
    outcome: str  # passed | skipped | failed | error
    message: str | None = None  # failure/error message (else the last line of its text); None when it passed


def worse(outcome: str, previous: str | None) -> str:
    """The worse of two outcomes of the same test (``previous`` None: not seen before)."""
    if previous is None or OUTCOME_RANK[outcome] >= OUTCOME_RANK[previous]:
        return outcome
    return previous


def parse_cases(xml_text: str) -> list[JunitCase]:
    """Every ``<testcase>`` of a junit report, in order."""
    cases = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        tags = {child.tag: child for child in case}
        outcome = (
            "error"
            if "error" in tags
            else "failed"
            if "failure" in tags
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
        node = tags.get("failure") if "failure" in tags else tags.get("error")
        message = None
        if node is not None:
            message = node.get("message") or ""
            if not message.strip():
                body = (node.text or "").strip().splitlines()
                message = body[-1] if body else ""
        cases.append(JunitCase(case.get("classname", ""), case.get("name", ""), outcome, message))
    return cases


def parse_junit(xml_text: str) -> Outcomes:
    """(classname, name) -> passed|failed|error|skipped (the worst outcome seen for a test)."""
    outcomes: Outcomes = {}
    for case in parse_cases(xml_text):
        key = (case.classname, case.name)
        outcomes[key] = worse(case.outcome, outcomes.get(key))
    return outcomes


def nodeid_key(nodeid: str) -> tuple[str, str]:
    """(junit classname, name) that pytest's junit XML gives the test ``nodeid``."""
    # "::" inside the parameter brackets (an IPv6 address, say) separates nothing
    head, bracket, params = nodeid.partition("[")
    path, _, rest = head.partition("::")
    parts = rest.split("::") if rest else []
    if bracket and parts:
        parts[-1] += bracket + params
    module = path[:-3] if path.endswith(".py") else path
    module = module.replace("/", ".")
    if not parts:
        return module, ""
    return ".".join([module, *parts[:-1]]), parts[-1]


def lookup(outcomes: Outcomes, nodeid: str) -> str:
    """The outcome junit gives ``nodeid``, or ``missing``; a classname that differs only by the rootdir
    (a package prefix more or less) still matches the same test name."""
    key = nodeid_key(nodeid)
    if key in outcomes:
        return outcomes[key]
    for (cls, name), outcome in outcomes.items():
        if name == key[1] and (cls.endswith("." + key[0]) or key[0].endswith("." + cls) or cls == key[0]):
            return outcome
    return "missing"


def case_nodeid(case: JunitCase, is_file: Callable[[str], bool]) -> str | None:
    """The pytest node id of ``case``: the longest dotted prefix of its classname that ``is_file``
    (a repo-relative ``.py`` path) says exists; None when none does (e.g. a collection error)."""
    parts = case.classname.split(".") if case.classname else []
    for cut in range(len(parts), 0, -1):
        rel = "/".join(parts[:cut]) + ".py"
        if is_file(rel):
            return "::".join([rel, *parts[cut:], case.name])
    return None
