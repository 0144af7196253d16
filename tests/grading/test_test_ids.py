"""Expected test ids → what the runner runs and which results answer them (SWE-bench's ids are cut at
their first whitespace; an IPv6 address in a parameter is no node separator)."""

from __future__ import annotations

from legorl import junit
from legorl.grading import test_ids


def test_a_cut_id_runs_its_function_and_is_answered_by_every_test_it_abbreviates() -> None:
    cut = "tests/test_fields.py::TestErrors::test_fail[required-Missing"
    whole = "tests/test_fields.py::TestErrors::test_fail[null-Field may not be null.]"
    assert test_ids.is_truncated(cut) and not test_ids.is_truncated(whole)
    assert test_ids.selection([cut, "tests/test_a.py::test_x", cut]) == [
        "tests/test_fields.py::TestErrors::test_fail",
        "tests/test_a.py::test_x",
    ]
    outcomes = {
        "tests/test_fields.py::TestErrors::test_fail[required-Missing data for required field.]": "passed",
        "tests/test_fields.py::TestErrors::test_fail[required-Missing other]": "failed",
        "tests/test_a.py::test_x": "passed",
    }
    answers = test_ids.answer(outcomes, [cut, "tests/test_a.py::test_x", "tests/test_a.py::test_gone"])
    assert answers[cut][0] == "failed" and len(answers[cut][1]) == 2  # the worst of the tests it names
    assert answers["tests/test_a.py::test_x"] == ("passed", ["tests/test_a.py::test_x"])
    assert answers["tests/test_a.py::test_gone"] == ("missing", [])


def test_swebench_instances_run_whole_files() -> None:
    ids = ["a/test_b.py::test_c[x]", "a/test_b.py::T::test_d", "a/test_e.py::test_f"]
    assert test_ids.selection(ids, whole_files=True) == ["a/test_b.py", "a/test_e.py"]


def test_colons_inside_parameters_are_not_node_separators() -> None:
    nid = "tests/test_requests.py::TestRequests::test_errors[http://fe80::5054:ff:fe5a:fc0-InvalidURL]"
    assert junit.nodeid_key(nid) == (
        "tests.test_requests.TestRequests",
        "test_errors[http://fe80::5054:ff:fe5a:fc0-InvalidURL]",
    )
    assert junit.nodeid_key("a/b.py::C::t[x]") == ("a.b.C", "t[x]")
    assert junit.nodeid_key("a/b.py::t") == ("a.b", "t")
