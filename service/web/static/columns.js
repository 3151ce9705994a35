// Leaderboard and comparison columns, grouped: the task's metrics, then each series as a
// group of points (`accuracy.length=1024` is the point 1024 of `accuracy` along length).
// Read from the column_info the API gives (each point's series, axis and key, computed by
// the server); nothing task-specific, no axis list here.

import { heatStyle } from "./charts.js";

export function parseColumn(name, info) {
  if (info?.kind !== "point" || info.axis == null) return { name, group: "metrics", label: name, axis: null, key: name, info };
  const { series: label, axis, key } = info;
  return { name, group: `${label} by ${axis.replace("_", " ")}`, label, axis, key, info };
}

/** [{group, axis, label, columns: [parsed]}]: the API's column order within a group. */
export function groupColumns(names, infos) {
  const byName = new Map((infos || []).map((c) => [c.name, c]));
  const groups = new Map();
  for (const n of names) {
    const col = parseColumn(n, byName.get(n));
    if (!groups.has(col.group)) groups.set(col.group, { group: col.group, axis: col.axis, label: col.label, columns: [] });
    groups.get(col.group).columns.push(col);
  }
  // metrics, then series along length (the axis long-context readers look at first), then the rest
  const rank = (g) => (g.group === "metrics" ? 0 : g.axis === "length" ? 1 : 2);
  return [...groups.values()].sort((a, b) => rank(a) - rank(b));
}

export function unitOf(group) {
  const units = new Set(group.columns.map((c) => c.info?.unit));
  const [unit] = units;
  return units.size === 1 && unit ? ` (${unit})` : "";
}

/**
 * A function giving each value's heatmap style within its group: fractions on 0..1, other
 * units on the group's own range; flipped where lower is better; none for measurements.
 */
export function heatFor(group, values) {
  const info = group.columns[0]?.info;
  if (!info || info.higher_is_better == null) return () => null;
  const finite = values.filter((v) => v != null && Number.isFinite(v));
  let lo = Math.min(...finite), hi = Math.max(...finite);
  if (info.unit === "fraction") { lo = 0; hi = 1; }
  if (info.unit && info.unit.includes("0-100")) { lo = 0; hi = 100; }
  return (v) => {
    if (v == null || !Number.isFinite(v) || !finite.length) return null;
    let t = hi > lo ? (v - lo) / (hi - lo) : 1;
    if (!info.higher_is_better) t = 1 - t;
    return heatStyle(t);
  };
}

/** Whether a group's keys are numbers (plotted on a numeric axis). */
export function numericKeys(group) {
  return group.columns.every((c) => /^-?\d+(\.\d+)?$/.test(c.key));
}
