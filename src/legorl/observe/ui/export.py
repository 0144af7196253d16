"""``legorl ui export RUN_DIR --out DIR``: the UI as static files that open from ``file://``.

The same templates as the server render every view into ``DIR`` with relative links: ``index.html``,
``run/<name>/index.html`` (overview and curves), ``grid.html``, ``rollouts.html`` (every rollout;
the filters work in the browser on the rows' data attributes), ``rollout/<id>.html`` (each
trajectory), ``compare-<a>-<b>.html`` (each rollout beside the previous one of its task), and
``static/`` (the script and style). No server, no network: the snapshot is what the run held when
it was taken.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from legorl.observe.ui.pages import STATIC, Links, Pages
from legorl.observe.ui.server import open_runs


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def export_snapshot(run_dir: str | Path, out: str | Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = Path(out)
    runs = open_runs([run_dir])
    pages = Pages(runs)
    (name,) = runs
    run = runs[name]
    try:
        (out / "static").mkdir(parents=True, exist_ok=True)
        for asset in STATIC.iterdir():
            shutil.copyfile(asset, out / "static" / asset.name)
        rows = run.rollouts(limit=-1, newest_first=False)
        pairs: set[frozenset[str]] = set()
        last_of_task: dict[str, str] = {}
        for r in rows:  # each rollout beside the previous one of its task
            prev = last_of_task.get(r["task_id"])
            if prev is not None:
                pairs.add(frozenset((prev, r["rollout_id"])))
            last_of_task[r["task_id"]] = r["rollout_id"]
        top = Links(static=True, root="", compare_pairs=pairs)
        deep = Links(static=True, root="../../", compare_pairs=pairs)
        deeper = Links(static=True, root="../../../", compare_pairs=pairs)
        _write(out / "index.html", pages.home(top))
        _write(out / "compare.html", pages.compare_runs([name], top))
        base = out / "run" / _safe_dir(deep, name)
        _write(base / "index.html", pages.overview(name, deep))
        _write(base / "grid.html", pages.grid(name, deep))
        _write(base / "rollouts.html", pages.rollouts(name, deep, {}, page_size=None))
        for r in rows:
            rid = r["rollout_id"]
            html = pages.trajectory(name, deeper, rid)
            if html is not None:
                _write(out / deeper.rollout(name, rid).removeprefix(deeper.root), html)
        compared = 0
        for pair in pairs:
            a, b = sorted(pair)
            html = pages.compare_rollouts(name, deep, a, b)
            if html is not None:
                _write(out / deep.compare_rollouts(name, a, b).removeprefix(deep.root), html)
                compared += 1
    finally:
        run.close()
    return {
        "out": str(out),
        "index": str((out / "index.html").resolve()),
        "rollouts": len(rows),
        "comparisons": compared,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _safe_dir(links: Links, name: str) -> str:
    # the directory part of links.run(name): "<root>run/<safe name>/index.html"
    return links.run(name).removeprefix(links.root).split("/")[1]


__all__ = ["export_snapshot"]
