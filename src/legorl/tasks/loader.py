"""Load task suites: built-in suites, directories of task dirs, and SWE-bench record files.

A *task dir* holds ``task.json`` (the fields of :class:`~legorl.tasks.model.Task`) and, for locally
runnable tasks, the repository at its base state, either as

* ``repo/`` (or a ``source_dir`` named in ``task.json``; relative paths are relative to the task
  dir): ``source_dir`` is set to that directory; or
* ``"base_dir"`` in ``task.json``: a directory holding the *fixed* project (relative to the task
  dir). The task's repository is that tree with the gold ``patch`` reversed (``git apply -R``); it is
  materialised once, content-addressed, under ``$LEGORL_HOME/tasks/sources/`` and ``source_dir``
  points there. Its name hashes the base's files and the patch, so a change to either makes a new
  tree (and, since the instance image is keyed on the tree's content, a new image). Tasks of one
  project share one base; the built-in suites keep theirs in ``suites/_bases/<project>/``.
  ``legorl tasks author`` writes such task dirs (:mod:`legorl.tasks.author`).

Mined suites (``legorl tasks mine --out NAME``: :mod:`legorl.tasks.mining`) load by their name or
their directory (its ``tasks.jsonl``).

Generated suites (``oneline-train``, ``oneline-heldout``: :mod:`legorl.tasks.oneline`;
``multiturn-train``, ``multiturn-heldout``: :mod:`legorl.tasks.multiturn`) are written once under ``$LEGORL_HOME/tasks/generated/`` and loaded as record files.

A *suite dir* holds task dirs. Record files: ``.jsonl`` (one record a line), ``.json`` (a list, a
single record, or ``{"tasks": [...]}``) and ``.parquet`` (SWE-bench's own format; needs pyarrow).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.errors import ConfigError, LegoRLError, TaskError
from legorl.sandbox.git import git_argv, host_git_env
from legorl.settings import legorl_home
from legorl.tasks.model import Task

BUILTIN_SUITES_DIR = Path(__file__).resolve().parent / "suites"
BASES_DIR = BUILTIN_SUITES_DIR / "_bases"  # the built-in projects, fixed (see "base_dir" above)
_SOURCE_FORMAT = 1  # bump when the way a source is materialised changes


def builtin_suites() -> list[str]:
    """Names of the suites shipped in the package (e.g. ``["trivial"]``)."""
    if not BUILTIN_SUITES_DIR.is_dir():
        return []
    return sorted(p.name for p in BUILTIN_SUITES_DIR.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


ALL_BUILTIN = "builtin"  # pseudo-suite: every built-in suite, easiest tier first
_TIER_ORDER = ("trivial", "easy", "medium")


def generated_suites() -> list[str]:
    """Names of the suites generated on first use (:mod:`legorl.tasks.oneline`,
    :mod:`legorl.tasks.multiturn`)."""
    return list(_generated_suite_paths())


def _generated_suite_paths() -> dict[str, Callable[[str], Path]]:
    """Generated suite name → the function that writes it once and returns its JSONL."""
    from legorl.tasks import multiturn, oneline

    return {
        **dict.fromkeys(oneline.SUITES, oneline.suite_path),
        **dict.fromkeys(multiturn.SUITES, multiturn.suite_path),
    }


def load_suite(
    name_or_path: str | Path,
    *,
    repos: Iterable[str] = (),
    instances: Iterable[str] = (),
    repos_dir: str | Path | None = None,
) -> list[Task]:
    """Tasks of a built-in suite name (or ``"builtin"``: all of them), a generated suite
    (``oneline-*``, ``multiturn-*``), a SWE-bench suite (``swebench-verified``,
    ``swebench-lite-dev``: :mod:`legorl.tasks.swebench`), a suite/task directory, or a
    ``.jsonl``/``.json``/``.parquet`` file; only those of ``repos`` (``owner/name``) and ``instances``
    when given (:func:`filter_tasks`). ``repos_dir``: where SWE-bench suites take repository trees
    from instead of the shipped bundles (:func:`legorl.tasks.swebench.default_repo_source`)."""
    from legorl.tasks import swebench

    if swebench.is_swebench_suite(name_or_path):
        return swebench.load_swebench_suite(
            str(name_or_path), repos=repos, instances=instances, source=swebench.default_repo_source(repos_dir)
        )
    return filter_tasks(_load_unfiltered(name_or_path), repos=repos, instances=instances, origin=str(name_or_path))


def filter_tasks(
    tasks: list[Task], *, repos: Iterable[str] = (), instances: Iterable[str] = (), origin: str = "suite"
) -> list[Task]:
    """The tasks of ``repos`` and then, when ``instances`` is given, exactly those (in that order).
    A repository or an instance id the suite does not hold is an error naming it."""
    repos, instances = list(repos), list(instances)
    if repos:
        known = {t.repo for t in tasks}
        unknown = [r for r in repos if r not in known]
        if unknown:
            raise TaskError(
                f"{origin}: no tasks of repository {', '.join(unknown)} (it has: {', '.join(sorted(known))})"
            )
        tasks = [t for t in tasks if t.repo in set(repos)]
    if instances:
        by_id = {t.instance_id: t for t in tasks}
        unknown = [i for i in instances if i not in by_id]
        if unknown:
            scope = f" of {', '.join(repos)}" if repos else ""
            raise TaskError(f"{origin}: no instance {', '.join(unknown)}{scope}")
        tasks = [by_id[i] for i in dict.fromkeys(instances)]
    return tasks


def run_tasks(cfg: RunConfig, *, training: bool) -> list[Task]:
    """The tasks a run config names (``suite``, ``task_repos``, ``task_ids``). ``training``: refuse a
    suite marked as an evaluation set unless ``allow_eval_suite`` says otherwise."""
    if training and eval_only_suite(cfg.suite) and not cfg.allow_eval_suite:
        raise ConfigError(
            f"suite {cfg.suite} is an evaluation set: training on it makes its scores meaningless. Train on "
            "another suite and evaluate on this one (the eval section), or set allow_eval_suite: true"
        )
    return load_suite(cfg.suite, repos=cfg.task_repos, instances=cfg.task_ids)


def eval_only_suite(name_or_path: str | Path) -> bool:
    """Whether the suite is an evaluation set that training must not use unless told to."""
    from legorl.tasks import swebench

    return swebench.is_swebench_suite(name_or_path) and swebench.SUITES[str(name_or_path)].eval_only


def read_record_file(path: Path) -> list[Task]:
    """The tasks of a ``.jsonl``/``.json``/``.parquet`` record file (relative ``source_dir`` resolved)."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _resolve_sources(_parse_all(_read_jsonl(path), path), path)
    if suffix == ".json":
        return _resolve_sources(_parse_all(_read_json(path), path), path)
    if suffix == ".parquet":
        return _resolve_sources(_parse_all(_read_parquet(path), path), path)
    raise TaskError(f"{path}: unsupported task file type {suffix!r} (use .jsonl, .json or .parquet)")


