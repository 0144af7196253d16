"""Image cache: keys, LRU eviction, one build per layer, history cut, typed build failures."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from legorl.errors import SandboxError
from legorl.sandbox import images
from legorl.sandbox.base import SandboxSpec
from legorl.sandbox.bwrap import BwrapBackend
from legorl.sandbox.images import (
    BaseRecipe,
    EnvRecipe,
    ImageBuildError,
    ImageCache,
    ImageDiskFullError,
    InstanceRecipe,
    bwrap_base_recipe,
    dir_bytes,
)

pytestmark = pytest.mark.sandbox
needs_bwrap = pytest.mark.sandbox

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def cache(tmp_path: Path) -> ImageCache:
    return ImageCache(tmp_path / "images", max_bytes=10**12)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "README.md").write_text("hello\n")
    return src


def _build_bytes(n: int):
    def build(d: Path):
        d.mkdir()
        (d / "blob").write_bytes(os.urandom(n))

    return build


def test_keys_are_stable_and_change_with_recipe(source: Path):
    base = bwrap_base_recipe()
    assert base.key() == bwrap_base_recipe().key()
    assert BaseRecipe(backend="oci", os="debian:bookworm").key() != base.key()
    env = EnvRecipe(python="3.11", requirements=("attrs==23.1",))
    assert env.key(base.key()) == EnvRecipe(python="3.11", requirements=("attrs==23.1",)).key(base.key())
    assert env.key(base.key()) != EnvRecipe(python="3.11", requirements=("attrs==23.2",)).key(base.key())
    assert env.key(base.key()) != EnvRecipe(python="3.12", requirements=("attrs==23.1",)).key(base.key())
    assert env.key(base.key()) != env.key("other-base")  # the parent is part of the key
    inst = InstanceRecipe(source)
    k1 = inst.key("e")
    assert k1 == InstanceRecipe(source).key("e")
    assert InstanceRecipe(source, setup=("true",)).key("e") != k1
    (source / "pkg" / "__pycache__").mkdir()
    (source / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"junk")
    assert InstanceRecipe(source).key("e") == k1  # caches are not content
    (source / "README.md").write_text("changed\n")
    assert InstanceRecipe(source).key("e") != k1


def test_lru_eviction_by_bytes_skips_pinned_and_leased(cache: ImageCache):
    for name in ("a", "b", "c", "d"):
        cache.get_or_build("env", name, {}, _build_bytes(100_000))
        time.sleep(0.02)
    cache.pin("env", "a")
    lease = cache.get_or_build("env", "b", {}, _build_bytes(1), lease=True).lease  # hit: b now most recent...
    os.utime(cache.root / "env" / "b" / "meta.json", (1, 1))  # ...but make it the oldest: still kept (leased)
    assert cache.stats.hits == 1 and cache.stats.misses == 4
    evicted = cache.enforce_bound(max_bytes=250_000)
    # c is the least recently used evictable layer; one eviction brings 4x~100k down below 250k? no: two
    assert evicted == [("env", "c"), ("env", "d")]
    kept = {x["key"] for x in cache.layers()}
    assert kept == {"a", "b"}
    lease.release()
    assert cache.enforce_bound(max_bytes=150_000) == [("env", "b")]
    assert cache.stats.evictions == 3 and cache.stats.evicted_bytes >= 300_000


def test_bound_enforced_after_each_build(tmp_path: Path):
    cache = ImageCache(tmp_path / "images", max_bytes=250_000)
    for name in ("a", "b", "c"):
        cache.get_or_build("instance", name, {}, _build_bytes(100_000))
        time.sleep(0.02)
    assert [x["key"] for x in cache.layers()] == ["b", "c"]
    assert cache.total_bytes() <= 250_000


def test_concurrent_builders_build_once(cache: ImageCache):
    calls = []
    started = threading.Barrier(8)

    def build(d: Path):
        calls.append(1)
        time.sleep(0.3)
        d.mkdir()
        (d / "x").write_text("x")

    results = []

    def worker():
        started.wait()
        results.append(cache.get_or_build("instance", "same", {}, build))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(results) == 8 and len({str(r.path) for r in results}) == 1
    assert cache.stats.misses == 1 and cache.stats.hits == 7
    assert list((cache.root / "tmp").iterdir()) == []


def test_concurrent_builders_across_processes(tmp_path: Path):
    root = tmp_path / "images"
    log = tmp_path / "builds.log"
    code = (
        "import sys, time; from pathlib import Path; from legorl.sandbox.images import ImageCache\n"
        "def b(d):\n"
        "    open(sys.argv[2], 'a').write('built\\n'); time.sleep(0.5); d.mkdir()\n"
        "ImageCache(Path(sys.argv[1])).get_or_build('env', 'k', {}, b)\n"
    )
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", code, str(root), str(log)]) for _ in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    assert log.read_text() == "built\n"


def _git_repo_with_history(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "upstream"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "mod.py").write_text("def f():\n    return 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "mod.py").write_text("def f():\n    return 2  # THE FIX\n")
    _git(repo, "commit", "-qam", "the fix")
    _git(repo, "tag", "v1.0")
    _git(repo, "remote", "add", "origin", "https://example.invalid/repo.git")
    return repo, base


@needs_bwrap
def test_history_cut_to_base_commit(tmp_path: Path, cache: ImageCache):
    repo, base = _git_repo_with_history(tmp_path)
    backend = BwrapBackend(root=tmp_path / "sandboxes", cache=cache)
    sb = backend.create(SandboxSpec(source_dir=repo, base_commit=base))
    try:
        res = sb.exec(
            "git log --all --oneline; echo ---; git remote -v; git tag; git reflog 2>&1; "
            "git stash list; git count-objects -v | grep -E '^(count|in-pack)'; "
            "git fsck --unreachable --no-reflogs 2>&1 | wc -l; grep -r 'THE FIX' . || echo no-fix"
        )
        assert res.exit_code == 0, res.stderr
        log, rest = res.stdout.split("---\n", 1)
        assert len(log.splitlines()) == 1 and "legorl base" in log
        assert "origin" not in rest and "v1.0" not in rest and "no-fix" in rest
        assert "return 1" in sb.read_file("mod.py")
        # in-pack objects: exactly 1 commit + 1 tree + 1 blob
        assert "in-pack: 3" in rest, rest
        assert sb.exec("git cat-file -t " + _git(repo, "rev-parse", "HEAD").strip()).exit_code != 0
        sb.write_file("mod.py", "def f():\n    return 3\n")
        assert "+    return 3" in sb.diff()
    finally:
        sb.destroy()


@needs_bwrap
def test_layers_reused_and_prewarm(tmp_path: Path, cache: ImageCache, source: Path):
    backend = BwrapBackend(root=tmp_path / "sandboxes", cache=cache)
    other = tmp_path / "other"
    shutil.copytree(source, other)
    (other / "README.md").write_text("other\n")
    handle = cache.prewarm([InstanceRecipe(source), InstanceRecipe(other)], backend=backend)
    results = handle.wait(timeout=120)
    assert handle.done() and not handle.errors and len(results) == 2
    misses = cache.stats.misses
    assert misses == 4  # base + env + 2 instances (base/env built once)
    sb = backend.create(SandboxSpec(source_dir=source))
    try:
        assert cache.stats.misses == misses  # a pure hit
        assert sb.read_file("README.md") == "hello\n"
        sb.exec("echo mutated > README.md")
        inst = [x for x in cache.layers() if x["kind"] == "instance"]
        for x in inst:  # the cached layer is untouched by sandbox writes (a copy, not a hardlink)
            text = (cache.root / "instance" / x["key"] / "data" / "README.md").read_text()
            assert text in ("hello\n", "other\n")
    finally:
        sb.destroy()
    assert cache.stats.build_seconds > 0


def test_prewarm_reports_tasks_without_source(cache: ImageCache):
    class T:
        instance_id = "x__y-1"
        source_dir = None

    handle = cache.prewarm([T()], backend=object())
    res = handle.wait(timeout=5)
    assert isinstance(res["x__y-1"], SandboxError)


@needs_bwrap
def test_build_failure_is_typed_with_step_and_output(tmp_path: Path, cache: ImageCache, source: Path):
    backend = BwrapBackend(root=tmp_path / "sandboxes", cache=cache)
    spec = SandboxSpec(source_dir=source, setup_commands=("echo preparing; echo boom-detail >&2; exit 7",))
    with pytest.raises(ImageBuildError) as info:
        backend.create(spec)
    err = info.value
    assert isinstance(err, SandboxError)
    assert err.kind == "instance" and err.step.startswith("setup[0]") and "boom-detail" in err.output
    assert "status 7" in str(err)
    assert not any(x["kind"] == "instance" for x in cache.layers())
    assert list((cache.root / "tmp").iterdir()) == []
    # env layer failure, on the host
    with pytest.raises(ImageBuildError) as info:
        backend.create(SandboxSpec(source_dir=source, env_recipe=EnvRecipe(setup=("echo env-broke; false",))))
    assert info.value.kind == "env" and "env-broke" in info.value.output
    assert list(backend.root.iterdir()) == []  # no sandbox left behind


def test_disk_full_is_typed_and_leaves_nothing(tmp_path: Path, cache: ImageCache, source: Path, monkeypatch):
    calls = {"n": 0}
    real = images.copy_tree

    def copy_then_enospc(src, dest):
        real(src, dest)  # a partial layer exists on disk...
        calls["n"] += 1
        raise OSError(errno.ENOSPC, "No space left on device", str(dest / "pkg" / "mod.py"))

    monkeypatch.setattr(images, "copy_tree", copy_then_enospc)
    env = cache.get_or_build("env", "e", {}, lambda d: d.mkdir())
    with pytest.raises(ImageDiskFullError) as info:
        cache.instance(InstanceRecipe(source), env)
    assert calls["n"] == 1
    assert "disk full" in str(info.value).lower() or "No space left" in str(info.value)
    assert isinstance(info.value.__cause__, (OSError, ImageBuildError))
    assert list((cache.root / "instance").iterdir()) == []
    assert list((cache.root / "tmp").iterdir()) == []
    monkeypatch.setattr(images, "copy_tree", real)
    layer = cache.instance(InstanceRecipe(source), env)  # and a later build succeeds
    assert (layer.path / "README.md").read_text() == "hello\n"


@pytest.mark.root
def test_disk_full_on_a_real_tiny_filesystem(tmp_path: Path, source: Path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (source / "big.bin").write_bytes(os.urandom(1024 * 1024))
        cache = ImageCache(mnt / "images")
        env = cache.get_or_build("env", "e", {}, lambda d: d.mkdir())
        with pytest.raises(ImageDiskFullError):
            cache.instance(InstanceRecipe(source), env)
        assert list((cache.root / "instance").iterdir()) == []
        assert list((cache.root / "tmp").iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def test_hard_linked_files_count_their_share(tmp_path: Path):
    """uv hard-links installed files to its cache: a layer counts each such file's share, so the
    cache's total is the disk it uses and its budget holds every layer it builds."""
    shared = tmp_path / "uv-cache" / "big.so"
    shared.parent.mkdir()
    shared.write_bytes(os.urandom(64 * 1024))
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / "own.py").write_bytes(os.urandom(16 * 1024))
    os.link(shared, layer / "big.so")  # two links: the cache's and this layer's
    os.link(layer / "own.py", layer / "own-again.py")  # two links, both in the layer: counted in full
    assert dir_bytes(layer) == 16 * 1024 + 32 * 1024
