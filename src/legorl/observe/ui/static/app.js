// LEGO-RL run UI: SVG step curves, live updates over server-sent events, client-side filters in
// static snapshots. No libraries, nothing fetched from elsewhere.
"use strict";

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f"];
const SVG = "http://www.w3.org/2000/svg";

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function fmt(v) {
  if (!isFinite(v)) return "";
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(1) : String(+v.toPrecision(3));
}

function drawChart(fig) {
  const series = JSON.parse(fig.dataset.series || "[]");
  const svg = fig.querySelector("svg");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = 320, H = 170, L = 44, R = 8, T = 8, B = 40;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const pts = series.flatMap((s) => s.points);
  fig.classList.toggle("empty", pts.length === 0);
  if (!pts.length) {
    el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis" }, svg).textContent = "no data yet";
    return;
  }
  let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis-line" }, svg);
  el("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis-line" }, svg);
  [[y0, H - B], [y1, T + 8]].forEach(([v, y]) => { el("text", { x: L - 4, y, "text-anchor": "end", class: "axis" }, svg).textContent = fmt(v); });
  [[x0, L], [x1, W - R]].forEach(([v, x]) => { el("text", { x, y: H - B + 12, "text-anchor": "middle", class: "axis" }, svg).textContent = fmt(v); });
  series.forEach((s, i) => {
    const c = COLORS[i % COLORS.length];
    const d = s.points.map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    el("polyline", { points: d, fill: "none", stroke: c, "stroke-width": 1.6, class: "curve", "data-key": s.key }, svg);
    s.points.forEach((p) => {
      const dot = el("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.2, fill: c }, svg);
      el("title", {}, dot).textContent = `${s.key} @ step ${p[0]}: ${fmt(p[1])}`;
    });
    const ly = H - 14 + 11 * Math.floor(i / 2) - (series.length > 2 ? 6 : 0);
    const lx = L + (i % 2) * 140;
    el("rect", { x: lx, y: ly - 7, width: 8, height: 8, fill: c }, svg);
    el("text", { x: lx + 11, y: ly, class: "legend" }, svg).textContent = s.key;
  });
}

function drawCharts() { document.querySelectorAll("figure.chart").forEach(drawChart); }

function addMetrics(row) {
  document.querySelectorAll("figure.chart").forEach((fig) => {
    const series = JSON.parse(fig.dataset.series || "[]");
    let changed = false;
    series.forEach((s) => {
      const v = row[s.key];
      if (typeof v === "number" && !s.points.some((p) => p[0] === row.step)) { s.points.push([row.step, v]); changed = true; }
    });
    if (changed) { fig.dataset.series = JSON.stringify(series); drawChart(fig); }
  });
}

function addRollout(html) {
  const body = document.getElementById("rollout-rows");
  if (!body) return;
  const t = document.createElement("tbody");
  t.innerHTML = html.trim();
  const row = t.firstElementChild;
  if (!row || body.querySelector(`tr[data-rollout="${row.dataset.rollout}"]`)) return;
  row.classList.add("new");
  body.insertBefore(row, body.firstChild);
}

function connect() {
  const url = document.body.dataset.events;
  if (!url || !window.EventSource) return;
  const badge = document.getElementById("live");
  const es = new EventSource(url);
  es.onopen = () => badge && badge.classList.remove("off");
  es.onerror = () => badge && badge.classList.add("off");
  es.addEventListener("rollout", (e) => addRollout(JSON.parse(e.data).html));
  es.addEventListener("metrics", (e) => addMetrics(JSON.parse(e.data)));
  es.addEventListener("summary", (e) => {
    const box = document.getElementById("summary-box");
    if (box) box.innerHTML = JSON.parse(e.data).html;
  });
}

// Static snapshots cannot run queries: the filter selects hide rows by their data attributes.
function staticFilters() {
  const form = document.getElementById("filters");
  if (!form || !document.body.dataset.static) return;
  const apply = () => {
    const want = Object.fromEntries([...form.querySelectorAll("select")].map((s) => [s.name, s.value]));
    document.querySelectorAll("#rollout-rows tr").forEach((tr) => {
      const ok = Object.entries(want).every(([k, v]) => !v || (k === "flag" ? tr.dataset.flag.split(" ").includes(v) : tr.dataset[k] === v));
      tr.hidden = !ok;
    });
  };
  form.addEventListener("change", apply);
  form.addEventListener("submit", (e) => { e.preventDefault(); apply(); });
}

document.addEventListener("DOMContentLoaded", () => { drawCharts(); connect(); staticFilters(); });