def _load_unfiltered(name_or_path: str | Path) -> list[Task]:
    if isinstance(name_or_path, str) and name_or_path in builtin_suites():
        return _load_suite_dir(BUILTIN_SUITES_DIR / name_or_path)
    if isinstance(name_or_path, str) and name_or_path in generated_suites():
        return load_suite(_generated_suite_paths()[name_or_path](name_or_path))
    if name_or_path == ALL_BUILTIN:
        suites = sorted(builtin_suites(), key=lambda s: (_TIER_ORDER.index(s) if s in _TIER_ORDER else 99, s))
        if not suites:
            raise TaskError(f"no built-in suites in {BUILTIN_SUITES_DIR}")
        return _unique([t for s in suites for t in _load_suite_dir(BUILTIN_SUITES_DIR / s)], BUILTIN_SUITES_DIR)
    mined = _mined_suite_file(name_or_path)
    if mined is not None:
        return read_record_file(mined)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if (path / "task.json").is_file():
            return [load_task_dir(path)]
        return _load_suite_dir(path)
    if path.is_file():
        return read_record_file(path)
    from legorl.tasks.mining.suite import mined_suites
    from legorl.tasks.swebench import SUITES

    names = [*builtin_suites(), *generated_suites(), *SUITES, *mined_suites()]
    raise TaskError(
        f"no task suite {str(name_or_path)!r}: not a suite name ({', '.join(names)}) "
        "nor an existing directory or .jsonl/.json/.parquet file"
    )


