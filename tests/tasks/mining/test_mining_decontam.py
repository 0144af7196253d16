"""Decontamination: a commit planted in a repository that calls itself marshmallow-code/marshmallow
edits the function SWE-bench Lite's marshmallow-code__marshmallow-1343 fixes; the miner excludes it
before running anything, and the report says which instance and why. A commit making that
instance's very change is recognised as its fix commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from minerepo import git, write

from legorl.tasks.mining.decontam import Decontaminator
from legorl.tasks.mining.pipeline import MineOptions, mine
from legorl.tasks.mining.suite import REPORT_FILE, SUITE_FILE

pytestmark = pytest.mark.swebench_data

INSTANCE = "marshmallow-code__marshmallow-1343"
SCHEMA = """class BaseSchema:
    def load(self, data):
        return self._invoke_field_validators(None, data, many=False)

    def _invoke_field_validators(self, unmarshal, data, many):
        if many:
            for item in data:
                try:
                    value = item["value"]
                except KeyError:
                    pass
        else:
            try:
                value = data["value"]
            except KeyError:
                pass
        return data
"""
TESTS = """from marshmallow.schema import BaseSchema


def test_load():
    assert BaseSchema().load({"value": 1}) == {"value": 1}
"""


def _repo(tmp_path: Path, new_schema: str) -> Path:
    repo = tmp_path / "marshmallow"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo, {"src/marshmallow/__init__.py": "", "src/marshmallow/schema.py": SCHEMA, "tests/test_schema.py": TESTS})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    write(
        repo,
        {
            "src/marshmallow/schema.py": new_schema,
            "tests/test_schema.py": TESTS + "\n\ndef test_load_none():\n    assert BaseSchema().load(None) is None\n",
        },
    )
    git(repo, "commit", "-q", "-am", "planted")
    return repo


def _mine(repo: Path, out: Path) -> dict:
    options = MineOptions(methods=["commits"], python="host", repo="marshmallow-code/marshmallow", dedup_mined=False)
    mine([str(repo)], out, options)
    assert (out / SUITE_FILE).read_text() == ""  # nothing kept, nothing run
    return json.loads((out / REPORT_FILE).read_text())


def test_the_instance_functions_come_from_its_base_tree() -> None:
    [inst] = [i for i in Decontaminator().instances("marshmallow-code/marshmallow") if i.instance_id == INSTANCE]
    assert inst.known_from == "tree"
    assert ("src/marshmallow/schema.py", "BaseSchema._invoke_field_validators") in inst.functions


def test_a_commit_editing_an_instances_function_is_excluded_with_its_reason(tmp_path: Path) -> None:
    edited = SCHEMA.replace(
        '                value = data["value"]', '                value = data["value"] if data else None'
    )
    report = _mine(_repo(tmp_path, edited), tmp_path / "suite")
    assert report["decontamination"]["available"] and "swebench-lite-dev" in report["decontamination"]["suites"]
    [excluded] = report["sources"][0]["methods"]["commits"]["excluded"]
    assert excluded["instance"] == INSTANCE
    assert "edits src/marshmallow/schema.py::BaseSchema._invoke_field_validators" in excluded["reason"]
    assert report["sources"][0]["methods"]["commits"]["validated"] == 0


def test_a_commit_making_an_instances_change_is_its_fix_commit(tmp_path: Path) -> None:
    fixed = SCHEMA.replace("except KeyError:", "except (KeyError, TypeError):")  # both places, as the fix does
    report = _mine(_repo(tmp_path, fixed), tmp_path / "suite")
    [excluded] = report["sources"][0]["methods"]["commits"]["excluded"]
    assert excluded["instance"] == INSTANCE
    assert excluded["reason"].endswith(f"makes the same change as {INSTANCE}'s gold patch")
