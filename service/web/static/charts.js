// Small SVG charts drawn here (no library): a line chart of values against an axis, and
// heatmap colours for table cells. Series differ by colour, marker and dash pattern, so
// they stay apart in greyscale; the heatmap runs dark to light (viridis).

import { h, fmt } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f3a93", "#e69f00", "#009e73", "#cc3311", "#56b4e9", "#882255", "#444444", "#b8a000"];
const DASHES = ["", "6 4", "2 3", "10 3 2 3", "1 5", "12 6"];
const MARKERS = ["circle", "square", "triangle", "diamond", "cross", "down"];

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, v);
  for (const c of children) if (c != null) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function marker(kind, x, y, colour) {
  const r = 4.5;
  const common = { fill: colour, stroke: "#fff", "stroke-width": 1 };
  switch (kind) {
    case "square": return s("rect", { x: x - r, y: y - r, width: 2 * r, height: 2 * r, ...common });
    case "triangle": return s("path", { d: `M${x},${y - r - 1}L${x + r + 1},${y + r}L${x - r - 1},${y + r}Z`, ...common });
    case "down": return s("path", { d: `M${x},${y + r + 1}L${x + r + 1},${y - r}L${x - r - 1},${y - r}Z`, ...common });
    case "diamond": return s("path", { d: `M${x},${y - r - 1}L${x + r + 1},${y}L${x},${y + r + 1}L${x - r - 1},${y}Z`, ...common });
    case "cross": return s("path", { d: `M${x - r},${y - r}L${x + r},${y + r}M${x - r},${y + r}L${x + r},${y - r}`,
      stroke: colour, "stroke-width": 2.5 });
    default: return s("circle", { cx: x, cy: y, r, ...common });
  }
}

/** Style of series i: colour, dash and marker all change with i. */
export function seriesStyle(i) {
  return { colour: COLOURS[i % COLOURS.length], dash: DASHES[i % DASHES.length], marker: MARKERS[i % MARKERS.length] };
}

function niceTicks(lo, hi, count = 5) {
  if (lo === hi) { lo -= 0.5; hi += 0.5; }
  const step0 = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= step0) || step0;
  const ticks = [];
  for (let v = Math.floor(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toFixed(10)));
  return ticks;
}

function axisLabel(v) {
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v) && Math.abs(v) >= 1024 && v % 1024 === 0) return `${v / 1024}k`;
  return Math.abs(v) >= 1000 ? Math.round(v).toLocaleString("en-US") : String(Number(v.toPrecision(3)));
}

/** The value axis a unit fixes: fractions on 0..1 and 0-100 scores on 0..100, so an all-zero or
 * nearly flat series is drawn where it lies on the scale, not stretched around its mean. */
export function unitRange(unit) {
  if (unit === "fraction") return [0, 1];
  if (/\b0-100\b/.test(unit || "")) return [0, 100];
  return null;
}

/** The x axis a series axis fixes: depth deciles on 0..9 and depths on 0..100 (%), linear, every
 * step labelled, so a decile with no samples leaves a gap where it belongs (the line breaks there)
 * instead of the present ones closing up. Other axes (lengths) follow their data. */
export function axisDomain(axis) {
  if (axis === "depth_decile") return { range: [0, 9], step: 1 };
  if (axis === "depth") return { range: [0, 100], step: 10 };
  return null;
}

/** Points resting on fewer samples than this are drawn hollow and no line joins them: a line through
 * a cell of two samples reads as a trend that is not there. */
export const MIN_JOINED_N = 5;

/**
 * A line chart. `series`: [{label, points: [{x, y, n?}]}] (`n`: the samples behind a point, shown
 * beside it; see MIN_JOINED_N); x numeric (log2 scale when it spans
 * 4x or more; linear on `xDomain`, see axisDomain, when given) or categorical (`categories`
 * in order). `yRange` fixes the value axis.
 */