def _mined_suite_file(name_or_path: str | Path) -> Path | None:
    """The ``tasks.jsonl`` of a mined suite named ``name_or_path`` (``legorl tasks mine --out NAME``) or
    of a mined suite directory; None for anything else."""
    from legorl.tasks.mining.suite import SUITE_FILE, mined_suites

    if isinstance(name_or_path, str) and "/" not in name_or_path:
        found = mined_suites().get(name_or_path)
        if found is not None:
            return found
    path = Path(name_or_path).expanduser()
    return path / SUITE_FILE if path.is_dir() and (path / SUITE_FILE).is_file() else None


def get_task(instance_id: str) -> Task:
    """Find a task by instance id across the built-in suites."""
    for suite in builtin_suites():
        task_dir = BUILTIN_SUITES_DIR / suite / instance_id
        if (task_dir / "task.json").is_file():
            return load_task_dir(task_dir)
    for suite in builtin_suites():
        for task in load_suite(suite):
            if task.instance_id == instance_id:
                return task
    for suite in generated_suites():
        if instance_id.startswith(f"legorl__{suite.rsplit('-', 1)[0]}-"):
            for task in load_suite(suite):
                if task.instance_id == instance_id:
                    return task
    from legorl.tasks import swebench
    from legorl.tasks.mining.suite import mined_suites

    for path in mined_suites().values():  # a mined task (`legorl tasks mine`)
        if f'"{instance_id}"' in path.read_text(encoding="utf-8"):
            found = [t for t in read_record_file(path) if t.instance_id == instance_id]
            if found:
                return found[0]
    for suite in swebench.SUITES:  # a SWE-bench instance id (when the records are on this machine)
        if swebench.suite_file(suite).is_file() and any(
            t.instance_id == instance_id for t in swebench.read_records(suite)
        ):
            (task,) = swebench.load_swebench_suite(suite, instances=[instance_id])
            return task
    raise TaskError(
        f"no built-in or SWE-bench task {instance_id!r} (suites: "
        f"{', '.join(builtin_suites() + generated_suites() + list(swebench.SUITES)) or 'none'})"
    )


def load_task_dir(task_dir: Path) -> Task:
    task_file = task_dir / "task.json"
    if not task_file.is_file():
        raise TaskError(f"{task_dir}: no task.json")
    try:
        record = json.loads(_read_text(task_file))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TaskError(f"{task_file}: not valid JSON: {exc}") from None
    if not isinstance(record, dict):
        raise TaskError(f"{task_file}: expected a JSON object, got {type(record).__name__}")
    task = Task.parse(record, origin=str(task_file))
    where = f"task {task.instance_id} in {task_file}"
    if "base_dir" in record:
        if task.source_dir is not None or (task_dir / "repo").exists():
            raise TaskError(f"{where}: field 'base_dir' excludes 'source_dir' and a repo/ directory")
        if not isinstance(record["base_dir"], str) or not record["base_dir"]:
            raise TaskError(f"{where}: field 'base_dir': expected a path, got {record['base_dir']!r}")
        base = task_dir / record["base_dir"]  # an absolute base_dir replaces task_dir
        if not base.is_dir():
            raise TaskError(f"{where}: field 'base_dir': {base} is not a directory")
        try:
            built = materialize_source(base.resolve(), task.patch, task.instance_id)
        except TaskError as exc:
            raise TaskError(f"{where}: {exc}") from None
        return task.model_copy(update={"source_dir": built})
    source: Path | None
    if task.source_dir is not None:
        source = task.source_dir if task.source_dir.is_absolute() else task_dir / task.source_dir
    elif (task_dir / "repo").is_dir():
        source = task_dir / "repo"
    else:
        source = None
    if source is not None:
        if not source.is_dir():
            raise TaskError(f"{where}: field 'source_dir': {source} is not a directory")
        task = task.model_copy(update={"source_dir": source.resolve()})
    return task


def task_sources_root() -> Path:
    """Where materialised task repositories live: ``$LEGORL_HOME/tasks/sources``."""
    return legorl_home() / "tasks" / "sources"


