"""The full wave-2 sweep: every generated attacker variant graded on a trivial, an easy and a medium task
(issue 10's benchmark run; the slow test ``test_generated_variants_sweep`` grades its first third: every
variant on one of the three tasks, as this script orders its jobs).

    nice -n 5 .venv/bin/python tests/grading/sweep_wave2.py [--workers 2] [--out sweep.jsonl]

One JSON line per grading (variant, task, reward, blocking kinds, seconds, stopped) and a summary at
the end: attempts, stopped, got through, by payload. Jobs are ordered so that every variant is graded
on one task before any is graded on a second (a cut-short run still covers every variant).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import attackers_wave2 as attackers
from test_attacks_wave2 import TASKS, attack_diff

from legorl.grading.grader import grade
from legorl.sandbox.bwrap import BwrapBackend
from legorl.tasks.loader import get_task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--start", type=int, default=0, help="Skip the first N jobs (resume a cut-short sweep).")
    args = ap.parse_args()
    variants = attackers.variants()
    names = sorted(variants)
    jobs = [(names[i], TASKS[(i + k) % 3]) for k in range(3) for i in range(len(names))][args.start :]
    backend = BwrapBackend(root=Path(tempfile.mkdtemp(prefix="legorl-sweep-")))
    out = args.out.open("a") if args.out else sys.stdout

    def one(job: tuple[str, str]) -> dict:
        name, tid = job
        code, kinds = variants[name]
        task = get_task(tid)
        t = time.monotonic()
        r = grade(task, attack_diff(task, code), backend)
        blocking = sorted({f.kind for f in r.flag_details if f.severity == "blocking"})
        return {
            "variant": name,
            "task": tid,
            "status": r.status,
            "reward": r.reward,
            "blocking": blocking,
            "s": round(time.monotonic() - t, 2),
            "stopped": r.status == "ok" and r.reward == 0.0 and bool(set(blocking) & kinds),
        }

    rows = []
    with ThreadPoolExecutor(args.workers) as pool:
        for row in pool.map(one, jobs):
            rows.append(row)
            print(json.dumps(row), file=out, flush=True)
    by_payload = Counter(r["variant"].split(".")[0] for r in rows if not r["stopped"])
    print(
        json.dumps(
            {
                "summary": {
                    "attempts": len(rows),
                    "variants": len(names),
                    "stopped": sum(r["stopped"] for r in rows),
                    "got_through": sum(r["reward"] > 0 for r in rows),
                    "not_stopped_by_payload": dict(by_payload),
                }
            }
        ),
        file=out,
        flush=True,
    )


if __name__ == "__main__":
    main()