export function lineChart({ title, xLabel, yLabel, series, categories = null, yRange = null, xDomain = null,
  width = 640, height = 300 }) {
  const fig = h("figure", { class: "chart" }, h("figcaption", {}, title));
  const points = series.flatMap((se) => se.points.filter((p) => p.y != null && Number.isFinite(p.y)));
  if (!points.length) {
    fig.append(h("p", { class: "nodata chart-empty" }, "no data"));
    return fig;
  }
  const m = { left: 62, right: 16, top: 14, bottom: 48 };
  const w = width - m.left - m.right, ht = height - m.top - m.bottom;
  let xOf, xTicks;
  if (categories) {
    const band = w / Math.max(categories.length, 1);
    const index = new Map(categories.map((c, i) => [String(c), i]));
    xOf = (x) => m.left + band * (index.get(String(x)) + 0.5);
    xTicks = categories;
  } else {
    const xs = [...new Set(series.flatMap((se) => se.points.map((p) => p.x)))].sort((a, b) => a - b);
    if (xDomain) {
      const lo = Math.min(xDomain.range[0], xs[0]), hi = Math.max(xDomain.range[1], xs[xs.length - 1]);
      xOf = (x) => m.left + ((x - lo) / (hi - lo || 1)) * w;
      xTicks = [];
      for (let v = lo; v <= hi; v += xDomain.step) xTicks.push(v);
    } else {
      const lo = xs[0], hi = xs[xs.length - 1];
      const log = lo > 0 && hi / lo >= 4;
      const f = log ? Math.log2 : (v) => v;
      const span = f(hi) - f(lo) || 1;
      xOf = (x) => m.left + (xs.length === 1 ? w / 2 : ((f(x) - f(lo)) / span) * w);
      xTicks = xs;
    }
  }
  let [ylo, yhi] = yRange || [Math.min(...points.map((p) => p.y)), Math.max(...points.map((p) => p.y))];
  const yTicks = niceTicks(ylo, yhi);
  ylo = Math.min(ylo, yTicks[0]);
  yhi = Math.max(yhi, yTicks[yTicks.length - 1]);
  const yOf = (y) => m.top + ht - ((y - ylo) / (yhi - ylo || 1)) * ht;

  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${title}: ${yLabel} against ${xLabel}` });
  const grid = s("g", { class: "grid" });
  for (const t of yTicks) {
    grid.append(s("line", { x1: m.left, x2: m.left + w, y1: yOf(t), y2: yOf(t) }));
    grid.append(s("text", { x: m.left - 6, y: yOf(t) + 4, "text-anchor": "end" }, axisLabel(t)));
  }
  const skip = Math.ceil(xTicks.length / Math.max(1, Math.floor(w / 56)));
  xTicks.forEach((t, i) => {
    if (i % skip) return;
    grid.append(s("line", { x1: xOf(t), x2: xOf(t), y1: m.top + ht, y2: m.top + ht + 4 }));
    grid.append(s("text", { x: xOf(t), y: m.top + ht + 17, "text-anchor": "middle" }, axisLabel(t)));
  });
  svg.append(grid);
  svg.append(s("line", { class: "axis", x1: m.left, x2: m.left + w, y1: m.top + ht, y2: m.top + ht }));
  svg.append(s("line", { class: "axis", x1: m.left, x2: m.left, y1: m.top, y2: m.top + ht }));
  svg.append(s("text", { class: "axis-title", x: m.left + w / 2, y: height - 8, "text-anchor": "middle" }, xLabel));
  svg.append(s("text", { class: "axis-title", transform: `translate(14 ${m.top + ht / 2}) rotate(-90)`,
    "text-anchor": "middle" }, yLabel));

  const legend = h("ul", { class: "legend" });
  let anyThin = false;
  series.forEach((se, i) => {
    const st = seriesStyle(i);
    const pts = se.points.filter((p) => p.y != null && Number.isFinite(p.y));
    const g = s("g", { class: "series" });
    // On a fixed axis the line breaks where a step has no value (a decile with no samples).
    // A point of a handful of samples stands alone: hollow, unjoined.
    const thin = (p) => p.n != null && p.n < MIN_JOINED_N;
    const runs = [];
    for (const p of pts) {
      const run = runs[runs.length - 1];
      if (thin(p)) runs.push([]);
      else if (run && run.length && !(xDomain && p.x - run[run.length - 1].x > xDomain.step)) run.push(p);
      else runs.push([p]);
    }
    for (const run of runs.filter((r) => r.length > 1)) {
      g.append(s("polyline", { points: run.map((p) => `${xOf(p.x)},${yOf(p.y)}`).join(" "), fill: "none",
        stroke: st.colour, "stroke-width": 2, "stroke-dasharray": st.dash || null }));
    }
    for (const p of pts) {
      const mk = marker(st.marker, xOf(p.x), yOf(p.y), st.colour);
      if (thin(p)) { mk.setAttribute("fill", "#fff"); mk.setAttribute("stroke", st.colour); mk.setAttribute("stroke-width", 2); }
      mk.append(s("title", {}, `${se.label}: ${axisLabel(p.x)} → ${fmt(p.y)}${p.n != null ? ` (n=${p.n})` : ""}`));
      g.append(mk);
      if (p.n != null && series.length <= 4) {  // the samples behind each point, in sight (few lines: room)
        g.append(s("text", { class: "n-label", x: xOf(p.x), y: yOf(p.y) - 8 - 10 * (i % 2), "text-anchor": "middle",
          fill: st.colour }, `n=${p.n}`));
      }
    }
    if (pts.some(thin)) anyThin = true;
    svg.append(g);
    const key = s("svg", { width: 34, height: 14, "aria-hidden": "true" },
      s("line", { x1: 1, x2: 33, y1: 7, y2: 7, stroke: st.colour, "stroke-width": 2, "stroke-dasharray": st.dash || null }),
      marker(st.marker, 17, 7, st.colour));
    legend.append(h("li", {}, key, ` ${se.label}`, pts.length ? null : h("span", { class: "nodata" }, " (no data)")));
  });
  fig.insertBefore(svg, fig.firstChild.nextSibling);
  fig.append(legend);
  if (anyThin) {
    fig.append(h("p", { class: "muted chart-note" }, `hollow points rest on fewer than ${MIN_JOINED_N} samples `
      + "and are not joined: read them as single observations"));
  }
  return fig;
}

// viridis, 9 stops: dark purple (low) to yellow (high); lightness rises monotonically.
const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141], [39, 173, 129],
  [92, 200, 99], [170, 220, 50], [253, 231, 37]];

export function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
  const c = VIRIDIS[i].map((v, k) => Math.round(v + (VIRIDIS[i + 1][k] - v) * f));
  return c;
}

/** Background and text colour of a heatmap cell (t in 0..1, already oriented: 1 is best). */
export function heatStyle(t) {
  const [r, g, b] = viridis(t);
  const light = 0.299 * r + 0.587 * g + 0.114 * b > 140;
  return `background-color: rgb(${r} ${g} ${b}); color: ${light ? "#111" : "#fff"}`;
}
