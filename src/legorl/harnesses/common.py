"""Shared launch/collect plumbing for the harness adapters.

Every ``Sandbox.exec`` runs in a fresh container with a private ``/tmp``, so a harness's issue file,
config home and transcript live only during its one exec: :func:`launch_script` writes the issue
from stdin to ``/tmp/ISSUE.md``, generates the harness's private config home (:data:`HARNESS_HOME`:
only what it needs to reach the gateway, nothing of the user's real configuration), runs the
program, then prints the transcript file after a marker line so that :func:`split_transcript` can
take it back out of stdout.

Command lines carry no secrets and nothing that could be read as an option: the session token
travels in an environment variable (or a 0600 file made from one, see :data:`TOKEN_FILE`), and free
text such as the issue is attached to its option (``--task=...``) or follows ``--``, never a bare
argv word — a token or an issue that starts with ``-`` must not turn into a flag.
"""

from __future__ import annotations

import json
import shlex
import signal
from collections.abc import Callable, Mapping

from legorl.harnesses.base import Budget, HarnessEnding, HarnessResult
from legorl.sandbox.base import WORKSPACE, ExecResult, Sandbox

ISSUE_PATH = "/tmp/ISSUE.md"  # outside the repo so it never shows up in the diff
TRANSCRIPT_MARKER = "<<<LEGORL-TRANSCRIPT-7f3a>>>"
ISSUE_PLACEHOLDER = "{ISSUE}"  # inside an argv element: replaced by the issue text itself
ISSUE_ARG = f'"$(cat {ISSUE_PATH})"'
MAX_OUTPUT = 4_000_000

# The harness's private, generated config home (on the exec's private /tmp tmpfs).
HARNESS_HOME = "/tmp/legorl-home"
TOKEN_ENV = "LEGORL_SESSION_TOKEN"  # read once by the launch script into TOKEN_FILE, then unset
TOKEN_FILE = f"{HARNESS_HOME}/.legorl/session-token"
DEAD_REGISTRY = "http://127.0.0.1:9/"  # package managers inside fail fast instead of reaching out

# Config every harness home holds: package managers offline, git with a fixed identity.
BASE_HOME_FILES: dict[str, str] = {
    ".npmrc": f"registry={DEAD_REGISTRY}\noffline=true\nfund=false\naudit=false\nupdate-notifier=false\n",
    ".config/pip/pip.conf": "[global]\nno-index = true\ndisable-pip-version-check = true\n",
    ".gitconfig": "[user]\n\tname = agent\n\temail = agent@localhost\n[core]\n\tpager = cat\n",
}

# Variables every harness gets: no proxies, no telemetry, no update checks, no pagers or editors.
QUIET_ENV = {
    "NO_PROXY": "*",
    "no_proxy": "*",
    "DO_NOT_TRACK": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PYTHONUNBUFFERED": "1",
    "PIP_NO_INDEX": "1",
    "npm_config_offline": "true",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def home_env(home: str = HARNESS_HOME) -> dict[str, str]:
    """HOME and the XDG base directories, all inside the generated home."""
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "npm_config_userconfig": f"{home}/.npmrc",
        "npm_config_registry": DEAD_REGISTRY,
        "PIP_CONFIG_FILE": f"{home}/.config/pip/pip.conf",
        "GIT_CONFIG_GLOBAL": f"{home}/.gitconfig",
        "GIT_CONFIG_NOSYSTEM": "1",
    }


def home_script(files: Mapping[str, str] | None = None, home: str = HARNESS_HOME, token_file: bool = False) -> str:
    """Shell lines that create the private config home with :data:`BASE_HOME_FILES` plus ``files``
    (paths relative to the home). With ``token_file``, the session token moves from
    ``$LEGORL_SESSION_TOKEN`` into :data:`TOKEN_FILE` (mode 0600) and the variable is unset."""
    contents = {**BASE_HOME_FILES, **(files or {})}
    lines = [
        f"umask 077; mkdir -p {shlex.quote(home)}/.config {shlex.quote(home)}/.cache "
        f"{shlex.quote(home)}/.local/share {shlex.quote(home)}/.local/state"
    ]
    for rel, text in contents.items():
        if rel.startswith("/") or ".." in rel.split("/"):
            raise ValueError(f"harness home file {rel!r} must be a relative path inside the home")
        path = shlex.quote(f"{home}/{rel}")
        lines.append(f'mkdir -p "$(dirname {path})" && printf %s {shlex.quote(text)} > {path}')
    if token_file:
        q = shlex.quote(TOKEN_FILE)
        lines.append(f'mkdir -p "$(dirname {q})" && printf %s "${TOKEN_ENV}" > {q} && unset {TOKEN_ENV}')
    lines.append("umask 022")
    return "\n".join(lines)


