// mbench report.html: draws the plots as SVG from the embedded data, adds
// hover values, legend toggles and sortable tables. Hand-written, no library.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const W = 560, H = 340, M = { l: 64, r: 16, t: 28, b: 44 };
  const tip = document.getElementById("tip");

  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    const a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : a >= 0.01 || a === 0 ? v.toFixed(2) : v.toExponential(1);
  }
  function scale(lo, hi, a, b, log) {
    const f = log ? Math.log10 : (x) => x;
    const l = f(lo), h = f(hi) === l ? l + 1 : f(hi);
    return (x) => a + (f(x) - l) / (h - l) * (b - a);
  }
  function ticks(lo, hi, log) {
    const out = [];
    if (log) {
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
        for (const m of [1, 2, 5]) { const v = m * Math.pow(10, e); if (v >= lo && v <= hi) out.push(v); }
      return out;
    }
    const span = hi - lo || 1, raw = span / 6, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  function hover(node, text) {
    el("title", {}, node, text);
    node.addEventListener("mousemove", (ev) => {
      tip.textContent = text; tip.hidden = false;
      tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
    });
    node.addEventListener("mouseleave", () => { tip.hidden = true; });
  }

  // plot draws series [{name, color, pts: [{x, y, lo, hi, tip, mark}], line}]
  // into a new SVG appended to parent; returns it.
  function plot(parent, o) {
    const svg = el("svg", { class: "plot " + o.cls, width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-title": o.title }, parent);
    el("text", { x: W / 2, y: 16, "text-anchor": "middle", "font-weight": "bold" }, svg, o.title);
    const xs = [], ys = [];
    for (const s of o.series) for (const p of s.pts) {
      xs.push(p.x); ys.push(p.y);
      if (p.lo != null) ys.push(p.lo); if (p.hi != null) ys.push(p.hi);
    }
    const pos = (v) => !o.ylog || v > 0;
    let x0 = o.xmin ?? Math.min(...xs), x1 = o.xmax ?? Math.max(...xs);
    let y0 = o.ymin ?? Math.min(...ys.filter(pos)), y1 = o.ymax ?? Math.max(...ys.filter(pos));
    if (!o.xlog && o.xmin == null) { const pad = (x1 - x0 || x1 || 1) * 0.05; x0 -= pad; x1 += pad; }
    if (!o.ylog && o.ymin == null) { y0 = Math.min(0, y0); y1 = y1 * 1.08 || 1; }
    const sx = scale(x0, x1, M.l, W - M.r, o.xlog), sy = scale(y0, y1, H - M.b, M.t, o.ylog);
    const ax = el("g", { class: "axis" }, svg);
    for (const t of ticks(x0, x1, o.xlog)) {
      el("line", { class: "grid", x1: sx(t), x2: sx(t), y1: M.t, y2: H - M.b }, ax);
      el("text", { x: sx(t), y: H - M.b + 14, "text-anchor": "middle" }, ax, fmt(t));
    }
    for (const t of ticks(y0, y1, o.ylog)) {
      el("line", { class: "grid", x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t) }, ax);
      el("text", { x: M.l - 4, y: sy(t) + 4, "text-anchor": "end" }, ax, fmt(t));
    }
    el("path", { d: `M${M.l},${M.t}V${H - M.b}H${W - M.r}`, fill: "none" }, ax);
    el("text", { x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle" }, ax, o.xlab);
    el("text", { x: 12, y: (M.t + H - M.b) / 2, transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})`, "text-anchor": "middle" }, ax, o.ylab);
    const clampY = (v) => sy(Math.min(Math.max(v, y0), y1));
    o.series.forEach((s, i) => {
      const g = el("g", { class: "series", "data-name": s.name }, svg);
      const pts = s.pts.filter((p) => pos(p.y) && (!o.xlog || p.x > 0));
      if (s.line && pts.length > 1) {
        const line = el("path", { class: o.lineCls || "line", d: "M" + pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join("L"),
          fill: "none", stroke: s.color, "stroke-width": 1.8 }, g);
        hover(line, s.name);
      }
      for (const p of pts) {
        if (p.lo != null && p.hi != null)
          el("path", { class: "ci", d: `M${sx(p.x)},${clampY(p.lo)}V${clampY(p.hi)}M${sx(p.x) - 4},${clampY(p.lo)}h8M${sx(p.x) - 4},${clampY(p.hi)}h8`, stroke: s.color, fill: "none" }, g);
        if (p.tip) hover(el("circle", { class: "pt", cx: sx(p.x), cy: sy(p.y), r: o.r || 4, fill: s.color }, g), p.tip);
        if (p.mark) el("text", { x: sx(p.x) + 5, y: sy(p.y) - 5, fill: s.color }, g, p.mark);
      }
      const ly = o.legendBottom ? H - M.b - 4 - 14 * (o.series.length - i) : M.t + 4 + 14 * i, lx = o.legendX || M.l + 8, lg = el("g", { class: "legend" }, svg);
      el("rect", { x: lx, y: ly, width: 10, height: 10, fill: s.color }, lg);
      el("text", { x: lx + 14, y: ly + 9 }, lg, s.name);
      lg.addEventListener("click", () => { g.classList.toggle("off"); lg.classList.toggle("off"); });
    });
    return svg;
  }

  function section(id) {
    const div = document.getElementById(id);
    div.textContent = "";
    return div;
  }
  function note(parent, text) {
    const p = document.createElement("p");
    p.className = "nodata"; p.textContent = text; parent.appendChild(p);
    return p;
  }
  const color = (data, cfg) => COLORS[Math.max(0, data.configs.indexOf(cfg)) % COLORS.length];

  function ttftPlots(data) {
    const div = section("ttft-plots");
    if (!data.ttft.length) { note(div, "No cell has a TTFT p90."); return; }
    const ci = Math.round(100 * data.confidence) + "% CI";
    for (const shape of data.shapes) {
      const series = [];
      for (const cfg of data.configs) {
        const pts = data.ttft.filter((p) => p.shape === shape && p.config === cfg).sort((a, b) => a.rate - b.rate).map((p) => ({
          x: p.rate, y: p.mean, lo: p.lo, hi: p.hi, mark: p.saturated ? "×" : "",
          tip: `${cfg} at rate ${p.rate} (${shape})\nTTFT p90 ${fmt(p.mean)} ms` + (p.lo != null ? `, ${ci} [${fmt(p.lo)}, ${fmt(p.hi)}]` : "") + `\nn = ${p.n}` + (p.saturated ? "\nsaturated run(s)" : ""),
        }));
        if (pts.length) series.push({ name: cfg, color: color(data, cfg), pts, line: true });
      }
      if (!series.length) continue;
      const ys = series.flatMap((s) => s.pts.map((p) => p.y));
      plot(div, { cls: "ttft", title: `TTFT p90 vs rate (${shape})` + (data.simulated ? " — SIMULATED" : ""), xlab: "offered rate (req/s)",
        ylab: "TTFT p90 (ms), mean ± CI", series, ylog: Math.max(...ys) / Math.max(Math.min(...ys), 1e-9) > 5 });
    }
  }

  function cdfPlots(data) {
    const div = section("cdf-plots");
    if (!data.step_cdfs.length) { note(div, "No run has engine-step data: no step-duration CDF."); return; }
    for (const shape of data.shapes) {
      const cs = data.step_cdfs.filter((c) => c.shape === shape);
      if (!cs.length) continue;
      const series = cs.map((c) => ({ name: `${c.config} @ ${c.rate}`, color: color(data, c.config), line: true,
        pts: c.q.map((x, k) => ({ x, y: k / (c.q.length - 1) })) }));
      series.forEach((s, i) => { s.name += ` (${cs[i].steps} steps)`; const c = cs[i];
        s.pts.forEach((p, k) => { if (k % 10 === 0) p.tip = `${c.config} at rate ${c.rate}: p${Math.round(100 * p.y)} = ${fmt(p.x)} µs`; }); });
      plot(div, { cls: "cdf", lineCls: "cdf", title: `Step duration CDF (${shape})`, xlab: "step_duration (µs, log scale)",
        ylab: "fraction of steps ≤ x", series, xlog: true, ymin: 0, ymax: 1, r: 2.5, legendX: W - 230, legendBottom: true });
    }
  }

  function gpuPlots(data) {
    const div = section("gpu-plots"), q = document.getElementById("gpu-metric").value;
    if (!data.gpu.length) { note(div, "No runs."); return; }
    for (const r of data.gpu) {
      const label = `${r.cell} b${r.block} (${r.config}, rate ${r.rate}, ${r.shape})`;
      if (!r.series.length) { note(div, `${label}: no GPU samples`).setAttribute("data-run", `${r.cell}/b${r.block}`); continue; }
      const series = r.series.map((s, i) => ({ name: s.name, color: COLORS[i % COLORS.length], line: true,
        pts: s.t.map((t, k) => ({ x: t, y: s.y[q][k], tip: k % 20 === 0 ? `${s.name} at ${fmt(t)} s: ${fmt(s.y[q][k])}` : "" })) }));
      plot(div, { cls: "gpu", title: label, xlab: "time since first sample (s)", ylab: q, series, ymin: 0, r: 2.5,
        ymax: q === "util_gpu" ? 100 : undefined });
    }
  }

  function sortable(table) {
    const ths = table.tHead ? table.tHead.rows[0].cells : [];
    Array.from(ths).forEach((th, i) => th.addEventListener("click", () => {
      const body = table.tBodies[0], dir = th.dataset.dir === "asc" ? -1 : 1;
      th.dataset.dir = dir > 0 ? "asc" : "desc";
      const key = (tr) => { const c = tr.cells[i]; const v = parseFloat(c.dataset.value ?? c.textContent); return isNaN(v) ? c.textContent : v; };
      Array.from(body.rows).sort((a, b) => { const x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * dir; }).forEach((tr) => body.appendChild(tr));
    }));
  }

  try {
    const data = JSON.parse(document.getElementById("mbench-data").textContent);
    ttftPlots(data);
    cdfPlots(data);
    gpuPlots(data);
    document.getElementById("gpu-metric").addEventListener("change", () => gpuPlots(data));
    document.querySelectorAll("table.sortable").forEach(sortable);
    document.body.setAttribute("data-rendered", "ok");
  } catch (e) {
    document.body.setAttribute("data-rendered", "error: " + e);
    console.error("mbench report.html:", e);
  }
})();
