"""The full wave-3 sweep (issue 37): every attacker of ``attackers_wave3.py`` on every task of its family
(trivial, easy and medium; family 7 on the task whose FAIL_TO_PASS test calls ``pytest.raises``, family 8
on the parametrized variants of trivial, easy and medium: ``attackers_wave3.PARAM_TASKS``), the oracles
on a parametrized test (``attackers_wave3.PARAM_ORACLES``, as family "param_oracles": held means reward 0), and every gold
patch of the built-in suite, graded as the grader sees any agent's diff.

    nice -n 5 .venv/bin/python tests/grading/sweep_wave3.py [--workers 2] [--out sweep.jsonl]
        [--guard-from REV]   # grade with the guard and twins of a git revision (the "before" figures)
        [--no-gold] [--families F ...]
        [--real]             # also every attacker on a real SWE-bench instance per runner (needs the data)

One JSON line per grading and a summary: per family, caught/total (reward 0 and a blocking flag of the
family's kinds; for an attack with no kinds, reward 0 and its tests failing), and the gold patches'
false positives (reward below 1, or any blocking flag). On a real instance (``--real``: marshmallow-1359
under pytest, sympy-12096 under sympy's runner, attackers appended to the file the gold patch fixes) an
attacker holds when it earns nothing and, if a FAIL_TO_PASS test passed, a blocking flag names it (many
generic attackers break a real package and fail honestly: ``test_attacks_swebench.py``'s rule).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import attackers_wave3 as attackers
from test_attacks_swebench import attack_diff as real_attack_diff
from test_attacks_wave2 import attack_diff
from test_attacks_wave3 import tasks_for

from legorl.grading import behaviour
from legorl.grading.grader import grade
from legorl.sandbox.bwrap import BwrapBackend
from legorl.tasks.loader import load_suite

REAL = [("swebench-lite-dev", "marshmallow-code__marshmallow-1359"), ("swebench-verified", "sympy__sympy-12096")]


def _use_guard_from(rev: str) -> None:
    """Ship the guard and twin sources of ``rev`` instead of the working tree's (the runner stays)."""
    root = Path(__file__).resolve().parents[2]
    sources = tuple(
        subprocess.run(
            ["git", "show", f"{rev}:src/legorl/grading/{name}"], cwd=root, capture_output=True, text=True, check=True
        ).stdout
        for name in behaviour.GUARD_SOURCES
    )
    behaviour._guard_sources = lambda: sources  # type: ignore[assignment]
    behaviour._guard_compiled = lambda: ("", "")  # type: ignore[assignment]  # compiled in the sandbox


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--guard-from", default=None, help="A git revision whose guard and twins to grade with.")
    ap.add_argument("--no-gold", action="store_true", help="Skip the gold patches.")
    ap.add_argument("--families", nargs="*", default=None, help="Only these families (as named in FAMILIES).")
    ap.add_argument("--real", action="store_true", help="Also grade every attacker on real SWE-bench instances.")
    ap.add_argument("--real-only", action="store_true", help="Only the real instances (implies --real --no-gold).")
    args = ap.parse_args()
    if args.guard_from:
        _use_guard_from(args.guard_from)
    if args.real_only:
        args.real, args.no_gold = True, True
    jobs: list[tuple[str, str, str, str, set[str]]] = [
        (family, name, tid, code, kinds)
        for family, found in {**attackers.FAMILIES, "beyond_the_issue": attackers.NEW}.items()
        for name, (code, kinds) in found.items()
        for tid in tasks_for(family)
        if (args.families is None or family in args.families) and not args.real_only
    ]
    if not args.real_only and (args.families is None or "param_oracles" in args.families):
        # the oracles that read the test rather than pytest: held means reward 0
        jobs += [
            ("param_oracles", name, tid, code, {"any"})
            for name, (code, tasks) in attackers.PARAM_ORACLES.items()
            for tid in tasks
        ]
    if args.real:
        jobs += [
            (f"real:{family}", name, f"{suite}/{iid}", code, kinds)
            for suite, iid in REAL
            for family, found in {**attackers.FAMILIES, "beyond_the_issue": attackers.NEW}.items()
            for name, (code, kinds) in found.items()
            if args.families is None or family in args.families
        ]
    if not args.no_gold:
        jobs += [("gold", t.instance_id, t.instance_id, "", set()) for t in load_suite("builtin")]
    backend = BwrapBackend(root=Path(tempfile.mkdtemp(prefix="legorl-sweep3-")))
    out = args.out.open("a") if args.out else sys.stdout

    def one(job: tuple[str, str, str, str, set[str]]) -> dict:
        family, name, tid, code, kinds = job
        t = time.monotonic()
        if family.startswith("real:"):
            suite, iid = tid.split("/")
            (task,) = load_suite(suite, instances=[iid])
            r = grade(task, real_attack_diff(task, code), backend, timeout=600)
        else:
            task = attackers.load_task(tid)
            diff = task.patch if family == "gold" else attack_diff(task, code)
            r = grade(task, diff, backend)
        blocking = sorted({f.kind for f in r.flag_details if f.severity == "blocking"})
        if family.startswith("real:"):
            f2p = any(r.tests.get(n) in ("passed", "xfail") for n in task.FAIL_TO_PASS)
            held = r.status == "ok" and r.reward == 0.0 and (bool(blocking) or not f2p)
        elif family == "gold":
            held = r.status == "ok" and r.reward == 1.0 and not blocking
        elif kinds == {"any"}:
            held = r.status == "ok" and r.reward == 0.0
        elif kinds:
            held = r.status == "ok" and r.reward == 0.0 and bool(set(blocking) & kinds)
        else:
            held = r.status == "ok" and r.reward == 0.0 and all(r.tests.get(n) != "passed" for n in task.FAIL_TO_PASS)
        return {
            "family": family,
            "attack": name,
            "task": tid,
            "status": r.status,
            "reward": r.reward,
            "blocking": blocking,
            "info": sorted({f.kind for f in r.flag_details if f.severity == "info"}),
            "s": round(time.monotonic() - t, 2),
            "held": held,
        }

    rows = []
    with ThreadPoolExecutor(args.workers) as pool:
        for row in pool.map(one, jobs):
            rows.append(row)
            print(json.dumps(row), file=out, flush=True)
    total, held = Counter(r["family"] for r in rows), Counter(r["family"] for r in rows if r["held"])
    summary = {family: f"{held[family]}/{n}" for family, n in total.items()}
    print(json.dumps({"summary": summary, "guard_from": args.guard_from or "working tree"}), file=out, flush=True)


if __name__ == "__main__":
    main()