def shell_word(arg: str) -> str:
    """``arg`` quoted for bash, with each :data:`ISSUE_PLACEHOLDER` inside it replaced by the issue
    text (``--task={ISSUE}`` → ``'--task='"$(cat /tmp/ISSUE.md)"``)."""
    parts = arg.split(ISSUE_PLACEHOLDER)
    return ISSUE_ARG.join(shlex.quote(p) if p else "" for p in parts) if len(parts) > 1 else shlex.quote(arg)


def launch_script(
    argv: list[str],
    transcript_path: str | None = None,
    pre: str = "",
    home_files: Mapping[str, str] | None = None,
    token_file: bool = False,
) -> str:
    """A bash script: issue from stdin → ISSUE_PATH, the private config home, ``pre`` (setup lines),
    run ``argv``, dump the transcript."""
    cmd = " ".join(shell_word(a) for a in argv)
    lines = [f"cat > {ISSUE_PATH}", home_script(home_files, token_file=token_file), pre, cmd, "rc=$?"]
    if transcript_path:
        q = shlex.quote(transcript_path)
        lines.append(f"echo '{TRANSCRIPT_MARKER}'; [ -f {q} ] && cat {q}")
    lines.append("exit $rc")
    return "\n".join(line for line in lines if line)


def run_python_agent(
    sandbox: Sandbox,
    module: str,
    args: list[str],
    *,
    issue: str,
    budget: Budget,
    base_url: str,
    session_token: str,
    max_output_bytes: int,
) -> ExecResult:
    """Run a first-party agent program (``python -m module``, the project's own interpreter, which has
    the ``openai`` client) against the gateway: the issue file and root are given, the token travels
    in the OpenAI SDK's own environment variable, never on argv."""
    import sys

    argv = [
        sys.executable,
        "-m",
        module,
        f"--base-url={base_url}",
        f"--issue-file={ISSUE_PATH}",
        f"--root={WORKSPACE}",
        *args,
        f"--temperature={budget.temperature}",
    ]
    return run_program(
        sandbox,
        argv,
        issue=issue,
        budget=budget,
        env={"OPENAI_API_KEY": session_token},
        max_output_bytes=max_output_bytes,
    )


def python_agent_result(res: ExecResult, ending: Callable[[dict], HarnessEnding]) -> HarnessResult:
    """What a first-party agent's run came to: timeout, crashed (no summary line, or an exit code
    other than 0/1), else ``ending(summary)`` of its last JSON line."""
    summary = last_json_line(res.stdout)
    how: HarnessEnding
    if res.timed_out:
        how = "timeout"
    elif res.exit_code in (0, 1) and summary:
        how = ending(summary)
    else:
        how = "crashed"
    return HarnessResult(
        ending=how, exit_code=res.exit_code, transcript=res.stdout, log_tail=res.stderr[-2000:], summary=summary
    )


def run_program(
    sandbox: Sandbox,
    argv: list[str],
    *,
    issue: str,
    budget: Budget,
    env: Mapping[str, str],
    transcript_path: str | None = None,
    pre: str = "",
    cwd: str = WORKSPACE,
    home_files: Mapping[str, str] | None = None,
    token_file: bool = False,
    max_output_bytes: int = MAX_OUTPUT,
) -> ExecResult:
    """Run ``argv`` in ``sandbox`` with the issue on stdin, the quiet variables, the private config
    home and ``env`` (which carries the session token; never put it in ``argv``)."""
    script = launch_script(argv, transcript_path, pre, home_files=home_files, token_file=token_file)
    return sandbox.exec(
        ["bash", "-c", script],
        timeout=budget.wall_clock_s,
        env={**QUIET_ENV, **home_env(), **env},
        cwd=cwd,
        stdin=issue,
        max_output_bytes=max_output_bytes,
    )