def materialize_source(base: Path, patch: str, name: str = "task") -> Path:
    """``base`` with ``patch`` reversed, as a directory under :func:`task_sources_root` (built once).

    The directory's name hashes the base's files (as the instance image does: no ``.git`` or caches)
    and the patch; it is built in a temporary directory and renamed into place, so concurrent loaders
    build it at most a few times and never see half of it. Do not edit it: delete it to rebuild.
    """
    from legorl.sandbox.images import source_content_id  # light: imports no sandbox backend

    try:
        content = source_content_id(base)
    except LegoRLError as exc:
        raise TaskError(f"base_dir {base}: {exc}") from None
    blob = json.dumps({"format": _SOURCE_FORMAT, "base": content, "patch": patch}, sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:20]

    def fill(tmp: Path) -> None:
        shutil.copytree(
            base, tmp, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.pyc")
        )
        reverse_apply(patch, tmp)

    return tree_once(task_sources_root(), f"{name}-{key}", fill)


def tree_once(root: Path, name: str, fill: Callable[[Path], None]) -> Path:
    """``root/<name>`` (name made path-safe), built once: ``fill`` writes a directory that does not
    exist yet, which is then renamed into place, so concurrent builders never see half a tree and at
    most waste a build. TaskError when the tree cannot be written."""
    dest = root / re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100]
    if dest.is_dir():
        return dest
    tmp = root / f".tmp-{dest.name}-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fill(tmp)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():  # not a concurrent builder that got there first
                raise
    except OSError as exc:
        raise TaskError(f"cannot write the task repository {dest.name} in {root}: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def reverse_apply(patch: str, tree: Path) -> None:
    """``git apply -R`` of ``patch`` in ``tree`` (never a repository around it); TaskError on failure."""
    try:
        res = subprocess.run(
            git_argv("apply", "-R", "--whitespace=nowarn", "-"),
            cwd=tree,
            env=host_git_env(tree),
            input=patch.encode(),
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise TaskError(f"cannot run git apply: {exc}") from None
    if res.returncode != 0:
        raise TaskError(
            "field 'patch': the gold patch does not reverse-apply to the base: "
            + " ".join(res.stderr.decode("utf-8", "replace").split())
        )


def _load_suite_dir(suite_dir: Path) -> list[Task]:
    task_dirs = sorted(p for p in suite_dir.iterdir() if p.is_dir() and (p / "task.json").is_file())
    if not task_dirs:
        raise TaskError(f"{suite_dir}: no task directories (each needs a task.json)")
    return _unique([load_task_dir(p) for p in task_dirs], suite_dir)


def _parse_all(records: Iterable[Any], origin: Path) -> list[Task]:
    tasks = []
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise TaskError(f"{origin}: record {i} is not an object")
        tasks.append(Task.parse(record, origin=f"{origin} (record {i})"))
    return _unique(tasks, origin)


def _resolve_sources(tasks: list[Task], origin: Path) -> list[Task]:
    """A relative ``source_dir`` in a record file is relative to the file's directory (as in task dirs)."""
    out = []
    for t in tasks:
        if t.source_dir is not None and not t.source_dir.is_absolute():
            t = t.model_copy(update={"source_dir": (origin.resolve().parent / t.source_dir).resolve()})
        if t.source_dir is not None and not t.source_dir.is_dir():
            raise TaskError(f"task {t.instance_id} in {origin}: field 'source_dir': {t.source_dir} is not a directory")
        out.append(t)
    return out


def _unique(tasks: list[Task], origin: Path) -> list[Task]:
    seen: set[str] = set()
    for t in tasks:
        if t.instance_id in seen:
            raise TaskError(f"{origin}: duplicate instance_id {t.instance_id!r}")
        seen.add(t.instance_id)
    return tasks


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path}: not UTF-8 text ({exc})") from None
    except OSError as exc:
        raise TaskError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read_jsonl(path: Path) -> list[Any]:
    records = []
    for lineno, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TaskError(f"{path}:{lineno}: not valid JSON: {exc}") from None
    return records


def _read_json(path: Path) -> list[Any]:
    try:
        data = json.loads(_read_text(path))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TaskError(f"{path}: not valid JSON: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("tasks"), list):
        return data["tasks"]
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return data
    raise TaskError(f"{path}: expected a list of task records")


def _read_parquet(path: Path) -> list[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskError(f"{path}: reading .parquet task files needs pyarrow (`pip install pyarrow`)") from None
    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises its own error types
        raise TaskError(f"{path}: cannot read parquet: {exc}") from None
