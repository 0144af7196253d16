"""Install requirements into a venv with uv, falling back to pip: ``install_venv.py PYTHON REQ...``.

``make setup`` runs it with the venv's own interpreter. pip took 73 s to install ``.[dev]`` into a
fresh venv on 2 cores; uv takes 26 s from its cache, most of it compiling the packages to bytecode
on both cores. uv does not read pip's configuration, so the settings that decide *what* gets
installed (indexes, find-links, constraints, certificate) are read from ``pip config list`` and
passed on, with pip's rule of taking the best version across all indexes. Anything uv cannot do is
done by pip instead, with the reason printed: the result is the same set of packages either way.

Standard library only: it runs before the project is installed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip's configuration scopes, weakest first: a later one overrides an earlier one
SCOPES = ("global", "user", "site", ":env:")
# pip settings (config keys) that name one or more values, and uv's option for each value
MULTI = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint"}


def pip_settings(python: str) -> dict[str, str]:
    """pip's effective settings, key -> value, from ``pip config list`` (the strongest scope wins)."""
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    found: dict[str, tuple[int, str]] = {}
    for line in out.stdout.splitlines():
        name, sep, raw = line.partition("=")
        scope, dot, key = name.rpartition(".")
        if not sep or not dot:
            continue
        rank = SCOPES.index(scope) if scope in SCOPES else 0
        try:
            value = ast.literal_eval(raw)
        except (SyntaxError, ValueError):
            value = raw.strip("'\"")
        if key not in found or rank >= found[key][0]:
            found[key] = (rank, str(value))
    return {key: value for key, (_, value) in found.items()}


def uv_arguments(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's options and environment for pip's ``settings``."""
    args = ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version on any index
    env: dict[str, str] = {}
    if "index-url" in settings:
        args += ["--index-url", settings["index-url"]]
    if settings.get("no-index", "").lower() in {"1", "true", "yes", "on"}:
        args.append("--no-index")
    for key, option in MULTI.items():
        for value in settings.get(key, "").split():
            args += [option, value]
    if "cert" in settings:
        env["SSL_CERT_FILE"] = settings["cert"]
    if "default-timeout" in settings:
        env["UV_HTTP_TIMEOUT"] = settings["default-timeout"]
    return args, env


def install_with_uv(python: str, requirements: list[str]) -> str | None:
    """None when uv installed ``requirements``; else why not."""
    probe = subprocess.run([python, "-m", "uv", "--version"], capture_output=True, check=False)
    if probe.returncode != 0:
        got = subprocess.run([python, "-m", "pip", "install", "-q", "uv>=0.5"], capture_output=True, text=True)
        if got.returncode != 0:
            return f"pip could not install uv: {got.stderr.strip()[-300:]}"
    args, env = uv_arguments(pip_settings(python))
    # --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set (this machine, CI) nothing
    # writes .pyc files later, and every process compiled torch anew (the suite ran ~6% slower)
    cmd = [python, "-m", "uv", "pip", "install", "-q", "--compile-bytecode", "--python", python, *args, *requirements]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, check=False)
    return None if done.returncode == 0 else f"uv failed: {done.stderr.strip()[-600:]}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    python, requirements = argv[0], argv[1:]
    why = install_with_uv(python, requirements)
    if why is None:
        return 0
    print(f"installing with pip instead ({why})", file=sys.stderr)
    return subprocess.run([python, "-m", "pip", "install", "-q", *requirements], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
