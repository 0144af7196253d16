"""``legorl tasks mine``: sources in, a validated, decontaminated, deduplicated suite out.

Per source (:mod:`legorl.tasks.mining.sources`), each method in turn:

**mutations** (every source): the head commit's tree; its environment
(:mod:`legorl.tasks.mining.env`); the whole test suite run twice in bwrap, once plain and once with
the coverage probe (:mod:`legorl.tasks.mining.testrun`): a test that passes both times is *stable*
(the others never count), and the probe says which test files run which function. The mutants
(:mod:`legorl.tasks.mining.mutations`) of functions some test runs, in an order drawn from the seed
(shuffled, then round-robin over kinds), are validated one run each: the covering test files with
the mutant written in (a suite of more than ``per_test_suite`` stable tests is probed by test, and
a mutant then runs only the tests that call its function, and whole files only where the function
runs when a test module is imported). FAIL_TO_PASS = the stable tests of those files that no longer pass; kept
when there are between 1 and ``max_fail``; PASS_TO_PASS = the stable tests of the FAIL_TO_PASS
tests' files that still pass (the fixed state is the head itself: those tests passed there twice).

**commits** (sources with history): :mod:`legorl.tasks.mining.commits`, newest first, each
validated by two runs on its parent's tree (test patch alone; test patch and gold patch).

**confirmation** (``confirm``, on by default): a candidate those runs keep becomes a task only when
the real grader (:func:`legorl.grading.grader.grade`, every defense on) resolves it with its gold
patch: every FAIL_TO_PASS and PASS_TO_PASS test seen passing, no blocking flag. The plain runs find
the tests; the grader is the judge training will use, so a mined task grades during training as it
did here.

Before any run, a candidate is dropped when decontamination excludes it
(:mod:`legorl.tasks.mining.decontam`) or it duplicates a task already kept: in this run, in the
suite being written (from another source), or in any other mined suite (``dedup_against``) — by
the same change (:func:`~legorl.tasks.mining.patches.diff_key`) or, for mutants, the same
function and mutation. The report lists every exclusion and duplicate with its reason.

Which candidates are kept does not depend on timing: candidates are validated in parallel
(``workers``) but their verdicts are applied in candidate order, with the per-function quota
(``per_function``) and the per-method bound (``max_mutations``, ``max_commits``) counted in that
order; so the same sources, options and seed give the same suite, byte for byte, whether runs
were made now or read from the run cache. Interrupted runs resume from that cache.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import random
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field

from legorl.errors import LegoRLError, TaskError
from legorl.rules import is_test_suite_file
from legorl.sandbox.git import git_argv, host_git_env
from legorl.tasks.mining import cpu as cpu_meter
from legorl.tasks.mining import env as mining_env
from legorl.tasks.mining.commits import CommitCandidate, scan_commits
from legorl.tasks.mining.cpu import cpu_seconds
from legorl.tasks.mining.decontam import Decontaminator
from legorl.tasks.mining.functions import FunctionIndex
from legorl.tasks.mining.mutations import Mutant, mutants
from legorl.tasks.mining.patches import diff_key, diff_size, edited_functions
from legorl.tasks.mining.sources import MiningSource, export_tree, mining_root, open_source, run_git
from legorl.tasks.mining.statement import problem_statement
from legorl.tasks.mining.suite import (
    REPORT_FILE,
    SUITE_FILE,
    TREES,
    dedup_keys,
    mined_suites,
    read_records,
    write_json,
    write_suite,
)
from legorl.tasks.mining.testrun import GLOBAL, RunCache, RunResult, RunSpec, run_key_of, run_tests
from legorl.tasks.model import MinedInfo, Task, TaskEnvironment
from legorl.tasks.synth import Mutation, reverse_diff, source_files

Method = Literal["commits", "mutations"]
# A mutant's test run may take this multiple of the unmutated suite's time, plus a margin for the
# sandbox, and at most `timeout`: a mutant that never ends (a loop bound flipped) would otherwise
# hold a worker for the whole `timeout` (more-itertools: 10 minutes each, for a 29 s suite; now 203 s).
MUTANT_TIME_FACTOR = 5.0
MUTANT_TIME_MARGIN_S = 60.0
CONFIRM_FORMAT = 1  # bump when what the grader's confirmation checks changes: cached confirmations no longer count
METHODS: tuple[Method, ...] = ("commits", "mutations")
T = TypeVar("T")


class MineOptions(BaseModel):
    """What ``legorl tasks mine`` does (its flags)."""

    methods: list[Method] = Field(default_factory=lambda: list(METHODS))
    seed: int = 0
    workers: int = Field(2, ge=1)
    per_function: int = Field(2, ge=1, description="mutation tasks kept per function")
    max_mutations: int = Field(200, ge=0, description="mutation tasks kept per source (0: no bound)")
    max_commits: int = Field(200, ge=0, description="commit tasks kept per source (0: no bound)")
    max_fail: int = Field(50, ge=1, description="a mutant breaking more tests than this is dropped")
    per_test_suite: int = Field(
        1000,
        ge=0,
        description="a suite of more stable tests: a mutant runs the tests that call its function, not their files",
    )
    max_files: int = Field(6, ge=1, description="commits: most source files changed")
    max_lines: int = Field(300, ge=1, description="commits: most source lines changed")
    timeout: float = Field(600.0, gt=0, description="seconds per test run")
    python: str = Field("auto", description="auto (pyenv, by the commit's date), host (LEGO-RL's own), or 3.X")
    backend: str = "bwrap"
    decontaminate: bool = True
    confirm: bool = True  # the real grader resolves every kept task with its gold patch
    use_cache: bool = True
    repo: str | None = None  # owner/name of a single source
    ref: str | None = None  # commit or branch of a single source
    dedup_against: list[str] = Field(default_factory=list)  # other suites' tasks.jsonl (besides the mined suites)
    dedup_mined: bool = True  # also drop what any other mined suite under $LEGORL_HOME/tasks/mined holds


class MethodReport(BaseModel):
    candidates: int = 0
    skipped: dict[str, int] = Field(default_factory=dict)  # not candidates (commits), by reason
    excluded: list[dict[str, str]] = Field(default_factory=list)  # decontamination: candidate, instance, reason
    duplicates: list[dict[str, str]] = Field(default_factory=list)  # candidate, of, key
    validated: int = 0  # candidates with a verdict (their runs finished)
    kept: int = 0
    rejected: dict[str, int] = Field(default_factory=dict)  # verdicts other than kept, by reason
    not_tried: int = 0  # left when the bound or the function quota was reached
    run_seconds: float = 0.0  # test-run time spent (cache hits cost none)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of the miner and everything it started (sandboxes, git, uv): legorl.tasks.mining.cpu


class SourceReport(BaseModel):
    source: str
    repo: str = ""
    head: str = ""
    environment: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    methods: dict[str, MethodReport] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)


class MiningReport(BaseModel):
    suite: str
    seed: int
    options: dict[str, Any]
    decontamination: dict[str, Any] = Field(default_factory=dict)
    sources: list[SourceReport] = Field(default_factory=list)
    totals: dict[str, Any] = Field(default_factory=dict)
    runs: dict[str, int] = Field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # as MethodReport.cpu_s, for the whole run
    cpu_source: str = ""  # cpuacct (every process counted) | rusage (sandboxes not counted)


class MineProgress(Protocol):
    """What the miner tells a progress display (``legorl tasks mine`` draws it with rich)."""

    def phase(self, label: str, total: int) -> None: ...

    def step(self, kept: bool) -> None: ...

    def note(self, text: str) -> None: ...


class QuietProgress:
    def phase(self, label: str, total: int) -> None:
        pass

    def step(self, kept: bool) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass
class Verdict:
    keep: bool
    reason: str = ""  # why not
    f2p: list[str] = field(default_factory=list)
    p2p: list[str] = field(default_factory=list)
    before: RunResult | None = None
    after: RunResult | None = None
    run_seconds: float = 0.0
    task: Task | None = None  # the task a kept candidate makes (relative source_dir)


def ordered_validation(
    items: Sequence[T],
    validate: Callable[[T], Verdict],
    group: Callable[[T], str],
    *,
    per_group: int,
    max_kept: int,
    workers: int,
    on_commit: Callable[[int, T, Verdict | None], None],
) -> None:
    """Validate ``items`` with ``workers`` threads, and hand each item's verdict to ``on_commit`` in
    item order (None: not validated, because its group already has ``per_group`` kept items or
    ``max_kept`` are kept). The kept set is "the first ``per_group`` of each group that validate,
    the first ``max_kept`` overall", whatever the order runs finish in; an item is validated ahead of
    its turn only when it can still count."""
    max_kept = max_kept or len(items) + 1
    n = len(items)
    verdicts: dict[int, Verdict] = {}
    running: dict[cf.Future[Verdict], int] = {}
    kept_by_group: Counter[str] = Counter()
    kept = 0
    done = 0
    with cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mine") as pool:
        while done < n:
            maybe_group: Counter[str] = Counter()
            maybe = 0
            for i in range(done, n):
                if len(running) >= workers:
                    break
                g = group(items[i])
                open_slot = kept_by_group[g] + maybe_group[g] < per_group and kept + maybe < max_kept
                if i not in verdicts and i not in running.values() and open_slot:
                    running[pool.submit(validate, items[i])] = i
                if i in running.values() or (i in verdicts and verdicts[i].keep):
                    maybe_group[g] += 1
                    maybe += 1
            while done < n:
                g = group(items[done])
                full = kept_by_group[g] >= per_group or kept >= max_kept
                if full:
                    on_commit(done, items[done], None)
                elif done in verdicts:
                    verdict = verdicts.pop(done)
                    if verdict.keep:
                        kept_by_group[g] += 1
                        kept += 1
                    on_commit(done, items[done], verdict)
                else:
                    break
                done += 1
            if done < n and running and done not in verdicts:
                finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for fut in finished:
                    verdicts[running.pop(fut)] = fut.result()


def _order(items: list[Mutant], seed: int, repo: str) -> list[Mutant]:
    """Shuffled by the seed, then round-robin over mutation kinds, so early candidates are varied."""
    rng = random.Random(f"{seed}:{repo}")
    items = list(items)
    rng.shuffle(items)
    by_kind: dict[str, list[Mutant]] = {}
    for m in items:
        by_kind.setdefault(m.kind, []).append(m)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    out: list[Mutant] = []
    while any(by_kind.values()):
        for k in kinds:
            if by_kind[k]:
                out.append(by_kind[k].pop(0))
    return out


def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


# a candidate as ordered_validation sees it: (mutant, instance id, gold patch, dedup keys)
_MutantItem = tuple[Mutant, str, str, list[str]]
# (commit, instance id, gold patch, test patch, dedup keys)
_CommitItem = tuple[CommitCandidate, str, str, str, list[str]]


@dataclass(frozen=True)
class _MutationBase:
    """The head of a source as every mutant of it is validated: its snapshot in the suite, its
    environment, its stable tests and which tests run each function."""

    commit: str
    snapshot: Path  # relative to the suite directory
    tree_id: str
    tree: Path
    env: TaskEnvironment | None
    durations: dict[str, float]
    stable: set[str]
    covering: dict[tuple[str, str], set[str]]
    test_files: list[str]
    seconds: float  # the whole suite's run, unmutated

    def mutant_timeout(self, limit: float) -> float:
        """How long a mutant's test run may take (see MUTANT_TIME_FACTOR)."""
        return min(limit, MUTANT_TIME_MARGIN_S + MUTANT_TIME_FACTOR * self.seconds)


