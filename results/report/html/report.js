// mbench report.html: draws the plots as SVG from the embedded data, adds
// hover values, legend toggles and sortable tables. Hand-written, no library.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  // Twelve colours a reader tells apart (Tableau 10 and two more).
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#ad494a"];
  const MARKERS = ["circle", "square", "triangle", "diamond", "down"];
  const DASHES = ["", "6 3", "2 3", "8 3 2 3"];
  const W = 560, H = 340, M = { l: 64, r: 16, t: 28, b: 44 };
  const LIMIT = "#c00";
  const TOP = "top"; // a point's y when it has no value: drawn at the top of the frame
  const CI_REACH = 1.6; // how far beyond the points (×, or × of the span) a CI may stretch the y axis
  const tip = document.getElementById("tip");

  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) if (attrs[k] !== undefined && attrs[k] !== "") e.setAttribute(k, attrs[k]);
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
  // ticks returns the tick values of an axis and their labels, every label
  // with the same number of decimals (a linear axis: those of its step; a
  // log axis: none above 1, one significant digit below).
  function ticks(lo, hi, log) {
    const out = [];
    if (log) {
      const decades = Math.log10(hi / lo);
      const ms = decades > 4 ? [1] : decades > 2 ? [1, 3] : [1, 2, 5];
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
        for (const m of ms) { const v = m * Math.pow(10, e); if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push(v); }
      return out.map((v) => ({ v, label: v >= 1 ? v.toFixed(0) : v.toPrecision(1) }));
    }
    const span = hi - lo || 1, raw = span / 6, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    const dec = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out.map((v) => ({ v, label: v.toFixed(dec) }));
  }
  function hover(node, text) {
    el("title", {}, node, text);
    node.addEventListener("mousemove", (ev) => {
      tip.textContent = text; tip.hidden = false;
      tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
    });
    node.addEventListener("mouseleave", () => { tip.hidden = true; });
  }
  // marker draws a point's glyph: filled, or hollow (an A/A control, a
  // probe that did not hold) so that what lies under it shows through.
  function marker(g, kind, x, y, r, color, hollow, cls) {
    const a = { class: cls, fill: hollow ? "#fff" : color, stroke: color, "stroke-width": hollow ? 1.6 : 0.8, "data-cx": x.toFixed(1), "data-cy": y.toFixed(1) };
    const pts = (ps) => ps.map(([dx, dy]) => `${(x + dx * r).toFixed(1)},${(y + dy * r).toFixed(1)}`).join(" ");
    switch (kind) {
      case "square": return el("rect", Object.assign(a, { x: x - r * 0.85, y: y - r * 0.85, width: 1.7 * r, height: 1.7 * r }), g);
      case "triangle": return el("polygon", Object.assign(a, { points: pts([[0, -1.15], [1.05, 0.75], [-1.05, 0.75]]) }), g);
      case "diamond": return el("polygon", Object.assign(a, { points: pts([[0, -1.2], [1.1, 0], [0, 1.2], [-1.1, 0]]) }), g);
      case "down": return el("polygon", Object.assign(a, { points: pts([[0, 1.15], [1.05, -0.75], [-1.05, -0.75]]) }), g);
    }
    return el("circle", Object.assign(a, { cx: x.toFixed(1), cy: y.toFixed(1), r }), g);
  }

  // plot draws series [{name, color, dash, marker, hollow, line, pts: [{x,
  // y, lo, hi, tip, mark}]}] into a new SVG appended to parent, with
  // horizontal limit lines [{label, value}] and interval bars [{name,
  // color, lo, hi, tip}] under the data; the legend is to the right of the
  // plotting area, never over the data. Returns the SVG.
  function plot(parent, o) {
    const legend = o.series.map((s) => s.name).concat((o.limits || []).map((l) => l.label), o.notes || []);
    const LW = Math.min(300, 40 + 6.2 * Math.max(0, ...legend.map((n) => n.length)));
    const TW = W + LW;
    const svg = el("svg", { class: "plot " + o.cls, width: TW, height: H, viewBox: `0 0 ${TW} ${H}`, "data-title": o.title }, parent);
    el("text", { x: W / 2, y: 16, "text-anchor": "middle", "font-weight": "bold" }, svg, o.title);
    // The y range follows the points and limits; a CI reaches beyond them
    // by at most a factor (CI_REACH), past which its bar is cut at the
    // frame (no cap there; its numbers are in the tip), so one runaway
    // interval cannot squash every other series.
    const xs = [], ys = [], cis = [];
    for (const s of o.series) for (const p of s.pts) {
      xs.push(p.x);
      if (p.y === TOP) continue; // drawn at the top of the frame: no value
      ys.push(p.y);
      if (p.lo != null) cis.push(p.lo); if (p.hi != null) cis.push(p.hi);
    }
    for (const l of o.limits || []) ys.push(l.value);
    for (const b of o.bars || []) { if (b.lo != null) xs.push(b.lo); if (b.hi != null) xs.push(b.hi); }
    const pos = (v) => !o.ylog || v > 0;
    let x0 = o.xmin ?? Math.min(...xs), x1 = o.xmax ?? Math.max(...xs);
    let y0 = Math.min(...ys.filter(pos)), y1 = Math.max(...ys.filter(pos));
    const reach = o.ylog ? [y0 / CI_REACH, y1 * CI_REACH] : [y0 - (CI_REACH - 1) * (y1 - Math.min(0, y0)), y1 * CI_REACH];
    for (const v of cis.filter(pos)) { y0 = Math.min(y0, Math.max(v, reach[0])); y1 = Math.max(y1, Math.min(v, reach[1])); }
    y0 = o.ymin ?? y0; y1 = o.ymax ?? y1;
    if (o.xlog && o.xmin == null) { x0 /= 1.25; x1 *= 1.25; }
    if (!o.xlog && o.xmin == null) { const pad = (x1 - x0 || x1 || 1) * 0.06; x0 -= pad; x1 += pad; if (o.nonneg) x0 = Math.max(x0, 0); }
    if (o.ylog && o.ymin == null) { y0 /= 1.3; y1 *= 1.3; }
    if (!o.ylog && o.ymin == null) { y0 = o.nonneg ? 0 : Math.min(0, y0); y1 = y1 * 1.08 || 1; }
    const bottom = H - M.b - 10 * (o.bars || []).length; // interval bars sit in a strip above the x axis
    const sx = scale(x0, x1, M.l, W - M.r, o.xlog), sy0 = scale(y0, y1, bottom, M.t + (o.top ? 14 : 0), o.ylog);
    const sy = (v) => v === TOP ? M.t + 6 : sy0(v);
    const ax = el("g", { class: "axis" }, svg);
    for (const t of ticks(x0, x1, o.xlog)) {
      el("line", { class: "grid", x1: sx(t.v), x2: sx(t.v), y1: M.t, y2: H - M.b }, ax);
      el("text", { x: sx(t.v), y: H - M.b + 14, "text-anchor": "middle" }, ax, t.label);
    }
    for (const t of ticks(y0, y1, o.ylog)) {
      el("line", { class: "grid", x1: M.l, x2: W - M.r, y1: sy(t.v), y2: sy(t.v) }, ax);
      el("text", { x: M.l - 4, y: sy(t.v) + 4, "text-anchor": "end" }, ax, t.label);
    }
    el("path", { d: `M${M.l},${M.t}V${H - M.b}H${W - M.r}`, fill: "none" }, ax);
    if (bottom < H - M.b) el("line", { class: "strip", x1: M.l, x2: W - M.r, y1: bottom + 3, y2: bottom + 3 }, ax);
    el("text", { x: (M.l + W - M.r) / 2, y: H - 8, "text-anchor": "middle" }, ax, o.xlab);
    el("text", { x: 12, y: (M.t + H - M.b) / 2, transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})`, "text-anchor": "middle" }, ax, o.ylab);
    const clampY = (v) => sy(Math.min(Math.max(v, y0), y1));
    const clampX = (v) => sx(Math.min(Math.max(v, x0), x1));
    const lg = el("g", { class: "legend" }, svg);
    let row = 0;
    const entry = (name, draw) => {
      const y = M.t + 6 + 16 * row++, g = el("g", { class: "entry", "data-name": name }, lg);
      draw(g, W + 8, y);
      const label = name.length > 44 ? name.slice(0, 43) + "…" : name;
      const t = el("text", { x: W + 38, y: y + 4 }, g, label);
      if (label !== name) el("title", {}, t, name);
      return g;
    };
    for (const l of o.limits || []) {
      const y = sy(l.value);
      const line = el("line", { class: "limit", x1: M.l, x2: W - M.r, y1: y, y2: y, stroke: LIMIT, "stroke-dasharray": "7 4", "stroke-width": 1.5 }, svg);
      hover(line, l.label);
      entry(l.label, (g, x, yy) => el("line", { x1: x, x2: x + 24, y1: yy, y2: yy, stroke: LIMIT, "stroke-dasharray": "7 4", "stroke-width": 1.5 }, g));
    }
    (o.bars || []).forEach((b, i) => {
      const y = H - M.b - 6 - 10 * i, a = b.lo == null ? M.l : clampX(b.lo), z = b.hi == null ? W - M.r : clampX(b.hi);
      const g = el("g", { class: "interval", "data-name": b.name }, svg);
      el("line", { x1: a, x2: z, y1: y, y2: y, stroke: b.color, "stroke-width": 5, "stroke-opacity": 0.75 }, g);
      if (b.lo != null) el("line", { x1: a, x2: a, y1: y - 4, y2: y + 4, stroke: b.color, "stroke-width": 2 }, g);
      if (b.hi != null) el("line", { x1: z, x2: z, y1: y - 4, y2: y + 4, stroke: b.color, "stroke-width": 2 }, g);
      hover(g, b.tip);
    });
    const n = o.series.length;
    o.series.forEach((s, i) => {
      const g = el("g", { class: "series", "data-name": s.name }, svg);
      const off = o.dodge ? (i - (n - 1) / 2) * o.dodge : 0; // pixels, so that points at one x do not hide each other
      const px = (p) => sx(p.x) + off;
      const pts = s.pts.filter((p) => (p.y === TOP || pos(p.y)) && (!o.xlog || p.x > 0)), joined = pts.filter((p) => !p.apart && p.y !== TOP);
      if (s.line && joined.length > 1) {
        const line = el("path", { class: o.lineCls || "line", d: "M" + joined.map((p) => `${px(p).toFixed(1)},${sy(p.y).toFixed(1)}`).join("L"),
          fill: "none", stroke: s.color, "stroke-width": 1.8, "stroke-dasharray": s.dash }, g);
        hover(line, s.name);
      }
      for (const p of pts) {
        if (p.lo != null && p.hi != null) {
          const lo = clampY(p.lo), hi = clampY(p.hi), x = px(p);
          let d = `M${x},${lo}V${hi}`; // no cap where the frame cuts the bar
          if (p.hi <= y1) d += `M${x - 4},${hi}h8`;
          if (p.lo >= y0) d += `M${x - 4},${lo}h8`;
          el("path", { class: "ci", d, stroke: s.color, fill: "none", "stroke-width": 1.2 }, g);
        }
        if (p.tip) hover(marker(g, p.marker || s.marker, px(p), sy(p.y), o.r || 4.5, s.color, p.hollow ?? s.hollow, "pt"), p.tip);
        if (p.mark) el("text", { x: px(p) + 6, y: sy(p.y) - 6, fill: s.color, "font-weight": "bold" }, g, p.mark);
      }
      const e = entry(s.name, (lgg, x, y) => {
        if (s.line) el("line", { x1: x, x2: x + 24, y1: y, y2: y, stroke: s.color, "stroke-width": 1.8, "stroke-dasharray": s.dash }, lgg);
        if (s.marker) marker(lgg, s.marker, x + 12, y, 4, s.color, s.hollow, "");
      });
      e.addEventListener("click", () => { g.classList.toggle("off"); e.classList.toggle("off"); });
    });
    if (o.notes) for (const t of o.notes) entry(t, () => {});
    return svg;
  }

  function section(id) {
    const div = document.getElementById(id);
    if (div) div.textContent = "";
    return div;
  }
  function note(parent, text) {
    const p = document.createElement("p");
    p.className = "nodata"; p.textContent = text; parent.appendChild(p);
    return p;
  }
  const configColor = (data, cfg) => COLORS[Math.max(0, data.configs.indexOf(cfg)) % COLORS.length];
  const configStyle = (data, cfg) => {
    const i = Math.max(0, data.configs.indexOf(cfg)), aa = data.same_as[cfg] !== undefined;
    return { color: configColor(data, cfg), marker: MARKERS[i % MARKERS.length], hollow: aa, dash: aa ? DASHES[1] : DASHES[0] };
  };
  const logSpan = (vals) => { const p = vals.filter((v) => v > 0); return p.length > 0 && Math.max(...p) / Math.min(...p) > 5; };

  // ratePlots draws TTFT p90 and TPOT p90 against the offered rate per
  // shape with two rates or more (one rate is a point per config, not a
  // curve: the forest plot shows its comparisons), one series per config
  // with CI bars.
  function ratePlots(data) {
    const div = section("rate-plots");
    const ci = Math.round(100 * data.confidence) + "% CI";
    const metrics = [{ cls: "ttft", label: "TTFT p90", pts: data.ttft, limits: data.slo }, { cls: "tpot", label: "TPOT p90", pts: data.tpot, limits: data.tpot_slo }];
    for (const shape of data.rate_shapes) {
      for (const m of metrics) {
        const series = [];
        // Originals first, A/A controls after, so a hollow control is drawn
        // over its original and both show.
        const cfgs = data.configs.filter((c) => data.same_as[c] === undefined).concat(data.configs.filter((c) => data.same_as[c] !== undefined));
        for (const cfg of cfgs) {
          const pts = m.pts.filter((p) => p.shape === shape && p.config === cfg).sort((a, b) => a.rate - b.rate).map((p) => ({
            x: p.rate, y: p.mean, lo: p.lo, hi: p.hi, mark: p.saturated ? "×" : "", apart: p.unused, hollow: p.unused ? true : undefined,
            tip: `${cfg} at rate ${p.rate} (${shape})\n${m.label} ${fmt(p.mean)} ms` + (p.lo != null ? `, ${ci} [${fmt(p.lo)}, ${fmt(p.hi)}]` + (p.clipped ? " (low end clipped at 0)" : "") : "") + `\nn = ${p.n}` +
              (p.unused ? "\nno usable run: the mean of its saturated runs, not a result" : p.saturated ? "\nsaturated run(s)" : ""),
          }));
          if (pts.length) series.push(Object.assign({ name: cfg + (data.same_as[cfg] !== undefined ? ` (A/A of ${data.same_as[cfg]})` : ""), pts, line: true }, configStyle(data, cfg)));
        }
        if (!series.length) { note(div, `No cell of ${shape} has a ${m.label}.`); continue; }
        const ys = series.flatMap((s) => s.pts.map((p) => p.y)).concat(m.limits.map((l) => l.value));
        const xs = series.flatMap((s) => s.pts.map((p) => p.x));
        plot(div, { cls: m.cls, title: `${m.label} vs rate (${shape})` + (data.simulated ? " — SIMULATED" : ""), xlab: "offered rate (req/s)" + (logSpan(xs) ? ", log scale" : ""),
          ylab: `${m.label} (ms), mean ± CI`, series, limits: m.limits, nonneg: true, dodge: 5, xlog: logSpan(xs), ylog: logSpan(ys),
          notes: series.some((s) => s.pts.some((p) => p.mark)) ? ["× saturated run(s)", "unjoined, hollow: no usable run"] : [] });
      }
    }
    if (!data.rate_shapes.length) note(div, data.shapes.length ? "Every shape was measured at one rate: against rate, a config is a point, not a curve; the forest plot under the result shows the comparisons and the cell table their values." : "No cell has a latency.");
  }

  function capacityPlots(data) {
    const div = section("capacity-plots");
    const c = data.capacity;
    if (!div || !c) return;
    if (!c.probes.length) { note(div, "No probe finished yet."); return; }
    const ci = Math.round(100 * data.confidence) + "% CI";
    for (const shape of data.shapes) {
      const series = [], bars = [];
      for (const cfg of data.configs) {
        const st = configStyle(data, cfg);
        const pts = c.probes.filter((p) => p.shape === shape && p.config === cfg).sort((a, b) => a.rate - b.rate).map((p) => p.mean == null ? {
          x: p.rate, y: TOP, hollow: true, apart: true, mark: p.verdict === "fails" ? "✗" : "?",
          tip: `${cfg} at rate ${p.rate} (${shape}): ${p.verdict}\nno ok block: ` + (p.verdict === "fails" ? "every counted block saturated" : "no usable run"),
        } : {
          x: p.rate, y: p.mean, lo: p.lo, hi: p.hi, hollow: p.verdict !== "holds", mark: p.verdict === "fails" ? "✗" : "",
          tip: `${cfg} at ${p.rate} (${shape}): ${p.verdict}\n${c.metric} ${fmt(p.mean)}` + (p.lo != null ? `, ${ci} [${fmt(p.lo)}, ${fmt(p.hi)}]` : ""),
        });
        if (pts.length) series.push(Object.assign({ name: cfg, pts, line: true }, st, { hollow: false }));
        const iv = c.intervals.find((v) => v.shape === shape && v.config === cfg);
        if (iv && (iv.lo != null || iv.hi != null))
          bars.push({ name: cfg, color: st.color, lo: iv.lo, hi: iv.hi,
            tip: `${cfg} (${shape}): capacity ` + (iv.lo != null && iv.hi != null ? `in [${fmt(iv.lo)}, ${fmt(iv.hi)}]` : iv.lo != null ? `≥ ${fmt(iv.lo)}` : `< ${fmt(iv.hi)}`) + ` (${c.xlabel})` });
      }
      if (!series.length) continue;
      const rates = c.probes.filter((p) => p.shape === shape).map((p) => p.rate);
      const ys = series.flatMap((s) => s.pts.filter((p) => p.y !== TOP).map((p) => p.y)).concat([c.limit]);
      plot(div, { cls: "capacity", title: `${c.metric} of the probes (${shape})` + (data.simulated ? " — SIMULATED" : ""), xlab: c.xlabel + (logSpan(rates) ? ", log scale" : ""),
        ylab: c.ylabel, series, bars, limits: [{ label: `bound: ${c.bound}`, value: c.limit }], nonneg: true, dodge: 5,
        xlog: logSpan(rates), ylog: logSpan(ys), top: true,
        notes: ["filled: holds; hollow: fails or uncertain", "✗ at the top: every block saturated", "bars under the data: capacity intervals"] });
    }
  }

  function cdfPlots(data) {
    const div = section("cdf-plots");
    if (!data.step_cdfs.length) { note(div, "No run has engine-step data: no step-duration CDF."); return; }
    for (const shape of data.shapes) {
      const cs = data.step_cdfs.filter((c) => c.shape === shape);
      if (!cs.length) continue;
      const rates = [...new Set(cs.map((c) => c.rate))].sort((a, b) => a - b);
      // One colour per (config, rate), and a dash per rate as well.
      const series = cs.map((c, i) => ({ name: `${c.config} @ ${c.rate} (${c.steps} steps)`, color: COLORS[i % COLORS.length],
        dash: DASHES[rates.indexOf(c.rate) % DASHES.length], line: true,
        pts: c.q.map((x, k) => ({ x, y: k / (c.q.length - 1), tip: k % 10 === 0 ? `${c.config} at rate ${c.rate}: p${Math.round(100 * k / (c.q.length - 1))} = ${fmt(x)} µs` : "" })) }));
      plot(div, { cls: "cdf", lineCls: "cdf", title: `Step duration CDF (${shape})`, xlab: "step_duration (µs, log scale)",
        ylab: "fraction of steps ≤ x", series, xlog: true, ymin: 0, ymax: 1, r: 2.5 });
    }
  }

  function gpuPlots(data) {
    const div = section("gpu-plots"), q = document.getElementById("gpu-metric").value;
    for (const r of data.gpu) {
      const label = `${r.cell} b${r.block} (${r.config}, rate ${r.rate}, ${r.shape})`;
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
    capacityPlots(data);
    ratePlots(data);
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
