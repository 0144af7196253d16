"""The Claude Code plugin: its manifest validates and every command's CLI line runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "claude-code"
BIN = str(Path(sys.executable).parent)  # the legorl console script of this environment
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
_BANG = re.compile(r"^!`(.+)`$", re.M)


def _frontmatter(text: str) -> tuple[dict[str, str], str]:
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, "a command file starts with YAML frontmatter"
    fields = dict(line.split(": ", 1) for line in m.group(1).splitlines() if line.strip())
    return fields, m.group(2)


def _commands() -> dict[str, tuple[dict[str, str], str]]:
    return {p.stem: _frontmatter(p.read_text()) for p in sorted((PLUGIN / "commands").glob("*.md"))}


def test_manifest_validates():
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", manifest["name"])  # kebab-case, as Claude Code requires
    assert _SEMVER.match(manifest["version"]) and manifest["description"]
    assert isinstance(manifest["author"], dict) and manifest["author"]["name"]
    assert (PLUGIN / manifest["commands"]).is_dir()
    assert set(manifest) <= {
        "name",
        "version",
        "description",
        "author",
        "homepage",
        "repository",
        "license",
        "keywords",
        "commands",
        "agents",
        "hooks",
        "mcpServers",
    }
    cmds = _commands()
    assert set(cmds) == {"legorl-validate", "legorl-train", "legorl-status", "legorl-ui"}
    for name, (fields, body) in cmds.items():
        assert fields["description"] and fields["argument-hint"], name
        lines = _BANG.findall(body)
        assert len(lines) == 1 and "$ARGUMENTS" in lines[0], name
        # every program the line runs is allowed by the command's allowed-tools
        allowed = re.findall(r"Bash\(([^:)]+):\*\)", fields["allowed-tools"])
        for part in re.split(r"&&|\|\|", lines[0]):
            assert any(part.strip().startswith(a) for a in allowed), (name, part)


def _run(command: str, arguments: str, timeout: float = 600) -> subprocess.CompletedProcess:
    line = _BANG.findall(_commands()[command][1])[0].replace("$ARGUMENTS", arguments)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.sandbox
def test_validate_command_runs_the_cli():
    out = _run("legorl-validate", f"{shlex.quote(str(PLUGIN.parents[1] / 'configs' / 'demo.json'))} --structure-only")
    assert out.returncode == 0, out.stderr
    assert "PASS  config.schema" in out.stdout and "OK: 10 checks" in out.stdout


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)  # the process we started leads its own session
    except ProcessLookupError:
        pass


@pytest.mark.slow
@pytest.mark.sandbox
def test_train_command_refuses_a_broken_config_and_launches_a_good_one(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"rollout": {"harness": "command", "harness_options": {"dialect": "anthropic.messages"}}})
    )
    out = _run("legorl-train", shlex.quote(str(bad)))
    assert out.returncode == 1 and "FATAL harness.dialect_tool_format" in out.stdout
    good = tmp_path / "good.json"
    cfg = json.loads((PLUGIN.parents[1] / "configs" / "demo.json").read_text())
    cfg.update(run_dir=str(tmp_path / "run"), steps=1, tasks_per_step=1, group_size=2)
    good.write_text(json.dumps(cfg))
    out = _run("legorl-train", shlex.quote(str(good)))
    assert out.returncode == 0, out.stdout + out.stderr
    launched = json.loads(out.stdout[out.stdout.index("{") :])
    try:
        assert launched["run_dir"] == str(tmp_path / "run")
        deadline = time.monotonic() + 300
        while not (tmp_path / "run" / "config.json").exists():  # legorl train started and wrote its config
            assert time.monotonic() < deadline, Path(launched["log"]).read_text()[-2000:]
            time.sleep(0.5)
    finally:
        _kill_group(launched["pid"])


@pytest.mark.slow
@pytest.mark.sandbox
def test_status_and_ui_commands_run_the_cli(trained_run):
    out = _run("legorl-status", shlex.quote(str(trained_run)))
    assert out.returncode == 0 and "state      finished" in out.stdout
    out = _run("legorl-ui", shlex.quote(str(trained_run)))
    assert out.returncode == 0, out.stderr
    url = re.search(r"http://127\.0\.0\.1:\d+/\?token=\S+", out.stdout).group(0)
    pid = int(re.search(r"pid (\d+)", out.stdout).group(1))
    try:
        import httpx

        assert httpx.get(url, timeout=30).status_code == 200
        assert httpx.get(url.split("?")[0], timeout=30).status_code == 401
    finally:
        _kill_group(pid)
