"""Fixtures for the harness tests."""

from __future__ import annotations

import secrets

import pytest

from legorl.gateway import sessions


def _issue_tokens(monkeypatch: pytest.MonkeyPatch, prefix: str) -> list[str]:
    """Make every session this test opens get a token starting with ``prefix`` — the shape
    ``secrets.token_urlsafe`` produced once in 64 draws and that argparse takes for an option."""
    issued: list[str] = []

    def hostile() -> str:
        issued.append(prefix + secrets.token_urlsafe(32))
        return issued[-1]

    monkeypatch.setattr(sessions, "new_token", hostile)
    return issued


@pytest.fixture
def dash_tokens(monkeypatch: pytest.MonkeyPatch):
    """Session tokens start with ``-``; the list holds every token issued (at least one must be)."""
    issued = _issue_tokens(monkeypatch, "-")
    yield issued
    assert issued, "the test opened no session, so the hostile token was never used"


@pytest.fixture
def underscore_tokens(monkeypatch: pytest.MonkeyPatch):
    """Session tokens start with ``_``; the list holds every token issued (at least one must be)."""
    issued = _issue_tokens(monkeypatch, "_")
    yield issued
    assert issued, "the test opened no session, so the hostile token was never used"