def split_transcript(stdout: str) -> tuple[str, str]:
    """(program stdout, transcript file content or '')."""
    head, sep, tail = stdout.partition(TRANSCRIPT_MARKER + "\n")
    if not sep:
        head, sep, tail = stdout.partition(TRANSCRIPT_MARKER)
    return head, tail if sep else ""


# Signals a process raises on itself when its own code faults: the agent program's runtime crashed
# (a JavaScriptCore release assertion in Bun traps with SIGILL), which says nothing about the policy.
FAULT_SIGNALS = frozenset({signal.SIGILL, signal.SIGTRAP, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGSEGV})


def fault_signal(res: ExecResult) -> str | None:
    """The name of the fault signal (:data:`FAULT_SIGNALS`) the harness program died of, if it did:
    seen directly, or through the launch shell's exit code ``128 + n``."""
    number = res.killed_by_signal or (res.exit_code - 128 if 128 < res.exit_code < 160 else None)
    if number is None or number not in FAULT_SIGNALS:
        return None
    return signal.Signals(number).name


def fault_cause(res: ExecResult) -> str | None:
    """``cause`` for a harness program that crashed by itself (:func:`fault_signal`), else None."""
    fault = fault_signal(res)
    return None if fault is None else f"the harness program crashed ({fault}, exit code {res.exit_code})"


def classify(res: ExecResult, finished: bool | None = None) -> tuple[HarnessEnding, str]:
    """(ending, cause). ``finished``: the adapter's own reading of the transcript (None: exit code 0)."""
    if res.timed_out:
        return "timeout", res.cause or "wall-clock budget"
    fault = fault_cause(res)
    if fault is not None and not res.cause:
        return "crashed", fault
    if res.killed_by_signal:
        return "crashed", res.cause or f"killed by signal {res.killed_by_signal}"
    if res.exit_code != 0 and finished is not True:
        return "crashed", res.cause or f"exit code {res.exit_code}"
    if finished is None or finished:
        return "finished", ""
    return "budget", "step budget ended before the agent finished"


def result(
    res: ExecResult, transcript: str, finished: bool | None = None, summary: dict | None = None
) -> HarnessResult:
    ending, cause = classify(res, finished)
    summary = dict(summary or {})
    if cause:
        summary.setdefault("cause", cause)
    return HarnessResult(
        ending=ending,
        exit_code=res.exit_code,
        transcript=transcript,
        log_tail=(res.stderr[-3000:] or res.stdout[-3000:]),
        summary=summary,
    )


def json_lines(text: str) -> list[dict]:
    """The JSON objects of a line-delimited event stream (stream-json, ``--format json``); other
    lines (banners, warnings, partial writes) are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def last_json_line(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return {}


def deep_merge(base: Mapping[str, object], extra: Mapping[str, object]) -> dict:
    """``base`` with ``extra`` laid over it, objects merged key by key (``extra`` wins elsewhere):
    a user's settings on top of an adapter's generated configuration."""
    out = dict(base)
    for key, value in extra.items():
        old = out.get(key)
        out[key] = deep_merge(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return out


def stream_result(res: ExecResult, ending: HarnessEnding, summary: dict) -> HarnessResult:
    """The result of an adapter that reads its harness's event stream from stdout (``ending`` its
    reading of it); a crash by a fault signal says so in ``summary["cause"]``."""
    if ending == "crashed":
        fault = fault_cause(res)
        if fault is not None:
            summary.setdefault("cause", fault)
    return HarnessResult(
        ending=ending, exit_code=res.exit_code, transcript=res.stdout, log_tail=res.stderr[-2000:], summary=summary
    )


def stream_json_tool_uses(events: list[dict]) -> list[str | None]:
    """Tool names called in a ``stream-json`` transcript (Claude Code's format, which Qwen Code also
    writes): the ``tool_use`` blocks of its ``assistant`` messages, in order."""
    return [
        block.get("name")
        for e in events
        if e.get("type") == "assistant"
        for block in (e.get("message") or {}).get("content") or []
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
