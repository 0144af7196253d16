"""The host-side helpers every backend shares: the exec process loop (hostproc), workspace copies and
removals (hostfs), git's fixed configuration (git), and the machine settings the sandbox reads
through legorl.settings. Real processes, real files, real git: nothing here needs bwrap or podman."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from needs import unavailable

from legorl.errors import ConfigError, SandboxError
from legorl.sandbox import hostfs
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.cgroup import SandboxCgroup
from legorl.sandbox.git import GIT_CONFIG, export_commit, git_argv, host_git_env
from legorl.sandbox.hostproc import Captured, require_program, run_captured, signal_name
from legorl.sandbox.images import ImageCache, default_cache

# ----------------------------------------------------------------------------------------- hostproc


def test_run_captured_caps_each_stream_and_feeds_stdin():
    run = run_captured(
        ["bash", "-c", "head -c 100000 /dev/zero | tr '\\0' a; cat >&2"],
        env=None,
        timeout=30,
        max_output_bytes=1000,
        stdin="from stdin",
    )
    assert run.returncode == 0 and not run.timed_out
    assert run.stdout == "a" * 1000 and run.truncated  # the rest was read (no blocked writer) and dropped
    assert run.stderr == "from stdin"


def test_run_captured_under_the_cap_is_not_truncated():
    run = run_captured(["printf", "%s", "x" * 10], env={"PATH": os.environ["PATH"]}, timeout=30, max_output_bytes=10)
    assert (run.stdout, run.truncated, run.exit_code, run.signal) == ("x" * 10, False, 0, None)


def test_run_captured_timeout_stops_the_whole_group(tmp_path: Path):
    marker = tmp_path / "late"
    stopped = []

    def stop(proc: subprocess.Popen) -> None:
        stopped.append(proc.pid)
        os.killpg(proc.pid, 9)

    # a grandchild in the same session: stopping the group must end it too
    script = f"(sleep 3; touch {marker}) & sleep 30"
    t0 = time.monotonic()
    run = run_captured(["bash", "-c", script], env=None, timeout=0.5, max_output_bytes=100, stop=stop)
    assert run.timed_out and stopped and time.monotonic() - t0 < 10
    assert run.died_of_signal and run.signal == 9 and run.exit_code == 137
    time.sleep(3.5)
    assert not marker.exists()


def test_run_captured_cannot_start_is_oserror(tmp_path: Path):
    with pytest.raises(OSError):
        run_captured([str(tmp_path / "no-such-program")], env=None, timeout=5, max_output_bytes=10)


@pytest.mark.parametrize(
    "returncode, exit_code, sig, direct",
    [
        (0, 0, None, False),
        (3, 3, None, False),
        (-9, 137, 9, True),
        (137, 137, 9, False),
        (128, 128, None, False),
        (200, 200, None, False),
    ],
)
def test_exit_status_decoding(returncode, exit_code, sig, direct):
    c = Captured(returncode=returncode, stdout="", stderr="", truncated=False, timed_out=False, duration_s=0.0)
    assert (c.exit_code, c.signal, c.died_of_signal) == (exit_code, sig, direct)


def test_signal_names_and_missing_programs():
    assert signal_name(9) == "SIGKILL"
    assert signal_name(40) in ("40", "SIGRTMIN+6")  # real-time signals have no name on most builds
    with pytest.raises(SandboxError, match="no-such-tool-xyz is not installed; install it with `apt-get"):
        require_program("no-such-tool-xyz", "`apt-get install -y xyz`")


# ------------------------------------------------------------------------------------------- hostfs


def _tree(root: Path) -> dict[str, tuple[str, int, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        kind = "link:" + os.readlink(p) if p.is_symlink() else ("dir" if p.is_dir() else p.read_text())
        out[str(p.relative_to(root))] = (kind, stat.S_IMODE(st.st_mode), st.st_mtime_ns if not p.is_dir() else 0)
    return out


@pytest.fixture
def layer(tmp_path: Path) -> Path:
    src = tmp_path / "layer"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (src / "ro.txt").write_text("read only\n")
    (src / "ro.txt").chmod(0o444)
    (src / "link").symlink_to("pkg/mod.py")
    return src


@pytest.mark.parametrize("fast", [True, False], ids=["in-process", "cp"])
def test_copy_workspace_keeps_modes_times_links(layer: Path, tmp_path: Path, monkeypatch, fast: bool):
    if not fast:
        monkeypatch.setattr(hostfs, "FAST_COPY_MAX_ENTRIES", 2)  # too many entries: cp -a does it
    dest = tmp_path / "ws"
    hostfs.copy_workspace(layer, dest)
    assert _tree(dest) == _tree(layer)
    (dest / "pkg" / "mod.py").write_text("X = 2\n")  # a copy, never a hard link into the layer
    assert (layer / "pkg" / "mod.py").read_text() == "X = 1\n"


def test_copy_workspace_with_a_fifo_falls_back_to_cp(layer: Path, tmp_path: Path):
    os.mkfifo(layer / "pipe")
    hostfs.copy_workspace(layer, tmp_path / "ws")
    assert stat.S_ISFIFO((tmp_path / "ws" / "pipe").lstat().st_mode)


def test_copy_workspace_failure_is_typed_and_leaves_nothing(tmp_path: Path):
    with pytest.raises(SandboxError, match="cannot copy image layer"):
        hostfs.copy_workspace(tmp_path / "missing", tmp_path / "ws")
    assert not (tmp_path / "ws").exists()


def _locked_tree(root: Path) -> Path:
    """A tree a sandbox could leave behind: an unreadable, unwritable directory with files in it."""
    d = root / "box" / "locked"
    (d / "deep").mkdir(parents=True)
    (d / "deep" / "f").write_text("x")
    (d / "f").write_text("x")
    (root / "box" / "plain.txt").write_text("y")
    (d / "deep").chmod(0)
    d.chmod(0)
    return root / "box"


def test_force_rmtree_removes_what_a_sandbox_locked():
    # run by an unprivileged uid when we are root: root ignores the modes this is about
    base = Path(tempfile.mkdtemp(prefix="legorl-rm-"))
    try:
        base.chmod(0o777)
        box = _locked_tree(base)
        code = (
            "import sys; from pathlib import Path; from legorl.sandbox.hostfs import force_rmtree; "
            "force_rmtree(Path(sys.argv[1]))"
        )
        user, python = None, sys.executable
        if os.geteuid() == 0:  # nobody, with the system's python (the venv's may be under /root)
            user, python = 65534, shutil.which("python3", path="/usr/bin:/bin")
            if python is None:
                unavailable("no system python3 (/usr/bin) to run as an unprivileged user")
            for p in [box, *box.rglob("*")]:
                os.lchown(p, user, user)
        src = str(Path(__file__).resolve().parents[2] / "src")
        subprocess.run(
            [python, "-c", code, str(box)],
            check=True,
            timeout=60,
            user=user,
            env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        )
        assert not box.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_force_rmtree_files_links_and_missing(tmp_path: Path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    for name in ("f", "link", "missing"):
        hostfs.force_rmtree(tmp_path / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]  # a link's target stays


def test_discard_is_immediate_and_cleans_up(tmp_path: Path):
    root = tmp_path / "sandboxes"
    box = _locked_tree(root)
    hostfs.discard(box)
    assert not box.exists()
    deadline = time.monotonic() + 30
    while any((root / ".trash").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any((root / ".trash").iterdir())


# ---------------------------------------------------------------------------------------------- git


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(git_argv(*args), cwd=cwd, env=host_git_env(cwd), capture_output=True, text=True)


def test_git_runs_no_hook_of_the_repository(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    assert _git(["init", "-q"], repo).returncode == 0
    fired = tmp_path / "hook-ran"
    for hooks in (repo / ".git" / "hooks", repo / "myhooks"):
        hooks.mkdir(exist_ok=True)
        (hooks / "pre-commit").write_text(f"#!/bin/sh\ntouch {fired}\n")
        (hooks / "pre-commit").chmod(0o755)
    # the repository's own config asks for its hooks and a signing key: the fixed config wins
    with open(repo / ".git" / "config", "a") as f:
        f.write("[core]\n\thooksPath = myhooks\n[commit]\n\tgpgsign = true\n[user]\n\tname = agent\n")
    (repo / "a.txt").write_text("a\n")
    assert _git(["add", "-A"], repo).returncode == 0
    res = _git(["commit", "-q", "-m", "m"], repo)
    assert res.returncode == 0, res.stderr
    assert not fired.exists()
    log = _git(["log", "--format=%an|%ae|%ad", "--date=iso-strict"], repo).stdout.strip()
    assert log == "legorl|legorl@localhost|2000-01-01T00:00:00+00:00"


def test_export_commit_writes_the_tree_or_says_why_not(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    assert _git(["init", "-q"], repo).returncode == 0
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    assert _git(["add", "-A"], repo).returncode == 0 and _git(["commit", "-q", "-m", "m"], repo).returncode == 0
    (repo / "pkg" / "a.py").write_text("x = 2\n")  # not committed: not exported
    dest = tmp_path / "dest"
    dest.mkdir()
    assert export_commit(repo, "HEAD", dest) is None
    assert sorted(p.name for p in dest.rglob("*")) == ["a.py", "pkg", "run.sh"]  # no .git
    assert (dest / "pkg" / "a.py").read_text() == "x = 1\n" and os.access(dest / "run.sh", os.X_OK)
    why = export_commit(repo, "no-such-ref", tmp_path)
    assert why is not None and "no-such-ref" in why


def test_host_git_never_takes_a_parent_repository(tmp_path: Path):
    outer = tmp_path / "outer"
    (outer / "tree").mkdir(parents=True)
    assert _git(["init", "-q"], outer).returncode == 0
    res = _git(["rev-parse", "--show-toplevel"], outer / "tree")
    assert res.returncode != 0 and "not a git repository" in res.stderr
    plain = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=outer / "tree",
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
    )
    assert plain.stdout.strip() == str(outer)  # what the ceiling prevents


def test_git_config_is_one_definition():
    # every place that runs git with LEGO-RL's fixed configuration takes it from legorl.sandbox.git
    # (harnesses give the agent's own git a config of its home: a different thing, not checked here)
    src = Path(__file__).resolve().parents[2] / "src" / "legorl"
    owners = {
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if any(s in p.read_text() for s in ("core.hooksPath", "user.email=", '"GIT_CONFIG_GLOBAL": "/dev/null"'))
    }
    assert owners == {"sandbox/git.py"}, owners
    assert GIT_CONFIG[GIT_CONFIG.index("core.hooksPath=/dev/null") - 1] == "-c"


# ----------------------------------------------------------------------------------------- settings


def test_image_cache_follows_the_settings(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LEGORL_IMAGE_CACHE_BYTES", "12345")
    cache = ImageCache()
    assert (cache.root, cache.max_bytes) == (tmp_path / "home" / "images", 12345)
    assert default_cache().root == tmp_path / "home" / "images"
    assert ImageCache(root=tmp_path / "c", max_bytes=7).max_bytes == 7
    monkeypatch.setenv("LEGORL_IMAGE_CACHE_BYTES", "20G")
    with pytest.raises(ConfigError, match="LEGORL_IMAGE_CACHE_BYTES"):
        ImageCache(root=tmp_path / "c")


def test_no_cgroups_setting(monkeypatch):
    monkeypatch.setenv("LEGORL_NO_CGROUPS", "1")
    assert SandboxCgroup.create("legorl-test-nocg", 16, 64) is None


@pytest.mark.sandbox
def test_no_userns_setting(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LEGORL_BWRAP_USERNS", "0")
    assert BwrapBackend(root=tmp_path).userns is False


def test_the_image_cache_imports_no_backend():
    code = (
        "import json, sys; import legorl.sandbox.images; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('legorl.sandbox'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert set(json.loads(out.stdout)) <= {
        "legorl.sandbox",
        "legorl.sandbox.images",
        "legorl.sandbox.git",
        "legorl.sandbox.hostfs",
    }


def test_export_commit_keeps_the_files_a_trees_export_ignore_would_leave_out(tmp_path: Path):
    """Projects mark their tests export-ignore to slim release archives; a task's tree is a checkout.
    export-subst still writes the commit's version (describe reads the source's tags)."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    assert _git(["init", "-q"], repo).returncode == 0
    files = {
        ".gitattributes": "tests export-ignore\nsecret.py export-ignore\n_version.py export-subst\n",
        "secret.py": "KEY = 1\n",
        "tests/test_a.py": "def test_a():\n    assert False\n",
        "_version.py": "VERSION = '$Format:%(describe:tags)$'\n",
    }
    for name, text in files.items():
        (repo / name).write_text(text)
    assert _git(["add", "-A"], repo).returncode == 0 and _git(["commit", "-q", "-m", "m"], repo).returncode == 0
    assert _git(["tag", "v1.2.3"], repo).returncode == 0
    before = sorted(str(p.relative_to(repo)) for p in (repo / ".git").rglob("*"))
    dest = tmp_path / "dest"
    dest.mkdir()
    assert export_commit(repo, "HEAD", dest) is None
    files["_version.py"] = "VERSION = 'v1.2.3'\n"
    assert {str(p.relative_to(dest)): p.read_text() for p in dest.rglob("*") if p.is_file()} == files
    assert sorted(str(p.relative_to(repo)) for p in (repo / ".git").rglob("*")) == before  # the source is untouched
