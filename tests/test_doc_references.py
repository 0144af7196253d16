"""Docstrings and docs cite only documents that are in the repository (issue 14: no DESIGN.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITED = re.compile(r"\b((?:docs/)?[\w.-]+\.md)\b")


def _sources():
    for base in ("src/legorl", "tests", "docs"):
        for path in sorted((ROOT / base).rglob("*")):
            if path.suffix in {".py", ".md"} and "tasks/suites" not in path.as_posix() and path != Path(__file__):
                yield path
    yield ROOT / "README.md"


def test_every_cited_document_exists():
    missing = []
    for path in _sources():
        for name in CITED.findall(path.read_text(encoding="utf-8")):
            if name.startswith("docs/") and not (ROOT / name).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
            if name.upper() == "DESIGN.MD":
                missing.append(f"{path.relative_to(ROOT)}: {name} (not in the repository)")
    assert not missing, missing
