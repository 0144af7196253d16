"""Page rendering shared by the server and the static export: one Jinja2 environment, one function
per view, each taking a :class:`Links` that says how pages link to each other (server routes with
query strings, or relative ``.html`` files)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape

from legorl.observe.rundata import RunData

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
PAGE_SIZE = 50
FILTERS = ("status", "task", "harness", "step", "flag")


@dataclass
class Links:
    """How a page names another: ``static`` pages (export) link to files relative to the snapshot
    root; the server links to its routes."""

    static: bool = False
    root: str = "/"  # static: the relative path from the page to the snapshot root ("../../")
    # static: the rollout pairs a side-by-side page was written for (None: any pair can be served)
    compare_pairs: set[frozenset[str]] | None = None

    def can_compare(self, a: str, b: str) -> bool:
        return self.compare_pairs is None or frozenset((a, b)) in self.compare_pairs

    def run(self, run: str, view: str = "", **q: Any) -> str:
        if self.static:
            return f"{self.root}run/{_safe(run)}/{view or 'index'}.html"
        qs = urlencode({k: v for k, v in q.items() if v not in (None, "")})
        return f"/run/{quote(run)}/{view}" + (f"?{qs}" if qs else "")

    def rollout(self, run: str, rollout_id: str) -> str:
        if self.static:
            return f"{self.root}run/{_safe(run)}/rollout/{_safe(rollout_id)}.html"
        return f"/run/{quote(run)}/rollout/{quote(rollout_id)}"

    def compare_rollouts(self, run: str, a: str, b: str) -> str:
        if self.static:
            a, b = sorted((a, b))
            return f"{self.root}run/{_safe(run)}/compare-{_safe(a)}-{_safe(b)}.html"
        return f"/run/{quote(run)}/compare?" + urlencode({"a": a, "b": b})

    def compare_runs(self, runs: list[str]) -> str:
        return f"{self.root}compare.html" if self.static else "/compare?" + urlencode({"runs": ",".join(runs)})

    def home(self) -> str:
        return f"{self.root}index.html" if self.static else "/"

    def asset(self, name: str) -> str:
        return f"{self.root}static/{name}" if self.static else f"/static/{name}"

    def events(self, run: str, **q: Any) -> str | None:
        if self.static:
            return None
        qs = urlencode({k: v for k, v in q.items() if v not in (None, "")})
        return f"/api/run/{quote(run)}/events" + (f"?{qs}" if qs else "")


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def heat_style(diff: float | None) -> str:
    """Background of a token: red where the engine gave the token more probability than the
    trainer, blue where less; the alpha grows with |Δ logprob| (saturating at 2 nats)."""
    if diff is None or not math.isfinite(diff):
        return ""
    a = min(abs(diff) / 2.0, 1.0) * 0.85
    if a < 0.02:
        return ""
    return f"background:rgba({'220,38,38' if diff > 0 else '37,99,235'},{a:.2f})"


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:.3e}"
    return str(x)


def _dur(s: float | None) -> str:
    if s is None:
        return "–"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        heat=heat_style, fmt=_fmt, dur=_dur, tojson_compact=lambda o: json.dumps(o, separators=(",", ":"))
    )
    return env


class Pages:
    """Renders every view of the runs it is given (name → RunData)."""

    def __init__(self, runs: dict[str, RunData]) -> None:
        self.runs = runs
        self.env = environment()

    def _render(self, template: str, links: Links, **ctx: Any) -> str:
        return self.env.get_template(template).render(links=links, runs=list(self.runs), **ctx)

    def home(self, links: Links) -> str:
        return self._render("home.html", links, summaries=[r.summary() for r in self.runs.values()])

    def overview(self, name: str, links: Links) -> str:
        run = self.runs[name]
        metrics = run.metrics()
        return self._render(
            "overview.html",
            links,
            run=name,
            summary=run.summary(),
            config=run.config(),
            curves=run.curves(metrics),
            canaries=run.canary_panel(metrics),
            recent=run.rollouts(limit=10),
            events=links.events(name, after=_newest_row(run), metrics=len(metrics)),
        )

    def grid(self, name: str, links: Links) -> str:
        run = self.runs[name]
        return self._render("grid.html", links, run=name, grid=run.task_grid(), events=None)

    def rollouts(
        self, name: str, links: Links, filters: dict[str, Any], page: int = 0, page_size: int | None = PAGE_SIZE
    ) -> str:
        run = self.runs[name]
        q = store_filters(filters)
        limit = -1 if page_size is None else page_size + 1  # one more: is there a next page
        rows = run.rollouts(**q, limit=limit, offset=page * (page_size or 0))
        more = page_size is not None and len(rows) > page_size
        rows = rows[:page_size] if page_size is not None else rows
        return self._render(
            "rollouts.html",
            links,
            run=name,
            rows=rows,
            filters=filters,
            values=run.filter_values(),
            page=page,
            more=more,
            events=links.events(name, after=_newest_row(run), **filters) if page == 0 else None,
        )

    def rollout_row(self, name: str, links: Links, row: dict[str, Any]) -> str:
        return self.env.get_template("_row.html").render(links=links, run=name, r=row)

    def trajectory(self, name: str, links: Links, rollout_id: str) -> str | None:
        run = self.runs[name]
        t = run.trajectory(rollout_id)
        if t is None:
            return None
        siblings = [r for r in run.rollouts(task_id=t.rollout.task_id, limit=25) if r["rollout_id"] != rollout_id]
        return self._render("trajectory.html", links, run=name, t=t, r=t.rollout, siblings=siblings)

    def compare_rollouts(self, name: str, links: Links, a: str, b: str) -> str | None:
        run = self.runs[name]
        ta, tb = run.trajectory(a), run.trajectory(b)
        if ta is None or tb is None:
            return None
        return self._render("compare_rollouts.html", links, run=name, pair=[ta, tb])

    def compare_runs(self, names: list[str], links: Links) -> str:
        chosen = {n: self.runs[n] for n in names if n in self.runs}
        curves: list[dict[str, Any]] = []
        per_run = {n: r.curves() for n, r in chosen.items()}
        for i, (title, _keys) in enumerate(run_curve_titles(per_run)):
            series = [
                {"key": f"{n}: {s['key']}", "points": s["points"]} for n, cs in per_run.items() for s in cs[i]["series"]
            ]
            curves.append({"title": title, "series": series})
        return self._render(
            "compare_runs.html",
            links,
            chosen=list(chosen),
            summaries=[r.summary() for r in chosen.values()],
            configs={n: r.config() for n, r in chosen.items()},
            curves=curves,
        )


def _newest_row(run: RunData) -> int:
    return run.newest_row()


def run_curve_titles(per_run: dict[str, list[dict[str, Any]]]) -> list[tuple[str, int]]:
    first = next(iter(per_run.values()), [])
    return [(c["title"], i) for i, c in enumerate(first)]


def store_filters(filters: dict[str, Any]) -> dict[str, Any]:
    q: dict[str, Any] = {}
    if filters.get("status"):
        q["status"] = filters["status"]
    if filters.get("task"):
        q["task_id"] = filters["task"]
    if filters.get("harness"):
        q["harness"] = filters["harness"]
    if filters.get("step") not in (None, ""):
        q["step"] = int(filters["step"])
    if filters.get("flag"):
        q["flag"] = filters["flag"]
    return q


def parse_filters(get: Callable[[str], Any]) -> dict[str, Any]:
    return {k: get(k) for k in FILTERS if get(k) not in (None, "")}


__all__ = [
    "FILTERS",
    "Links",
    "PAGE_SIZE",
    "Pages",
    "STATIC",
    "TEMPLATES",
    "environment",
    "parse_filters",
    "store_filters",
]
