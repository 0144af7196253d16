"""``scripts/install_venv.py``: pip's settings reach uv, and pip installs what uv cannot."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_venv.py"
_spec = importlib.util.spec_from_file_location("install_venv", SCRIPT)
assert _spec and _spec.loader
install_venv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_venv)


def _pip_config(monkeypatch: pytest.MonkeyPatch, listing: str) -> None:
    real_run = subprocess.run

    def fake_run(cmd, *args, **kw):
        if cmd[1:] == ["-m", "pip", "config", "list"]:
            return subprocess.CompletedProcess(cmd, 0, stdout=listing, stderr="")
        return real_run(cmd, *args, **kw)

    monkeypatch.setattr(install_venv.subprocess, "run", fake_run)


def test_the_strongest_scope_wins_and_every_value_is_passed_on(monkeypatch):
    _pip_config(
        monkeypatch,
        "global.index-url='https://global.example/simple'\n"
        "global.extra-index-url='file:///a/simple file:///b/simple'\n"
        ":env:.index-url='https://env.example/simple'\n"
        "global.find-links='/wheels'\n"
        "user.constraint='/etc/c.txt'\n"
        "global.cert='/etc/ca.crt'\n"
        "global.default-timeout='180'\n"
        "not a setting\n",
    )
    settings = install_venv.pip_settings(sys.executable)
    assert settings["index-url"] == "https://env.example/simple"  # the environment beats the files
    args, env = install_venv.uv_arguments(settings)
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]  # pip's rule: best version anywhere
    pairs = list(zip(args[2::2], args[3::2], strict=True))
    assert pairs == [
        ("--index-url", "https://env.example/simple"),
        ("--extra-index-url", "file:///a/simple"),
        ("--extra-index-url", "file:///b/simple"),
        ("--find-links", "/wheels"),
        ("--constraint", "/etc/c.txt"),
    ]
    assert env == {"SSL_CERT_FILE": "/etc/ca.crt", "UV_HTTP_TIMEOUT": "180"}


def test_no_index_is_passed_on():
    args, _ = install_venv.uv_arguments({"no-index": "true", "find-links": "/w1 /w2"})
    assert "--no-index" in args and args[-4:] == ["--find-links", "/w1", "--find-links", "/w2"]


def test_pip_installs_what_uv_cannot(monkeypatch):
    """A uv failure (here: a requirement uv rejects) falls back to pip with uv's reason printed."""
    calls: list[list[str]] = []

    def fake_run(cmd, *args, **kw):
        calls.append(list(cmd))
        if cmd[1:3] == ["-m", "uv"] and "install" in cmd:
            return subprocess.CompletedProcess(cmd, 2, stdout="", stderr="error: no solution")
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(install_venv.subprocess, "run", fake_run)
    assert install_venv.main([sys.executable, "-e", ".[dev]"]) == 0
    assert calls[-1] == [sys.executable, "-m", "pip", "install", "-q", "-e", ".[dev]"]
