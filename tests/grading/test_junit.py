"""The junit reader (legorl.junit) the grader and the task synthesizer share."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from legorl import junit
from legorl.tasks.synth import parse_junit_report

XML = """<testsuites><testsuite>
  <testcase classname="tests.test_a" name="ok"/>
  <testcase classname="tests.test_a" name="bad"><failure message="assert 1 == 2">long text</failure></testcase>
  <testcase classname="tests.test_a.TestK" name="boom"><error>Traceback\nValueError: x</error></testcase>
  <testcase classname="tests.test_a" name="skip"><skipped/></testcase>
  <testcase classname="tests.test_a" name="teardown"/>
  <testcase classname="tests.test_a" name="teardown"><error message="teardown failed"/></testcase>
  <testcase classname="" name="tests/test_b.py"><error message="collection failure"/></testcase>
</testsuite></testsuites>"""


def test_cases_with_outcomes_and_messages():
    cases = junit.parse_cases(XML)
    assert [(c.name, c.outcome, c.message) for c in cases] == [
        ("ok", "passed", None),
        ("bad", "failed", "assert 1 == 2"),
        ("boom", "error", "ValueError: x"),
        ("skip", "skipped", None),
        ("teardown", "passed", None),
        ("teardown", "error", "teardown failed"),
        ("tests/test_b.py", "error", "collection failure"),
    ]


def test_worst_outcome_wins():
    assert junit.parse_junit(XML)[("tests.test_a", "teardown")] == "error"
    assert junit.worse("passed", "failed") == "failed" and junit.worse("error", "skipped") == "error"
    assert junit.worse("skipped", None) == "skipped"


def test_nodeid_keys_and_lookup_across_rootdirs():
    outcomes = junit.parse_junit(XML)
    assert junit.nodeid_key("tests/test_a.py::TestK::boom") == ("tests.test_a.TestK", "boom")
    assert junit.lookup(outcomes, "tests/test_a.py::bad") == "failed"
    assert junit.lookup({("repo.tests.test_a", "bad"): "failed"}, "tests/test_a.py::bad") == "failed"
    assert junit.lookup(outcomes, "tests/test_a.py::nothere") == "missing"


def test_unreadable_xml_raises_for_the_caller_to_judge():
    with pytest.raises(ET.ParseError):
        junit.parse_cases("<testsuite><testcase")


def test_the_synthesizer_maps_cases_to_node_ids_through_the_same_reader(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    outcomes, messages, unmapped = parse_junit_report(XML, tmp_path)
    assert outcomes == {
        "tests/test_a.py::ok": "passed",
        "tests/test_a.py::bad": "failed",
        "tests/test_a.py::TestK::boom": "error",
        "tests/test_a.py::skip": "skipped",
        "tests/test_a.py::teardown": "error",
    }
    assert messages["tests/test_a.py::bad"] == "assert 1 == 2"
    assert unmapped == ["::tests/test_b.py (error)"]