class Miner:
    """One mining run into one suite directory."""

    def __init__(self, out: Path, options: MineOptions, progress: MineProgress | None = None) -> None:
        from legorl.tasks.check import get_backend

        self.out = out
        self.options = options
        self.progress = progress or QuietProgress()
        self.backend = get_backend(options.backend)
        self.cache = RunCache(enabled=options.use_cache)
        self.decontaminator = Decontaminator() if options.decontaminate else None
        self.tasks: dict[str, Task] = {}
        self.keys: dict[str, str] = {}  # dedup key -> who holds it ("suite:instance")
        self.report = MiningReport(suite=str(out), seed=options.seed, options=options.model_dump(mode="json"))
        self._lock = threading.Lock()
        self._trees_lock = threading.Lock()
        self._envs: dict[str, TaskEnvironment | None] = {}
        self._env_errors: dict[str, str] = {}
        self._written = 0

    # -- setup --------------------------------------------------------------------------------------
    def _load_existing(self, labels: set[str]) -> None:
        """Tasks already in the suite from other sources stay (and their keys count); the other mined
        suites' keys count as taken."""
        existing = read_records(self.out / SUITE_FILE)
        for rec in existing:
            if (rec.get("mined") or {}).get("source") in labels:
                continue
            task = Task.parse(rec, origin=str(self.out / SUITE_FILE))
            self.tasks[task.instance_id] = task
        self.keys.update({k: f"this suite: {v}" for k, v in dedup_keys(existing, "").items() if v in self.tasks})
        others = [Path(p) for p in self.options.dedup_against]
        if self.options.dedup_mined:
            others += [p for p in mined_suites().values() if p.parent.resolve() != self.out.resolve()]
        for path in others:
            for key, iid in dedup_keys(read_records(path)).items():
                self.keys.setdefault(key, f"{path.parent.name}: {iid}")

    # -- trees --------------------------------------------------------------------------------------
    def _snapshot(self, source: MiningSource, commit: str) -> tuple[Path, str]:
        """(relative path, git tree id) of ``commit``'s tree in the suite, exported once."""
        tree_id = run_git(["rev-parse", f"{commit}^{{tree}}"], source.git_dir).strip()
        rel = Path(TREES) / "_snap" / f"{source.repo.replace('/', '__')}-{tree_id[:12]}"
        dest = self.out / rel
        with self._trees_lock:
            if not dest.is_dir():
                tmp = dest.with_name(f".tmp-{dest.name}-{uuid.uuid4().hex[:6]}")
                try:
                    export_tree(source.git_dir, commit, tmp)
                    os.rename(tmp, dest)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
        return rel, tree_id

    def _mutant_tree(self, snapshot: Path, iid: str, path: str, text: str) -> Path:
        """``trees/<iid>``: hard links to the snapshot's files, the mutated file written anew."""
        rel = Path(TREES) / iid
        dest = self.out / rel
        with self._trees_lock:
            if dest.is_dir():
                shutil.rmtree(dest)
            tmp = dest.with_name(f".tmp-{iid}-{uuid.uuid4().hex[:6]}")
            shutil.copytree(self.out / snapshot, tmp, symlinks=True, copy_function=os.link)
            target = tmp / path
            target.unlink()
            target.write_text(text, encoding="utf-8")
            os.rename(tmp, dest)
        return rel

    # -- environments -------------------------------------------------------------------------------
    def _declaration_tree(self, source: MiningSource, commit: str) -> Path:
        """The files at ``commit`` that declare the environment (and say where the code imports from)."""
        tree_id = run_git(["rev-parse", f"{commit}^{{tree}}"], source.git_dir).strip()
        dest = mining_root() / "declarations" / tree_id
        if dest.is_dir():
            return dest
        names = run_git(["ls-tree", "-r", "--name-only", commit], source.git_dir).splitlines()
        wanted = [
            n
            for n in names
            if n in ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", "requirements.txt")
            or (n.count("/") == 0 and "requirements" in n and n.endswith(".txt"))
            or (n.startswith("requirements/") and n.endswith((".txt", ".in")))
            or (n.startswith("tests/requirements") and n.endswith(".txt"))
            or (n.startswith("src/") and n.count("/") <= 2 and n.endswith((".py",)))
        ]
        tmp = dest.with_name(f".tmp-{tree_id}-{uuid.uuid4().hex[:6]}")
        tmp.mkdir(parents=True)
        try:
            for name in wanted:
                target = tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(run_git(["show", f"{commit}:{name}"], source.git_dir), encoding="utf-8")
            try:
                os.rename(tmp, dest)
            except OSError:
                if not dest.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def environment(self, source: MiningSource, commit: str) -> TaskEnvironment | None:
        """The environment of ``source`` at ``commit`` (None: LEGO-RL's own interpreter, ``--python
        host``); TaskError naming what could not be resolved."""
        if self.options.python == "host":
            return None
        with self._lock:
            if commit in self._envs:
                return self._envs[commit]
            if commit in self._env_errors:
                raise TaskError(self._env_errors[commit])
        try:
            tree = self._declaration_tree(source, commit)
            declared = mining_env.read_declared(tree)
            day = date.fromisoformat(run_git(["show", "-s", "--format=%cs", commit], source.git_dir).strip())
            python = self.options.python
            if python == "auto":
                python = mining_env.choose_python(declared.requires_python, day)
            where = f"{source.repo} at {commit[:12]}"
            resolved = mining_env.resolve(declared, python, mining_env.index_date(day), where)
            env = mining_env.task_environment(resolved, tree)
        except TaskError as exc:
            with self._lock:
                self._env_errors[commit] = str(exc)
            raise
        with self._lock:
            self._envs[commit] = env
        return env

    # -- the run ------------------------------------------------------------------------------------
    def mine(self, specs: list[str]) -> MiningReport:
        started, cpu = time.monotonic(), cpu_seconds()
        if self.options.repo and len(specs) > 1:
            raise TaskError("--repo names the repository of a single source; give one source")
        sources: list[MiningSource | tuple[str, str]] = []
        for spec in specs:
            try:
                sources.append(open_source(spec, repo=self.options.repo, ref=self.options.ref))
            except TaskError as exc:
                sources.append((spec, str(exc)))
        self._load_existing({s.label for s in sources if isinstance(s, MiningSource)})
        if self.decontaminator is not None:
            self.report.decontamination = {
                "swebench_dir": str(self.decontaminator.swebench_dir),
                "available": self.decontaminator.available,
                "suites": self.decontaminator.suites_read,
            }
        else:
            self.report.decontamination = {"available": False, "skipped": "--no-decontaminate"}
        for source in sources:
            if isinstance(source, tuple):
                self.report.sources.append(SourceReport(source=source[0], errors=[source[1]]))
                self.progress.note(f"{source[0]}: {source[1]}")
                continue
            rep = SourceReport(source=source.label, repo=source.repo, head=source.head)
            self.report.sources.append(rep)
            if "mutations" in self.options.methods:
                self._run_method(rep, "mutations", self._mutations, source)
            if "commits" in self.options.methods:
                if source.has_history:
                    self._run_method(rep, "commits", self._commits, source)
                else:
                    rep.methods["commits"] = MethodReport(skipped={"no history (a single commit)": 1})
            self._write()
        self.report.wall_s = round(time.monotonic() - started, 1)
        self.report.cpu_s = round(cpu_seconds() - cpu, 1)
        self.report.cpu_source = cpu_meter.SOURCE["value"]
        self._write()
        self._prune_trees()
        return self.report

    def _prune_trees(self) -> None:
        """Remove the mutants' trees no task of the suite uses any more (tasks a new run replaced);
        snapshots stay (the next run of their source starts from them)."""
        used = {Path(t.source_dir).name for t in self.tasks.values() if t.source_dir is not None}
        root = self.out / TREES
        for entry in root.iterdir() if root.is_dir() else []:
            if entry.name not in used and entry.name != "_snap" and not entry.name.startswith("."):
                shutil.rmtree(entry, ignore_errors=True)

    def _run_method(
        self,
        rep: SourceReport,
        name: str,
        body: Callable[[MiningSource, SourceReport], None],
        source: MiningSource,
    ) -> None:
        started, cpu = time.monotonic(), cpu_seconds()
        try:
            body(source, rep)
        except LegoRLError as exc:
            rep.errors.append(f"{name}: {exc}")
            self.progress.note(f"{rep.source}: {name}: {exc}")
        if name in rep.methods:
            rep.methods[name].wall_s = round(time.monotonic() - started, 1)
            rep.methods[name].cpu_s = round(cpu_seconds() - cpu, 1)

    def _write(self) -> None:
        write_suite(self.out, list(self.tasks.values()))
        counts = Counter(t.mined.method for t in self.tasks.values() if t.mined is not None)
        repos = Counter(t.repo for t in self.tasks.values())
        by_source: dict[str, dict[str, int]] = {}
        for t in self.tasks.values():
            if t.mined is not None:
                row = by_source.setdefault(t.mined.source, {})
                row[t.mined.method] = row.get(t.mined.method, 0) + 1
        self.report.totals = {
            "tasks": len(self.tasks),
            "by_method": dict(sorted(counts.items())),
            "by_repo": dict(sorted(repos.items())),
            "by_source": dict(sorted(by_source.items())),
        }
        self.report.runs = {"cache_hits": self.cache.hits, "cache_misses": self.cache.misses}
        write_json(self.out / REPORT_FILE, self.report.model_dump(mode="json"))
        self._written = len(self.tasks)

    def _duplicate(self, mrep: MethodReport, iid: str, keys: list[str], claim: bool = False) -> bool:
        """Whether a task already holds one of ``keys`` (reported); ``claim``: if not, ``iid`` holds them now."""
        with self._lock:
            held = next((self.keys[k] for k in keys if k in self.keys), None)
            if held is not None:
                mrep.duplicates.append({"candidate": iid, "of": held, "key": next(k for k in keys if k in self.keys)})
                return True
            if claim:
                for key in keys:
                    self.keys[key] = f"this run: {iid}"
        return False

    def _add(self, task: Task) -> None:
        with self._lock:
            self.tasks[task.instance_id] = task
            if len(self.tasks) - self._written >= 25:
                self._write()

    # -- mutations ----------------------------------------------------------------------------------
    def _mutations(self, source: MiningSource, rep: SourceReport) -> None:
        mrep = rep.methods.setdefault("mutations", MethodReport())
        base = self._mutation_baseline(source, rep)
        candidates = [
            m
            for rel in source_files(base.tree)
            for m in mutants(base.tree, rel)
            if (m.path, m.function) in base.covering
        ]
        mrep.candidates = len(candidates)
        ordered = self._mutation_candidates(source, mrep, base, candidates)

        def commit_verdict(_i: int, item: _MutantItem, verdict: Verdict | None) -> None:
            self._commit_verdict(mrep, item[1], item[3], verdict)

        self.progress.phase(f"{source.repo}: mutations", len(ordered))
        ordered_validation(
            ordered,
            lambda item: self._validate_mutant(source, base, item),
            lambda item: f"{item[0].path}::{item[0].function}",
            per_group=self.options.per_function,
            max_kept=self.options.max_mutations,
            workers=self.options.workers,
            on_commit=commit_verdict,
        )

    def _mutation_baseline(self, source: MiningSource, rep: SourceReport) -> _MutationBase:
        """The head's snapshot and environment, its test runs (plain and with the coverage probe, into
        ``rep.baseline``) and which tests run each function; TaskError when no test passes."""
        commit = source.head
        snapshot, tree_id = self._snapshot(source, commit)
        tree = self.out / snapshot
        env = self.environment(source, commit)
        if env is not None:
            rep.environment = {"python": env.python, "index_date": env.index_date, "pins": len(env.requirements)}
        self.progress.note(f"{source.repo}: running its tests at {commit[:12]} (plain and with the coverage probe)")
        base = RunSpec(source.git_dir, commit, tree_id, env, timeout=self.options.timeout)
        plain = run_tests(base, self.backend, self.cache)
        if not plain.ok:
            raise TaskError(f"the test suite at {commit[:12]} gives no result: {plain.problem}")
        # a large suite: a mutant runs the tests that call its function, not whole files of them
        by_test = len(plain.passed) > self.options.per_test_suite
        probed = run_tests(replace(base, coverage=True, coverage_tests=by_test), self.backend, self.cache)
        if not probed.ok:
            raise TaskError(f"the test suite at {commit[:12]} gives no result with the probe: {probed.problem}")
        stable = plain.passed & probed.passed
        rep.baseline = {
            "tests": len(plain.tests),
            "passing": len(plain.passed),
            "stable": len(stable),
            "collect_errors": sorted(plain.collect_errors)[:20],
            "seconds": plain.seconds,
        }
        if not stable:
            raise TaskError(
                f"no test passes at {commit[:12]} ({len(plain.tests)} run; {plain.problem or 'all failing'})"
            )
        covering = self._coverage(tree, probed)
        test_files = sorted({p for p in self._tree_files(tree) if is_test_suite_file(p)})
        return _MutationBase(
            commit, snapshot, tree_id, tree, env, plain.durations, stable, covering, test_files, plain.seconds
        )

    def _mutation_candidates(
        self, source: MiningSource, mrep: MethodReport, base: _MutationBase, candidates: list[Mutant]
    ) -> list[_MutantItem]:
        """The mutants in the seed's order, less the decontaminated and the duplicates, with their
        instance ids, gold patches and dedup keys."""
        ordered = []
        for m in _order(candidates, self.options.seed, source.repo):
            iid = f"{source.repo.replace('/', '__')}.mut-{m.digest}"
            if self._excluded(source, mrep, iid, {(m.path, m.function)}):
                continue
            gold = reverse_diff(
                Mutation(m.path, m.line, m.kind, m.before, m.after, self._text(base.tree, m.path), m.mutated)
            )
            keys = [f"mutation:{source.repo.lower()}:{m.key}", f"diff:{diff_key(gold)}"]
            if not self._duplicate(mrep, iid, keys):
                ordered.append((m, iid, gold, keys))
        return ordered

    def _validate_mutant(self, source: MiningSource, base: _MutationBase, item: _MutantItem) -> Verdict:
        """Run the tests that cover the mutant's function on the mutated tree; kept when some stable
        tests break (at most ``max_fail``) and the grader confirms the task."""
        m = item[0]
        selected = base.covering[(m.path, m.function)]  # test files and test ids
        spec = RunSpec(
            source.git_dir,
            base.commit,
            base.tree_id,
            base.env,
            edits=((m.path, m.mutated),),
            tests=tuple(sorted(selected)) if GLOBAL not in selected else (),
            timeout=base.mutant_timeout(self.options.timeout),
            max_fail=self.options.max_fail + 1,
        )
        before = run_tests(spec, self.backend, self.cache)
        spent = 0.0 if before.cached else before.seconds
        if not before.ok:
            return Verdict(False, f"environment: {before.problem}"[:120], run_seconds=spent)

        def ran(test: str) -> bool:
            return GLOBAL in selected or test in selected or _test_file(test) in selected

        f2p = sorted(t for t in base.stable if ran(t) and before.tests.get(t) != "passed")
        if not f2p:
            return Verdict(False, "no test breaks", run_seconds=spent)
        if len(f2p) > self.options.max_fail:
            return Verdict(False, f"more than {self.options.max_fail} tests break", run_seconds=spent)
        f2p_files = {_test_file(t) for t in f2p}
        p2p = sorted(
            t for t in base.stable if ran(t) and _test_file(t) in f2p_files and before.tests.get(t) == "passed"
        )
        verdict = Verdict(True, f2p=f2p, p2p=p2p, before=before, run_seconds=spent)
        verdict.task = self._mutant_task(source, base, item, verdict)
        return self._confirmed(verdict, base.tree_id)

    def _mutant_task(self, source: MiningSource, base: _MutationBase, item: _MutantItem, verdict: Verdict) -> Task:
        """The task of a mutant that broke ``verdict.f2p`` (its tree written into the suite)."""
        m, iid, gold, keys = item
        f2p, p2p = verdict.f2p, verdict.p2p
        f2p_files = {_test_file(t) for t in f2p}
        files_changed, lines = diff_size(gold)
        return Task(
            instance_id=iid,
            repo=source.repo,
            base_commit=base.commit,
            patch=gold,
            problem_statement=_statement(source.repo, verdict),
            FAIL_TO_PASS=f2p,
            PASS_TO_PASS=p2p,
            environment_setup_commit=base.commit,
            source_dir=self._mutant_tree(base.snapshot, iid, m.path, m.mutated),
            test_files=base.test_files,
            environment=base.env,
            mined=MinedInfo(
                method="mutation",
                source=source.label,
                snapshot=base.commit,
                mutation=m.kind,
                functions=[f"{m.path}::{m.function}"],
                files_changed=files_changed,
                lines_changed=lines,
                fail_to_pass=len(f2p),
                pass_to_pass=len(p2p),
                test_seconds=round(
                    sum(base.durations.get(t, 0.0) for t in base.stable if _test_file(t) in f2p_files), 2
                ),
                dedup_keys=keys,
            ),
        )

    def _commit_verdict(self, mrep: MethodReport, iid: str, keys: list[str], verdict: Verdict | None) -> None:
        """A candidate's verdict, in candidate order: its task joins the suite unless a task kept
        earlier in this run holds one of its keys."""
        if verdict is not None and verdict.keep and self._duplicate(mrep, iid, keys, claim=True):
            verdict = Verdict(False, "duplicate of a task kept earlier in this run")
        self._tally(mrep, verdict)
        if verdict is not None and verdict.keep and verdict.task is not None:
            self._add(verdict.task)

    def _confirmed(self, verdict: Verdict, tree_id: str) -> Verdict:
        """``verdict`` if the real grader (:func:`legorl.grading.grader.grade`, every defense on) resolves
        its task with the gold patch — every FAIL_TO_PASS and PASS_TO_PASS test seen passing, no
        blocking flag — else a rejection saying why. What the grader said is cached like a test run."""
        task = verdict.task
        if not self.options.confirm or task is None:
            return verdict
        volatile = {"instance_id", "problem_statement", "source_dir", "mined"}
        key = run_key_of([CONFIRM_FORMAT, tree_id, task.model_dump(mode="json", exclude=volatile)])
        why = self.cache.get_note(key)
        if why is None:
            from legorl.grading.grader import grade

            absolute = task.model_copy(update={"source_dir": self.out / (task.source_dir or "")})
            report = grade(absolute, task.patch, self.backend, timeout=self.options.timeout)
            blocking = sorted({f.kind for f in report.flag_details if f.severity == "blocking"})
            missing = [t for t in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS] if report.tests.get(t) != "passed"]
            if report.status != "ok":
                why = f"grader: {report.status}: {_short(report.cause or '', 100)}"
            elif blocking:
                why = f"grader: flags {', '.join(blocking)}"
            elif missing:
                why = f"grader: {len(missing)} expected tests not passing"
            elif not report.resolved:
                why = "grader: not resolved"
            else:
                why = ""
            if report.status == "ok":  # an environment failure is no verdict: ask again next time
                self.cache.put_note(key, why)
        if why:
            return Verdict(False, why, run_seconds=verdict.run_seconds)
        return verdict

    def _coverage(self, tree: Path, probed: RunResult) -> dict[tuple[str, str], set[str]]:
        """(file, function) → the test files (a module's import counts for all its tests) or test ids
        that run it (``<global>``: the session itself does)."""
        indexes: dict[str, FunctionIndex] = {}
        out: dict[tuple[str, str], set[str]] = {}
        for bucket, entries in (probed.coverage or {}).items():
            for path, first_line in entries:
                if path not in indexes:
                    try:
                        indexes[path] = FunctionIndex((tree / path).read_text(encoding="utf-8"))
                    except (OSError, UnicodeDecodeError):
                        indexes[path] = FunctionIndex("")
                name = indexes[path].code_object(first_line)
                if name is not None:
                    out.setdefault((path, name), set()).add(bucket)
        return out

    @staticmethod
    def _text(tree: Path, path: str) -> str:
        return (tree / path).read_text(encoding="utf-8")

    @staticmethod
    def _tree_files(tree: Path) -> list[str]:
        return [p.relative_to(tree).as_posix() for p in tree.rglob("*.py")]

    def _tally(self, mrep: MethodReport, verdict: Verdict | None) -> None:
        with self._lock:
            if verdict is None:
                mrep.not_tried += 1
            else:
                mrep.validated += 1
                mrep.run_seconds = round(mrep.run_seconds + verdict.run_seconds, 1)
                if verdict.keep:
                    mrep.kept += 1
                else:
                    mrep.rejected[verdict.reason] = mrep.rejected.get(verdict.reason, 0) + 1
        self.progress.step(verdict is not None and verdict.keep)

    def _excluded(self, source: MiningSource, mrep: MethodReport, iid: str, touched: set[tuple[str, str]]) -> bool:
        if self.decontaminator is None:
            return False
        hit = self.decontaminator.function_conflict(source.repo, source.git_dir, touched)
        if hit is None:
            return False
        mrep.excluded.append({"candidate": iid, "instance": hit[0], "reason": hit[1]})
        return True

    # -- commits ------------------------------------------------------------------------------------
    def _commits(self, source: MiningSource, rep: SourceReport) -> None:
        crep = rep.methods.setdefault("commits", MethodReport())
        scan = scan_commits(
            source.git_dir, source.head, max_files=self.options.max_files, max_lines=self.options.max_lines
        )
        crep.skipped = dict(sorted(scan.skipped.items()))
        crep.candidates = len(scan.candidates)
        ordered = self._commit_candidates(source, crep, scan.candidates)

        def commit_verdict(_i: int, item: _CommitItem, verdict: Verdict | None) -> None:
            self._commit_verdict(crep, item[1], item[4], verdict)

        self.progress.phase(f"{source.repo}: commits", len(ordered))
        ordered_validation(
            ordered,
            lambda item: self._validate_commit(source, item),
            lambda item: item[1],
            per_group=1,
            max_kept=self.options.max_commits,
            workers=self.options.workers,
            on_commit=commit_verdict,
        )

    def _commit_candidates(
        self, source: MiningSource, crep: MethodReport, candidates: list[CommitCandidate]
    ) -> list[_CommitItem]:
        """The commits with a test module to run, less the decontaminated and the duplicates, with
        their instance ids, gold and test patches and dedup keys."""
        git = source.git_dir
        ordered = []
        for c in candidates:
            iid = f"{source.repo.replace('/', '__')}.commit-{c.sha[:12]}"
            if not c.run_files:
                crep.skipped["no test module to run"] = crep.skipped.get("no test module to run", 0) + 1
                continue
            gold = run_git(
                ["diff", "--no-renames", "--no-color", "--no-ext-diff", c.parent, c.sha, "--", *c.source_files], git
            )
            tests = run_git(
                ["diff", "--no-renames", "--no-color", "--no-ext-diff", c.parent, c.sha, "--", *c.test_side], git
            )
            if self.decontaminator is not None:
                fix = self.decontaminator.fix_commit(source.repo, git, c.parent, gold)
                if fix is not None:
                    crep.excluded.append({"candidate": iid, "instance": fix[0], "reason": f"{c.sha[:12]} {fix[1]}"})
                    continue
            if self.decontaminator is not None and self.decontaminator.instances(source.repo, git):
                touched = edited_functions(gold + tests, self._reader(git, c.parent), self._reader(git, c.sha))
                if self._excluded(source, crep, iid, touched):
                    continue
            keys = [f"diff:{diff_key(gold)}"]
            if not self._duplicate(crep, iid, keys):
                ordered.append((c, iid, gold, tests, keys))
        return ordered

    def _validate_commit(self, source: MiningSource, item: _CommitItem) -> Verdict:
        """Run the commit's test modules at its parent with its new tests, without and with its fix;
        kept when some tests fail before and pass after and the grader confirms the task."""
        c, git = item[0], source.git_dir
        try:
            env = self.environment(source, c.parent)
        except TaskError as exc:
            return Verdict(False, "environment: " + _short(str(exc)))
        tree_id = run_git(["rev-parse", f"{c.parent}^{{tree}}"], git).strip()
        try:
            test_edits = tuple((p, self._file_at(git, c.sha, p)) for p in c.test_side)
            gold_edits = tuple((p, self._file_at(git, c.sha, p)) for p in c.source_files)
        except UnicodeDecodeError:
            return Verdict(False, "a changed file is not UTF-8 text")
        spec = RunSpec(git, c.parent, tree_id, env, edits=test_edits, tests=c.run_files, timeout=self.options.timeout)
        before = run_tests(spec, self.backend, self.cache)
        after = run_tests(replace(spec, edits=test_edits + gold_edits), self.backend, self.cache)
        spent = sum(r.seconds for r in (before, after) if not r.cached)
        for r in (before, after):
            if not r.ok:
                return Verdict(False, "environment: " + _short(r.problem), run_seconds=spent)
        f2p = sorted(after.passed - before.passed)
        if not f2p:
            return Verdict(False, "no test fails before and passes after", run_seconds=spent)
        p2p = sorted(after.passed & before.passed)
        verdict = Verdict(True, f2p=f2p, p2p=p2p, before=before, after=after, run_seconds=spent)
        verdict.task = self._commit_task(source, item, verdict, env, after)
        return self._confirmed(verdict, tree_id)

    def _commit_task(
        self, source: MiningSource, item: _CommitItem, verdict: Verdict, env: TaskEnvironment | None, after: RunResult
    ) -> Task:
        """The task of a commit whose fix made ``verdict.f2p`` pass (its parent's snapshot the source)."""
        c, iid, gold, tests, keys = item
        git = source.git_dir
        snapshot, _ = self._snapshot(source, c.parent)
        files_changed, lines = diff_size(gold)
        return Task(
            instance_id=iid,
            repo=source.repo,
            base_commit=c.parent,
            patch=gold,
            test_patch=tests,
            problem_statement=_statement(source.repo, verdict),
            FAIL_TO_PASS=verdict.f2p,
            PASS_TO_PASS=verdict.p2p,
            environment_setup_commit=c.parent,
            source_dir=snapshot,
            test_files=sorted({p for p in self._tree_files(self.out / snapshot) if is_test_suite_file(p)}),
            environment=env,
            mined=MinedInfo(
                method="commit",
                source=source.label,
                snapshot=c.parent,
                commit=c.sha,
                functions=sorted(f"{p}::{q}" for p, q in edited_functions(gold, self._reader(git, c.parent))),
                files_changed=files_changed,
                lines_changed=lines,
                fail_to_pass=len(verdict.f2p),
                pass_to_pass=len(verdict.p2p),
                test_seconds=round(sum(after.durations.get(t, 0.0) for t in after.tests), 2),
                dedup_keys=keys,
            ),
        )

    @staticmethod
    def _reader(git: Path, commit: str) -> Callable[[str], str | None]:
        def read(path: str) -> str | None:
            try:
                return run_git(["show", f"{commit}:{path}"], git)
            except TaskError:
                return None

        return read

    @staticmethod
    def _file_at(git: Path, commit: str, path: str) -> str | None:
        """The text of ``path`` at ``commit`` (None: deleted there). UnicodeDecodeError for bytes."""
        if not run_git(["ls-tree", "--name-only", commit, "--", path], git).strip():
            return None
        raw = subprocess.run(
            git_argv("show", f"{commit}:{path}"), cwd=git, env=host_git_env(git), capture_output=True, timeout=120
        ).stdout
        return raw.decode("utf-8")


def _statement(repo: str, verdict: Verdict) -> str:
    """The problem statement of a kept candidate, from its *before* run: a test that did not even
    run there (its module failed to import) is quoted with its module's collection error."""
    before = verdict.before
    if before is None:
        return problem_statement(repo, verdict.f2p, {}, {})
    messages = {
        t: f"{before.collect_errors[_test_file(t)]} (collecting {_test_file(t)})"
        for t in verdict.f2p
        if t not in before.tests and _test_file(t) in before.collect_errors
    }
    return problem_statement(repo, verdict.f2p, {**before.messages, **messages}, before.frames)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def mine(sources: list[str], out: Path, options: MineOptions, progress: MineProgress | None = None) -> MiningReport:
    """Mine ``sources`` into the suite directory ``out`` (see the module docstring)."""
    return Miner(out, options, progress).mine(sources)
