"""legorl.allocator: the `legorl` program re-executes itself once under jemalloc (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from legorl.allocator import allocator_in_use, jemalloc_library, with_jemalloc
from legorl.errors import ConfigError
from legorl.settings import Settings

# what the program does first, then which allocator the process ended up with
PROBE = "from legorl.allocator import reexec_with_jemalloc as r, allocator_in_use as a; r(); print(a())"


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", "LEGORL_ALLOCATOR_REEXEC")}
    return subprocess.run(
        [sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_machine_has_jemalloc():
    # `make setup` installs Debian's libjemalloc2 (Makefile APT_PACKAGES)
    assert jemalloc_library() is not None


def test_the_program_reexecutes_itself_under_jemalloc_once():
    assert allocator_in_use() == "system"  # pytest itself runs on glibc's malloc
    out = _run(PROBE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["jemalloc"]  # one process printed: replaced, not forked


def test_system_keeps_glibc():
    out = _run(PROBE, LEGORL_ALLOCATOR="system")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["system"]


def test_a_library_the_loader_refuses_is_tried_once():
    code = "import legorl.allocator as m; m.jemalloc_library = lambda: '/nonexistent/libjemalloc.so.2'; " + PROBE
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["system"]  # ran on, no exec loop
    assert "libjemalloc.so.2" in out.stderr  # the loader said why


def test_children_inherit_the_choice_and_settings_are_kept():
    env = with_jemalloc({"LD_PRELOAD": "libfoo.so", "MALLOC_CONF": "narenas:1", "X": "1"}, "libjemalloc.so.2")
    assert env == {"LD_PRELOAD": "libjemalloc.so.2:libfoo.so", "MALLOC_CONF": "narenas:1", "X": "1"}
    assert with_jemalloc({}, "libjemalloc.so.2")["MALLOC_CONF"].startswith("background_thread:true")
    out = _run(
        PROBE
        + "; import subprocess, sys; subprocess.run([sys.executable, '-c', 'import legorl.allocator as m; print(m.allocator_in_use())'])"
    )
    assert out.stdout.split() == ["jemalloc", "jemalloc"], out.stderr


def test_a_bad_setting_is_one_line_from_the_program():
    with pytest.raises(ConfigError, match="LEGORL_ALLOCATOR='tcmalloc'"):
        Settings.from_env({"LEGORL_ALLOCATOR": "tcmalloc"})
    assert Settings.from_env({"LEGORL_ALLOCATOR": " System "}).allocator == "system"
    out = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "--help"],
        env=os.environ | {"LEGORL_ALLOCATOR": "tcmalloc"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "error: LEGORL_ALLOCATOR='tcmalloc': expected one of jemalloc, system"
