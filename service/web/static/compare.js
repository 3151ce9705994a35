// Compare: two or more jobs (settings or checkpoints) per task, one chart per series
// (score against length), and each value's difference from the first job's. Rows are named
// by what differs between them (checkpoint, RoPE, backend, a task option such as the seed).

import { api, ApiError, taskNames } from "./api.js";
import { axisDomain, lineChart, unitRange } from "./charts.js";
import { groupColumns, numericKeys, unitOf } from "./columns.js";
import { errorBox, fmt, h, noData, render, section } from "./dom.js";

const label = (r) => `${r.checkpoint} · ${r.setting}`;

function shown(v) {
  if (v === undefined) return "–";
  return Array.isArray(v) ? v.join(",") : typeof v === "object" && v !== null ? JSON.stringify(v) : String(v);
}

/** What tells the rows apart, and what they share: each row named by the checkpoint, RoPE,
 * backend and task options (seed=1, chat_template=true) whose values differ between the rows,
 * or by its job where none does (two runs of one setting); `same` the checkpoint, RoPE and
 * backend all rows share. */
export function distinguish(rows) {
  const options = [...new Set(rows.flatMap((r) => Object.keys(r.options || {})))];
  const parts = [
    { name: "checkpoint", of: (r) => r.checkpoint, text: (v) => v },
    { name: "rope", of: (r) => r.rope, text: (v) => `rope=${v}` },
    { name: "backend", of: (r) => r.backend, text: (v) => `backend=${v}` },
    ...options.map((k) => ({ name: k, of: (r) => shown(r.options?.[k]), text: (v) => `${k}=${v}` })),
  ];
  const differs = (p) => new Set(rows.map(p.of)).size > 1;
  const apart = parts.filter(differs);
  let names = rows.map((r) => apart.map((p) => p.text(p.of(r))).join(" ") || `job ${r.job}`);
  if (new Set(names).size < names.length) names = names.map((n, i) => (n.startsWith("job ") ? n : `${n} (job ${rows[i].job})`));
  const same = parts.slice(0, 3).filter((p) => !differs(p)).map((p) => p.text(p.of(rows[0])));
  return { names, differ: apart.map((p) => p.name), same };
}

/** A difference with its 95% interval (`u`: unpaired, the two errors combined); bold where the
 * interval excludes zero (a difference beyond the noise), its note in the title. */
export function diffCell(v, d) {
  if (v == null) return h("td", { class: "num cell-nodata" }, noData());
  const text = v === 0 ? "0" : fmt(v);
  if (!d || d.low == null) return h("td", { class: `num${v > 0 ? " diff-pos" : ""}`, title: d?.note || "" }, text);
  const beyond = d.excludes_zero ? " diff-real" : "";
  return h("td", { class: `num${v > 0 ? " diff-pos" : ""}${beyond}`, title: d.note || "" },
    `${text} [${fmt(d.low)}, ${fmt(d.high)}]${d.paired ? "" : " u"}${d.excludes_zero ? " *" : ""}`);
}

/** A value with its standard error (`± se`), its method (and reason where it has none) in the title. */
export function valueCell(v, e) {
  if (v == null) return h("td", { class: "num cell-nodata" }, noData());
  const said = e ? `${e.method}${e.cluster ? ` by ${e.cluster}` : ""}${e.reason ? `: ${e.reason}` : ""}` : "no error recorded";
  return h("td", { class: "num", title: said }, e?.stderr != null ? `${fmt(v)} ± ${fmt(e.stderr)}` : fmt(v));
}

function comparisonView(cmp) {
  const groups = groupColumns(cmp.columns, cmp.column_info);
  const { names, differ, same } = distinguish(cmp.rows);
  const shared = same.length ? ` (${same.join(", ")})` : "";
  const charts = groups.filter((g) => g.axis).map((g) => lineChart({
    title: `${cmp.task}: ${g.group} — ${names.join(" vs ")}${shared}`,
    xLabel: g.axis === "length" ? "length (tokens)" : g.axis.replace("_", " "),
    yLabel: `${g.label}${unitOf(g)}`,
    categories: numericKeys(g) ? null : g.columns.map((c) => c.key),
    xDomain: numericKeys(g) ? axisDomain(g.axis) : null,
    yRange: unitRange(g.columns[0]?.info?.unit),
    series: cmp.rows.map((r, i) => ({ label: names[i], points: g.columns.map((c) => ({
      x: numericKeys(g) ? Number(c.key) : c.key, y: r.values[c.name] })) })),
  }));
  const base = cmp.rows[0];
  const head = (text, r) => h("th", { scope: "col", class: "num", title: `${label(r)}, job ${r.job}` }, text);
  const table = h("table", { class: "compare" },
    h("caption", { class: "muted" }, `Values ± standard error; Δ is each value minus the baseline's (${names[0]}: ${label(base)}, `
      + `job ${cmp.baseline}) with its 95% interval: * the interval excludes zero, u unpaired (the samples differ). `
      + cmp.rows.slice(1).map((r, i) => `${names[i + 1]}: ${r.pairing || "no intervals"}.`).join(" ")),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Column"), head(`${names[0]} (baseline)`, base),
      cmp.rows.slice(1).flatMap((r, i) => [head(names[i + 1], r), head(`Δ ${names[i + 1]}`, r)]))),
    h("tbody", {}, groups.flatMap((g) => g.columns.map((c) => h("tr", {},
      h("th", { scope: "row" }, g.axis ? `${g.group}: ${c.key}` : c.name),
      valueCell(base.values[c.name], base.error_bars?.[c.name]),
      cmp.rows.slice(1).flatMap((r) => [valueCell(r.values[c.name], r.error_bars?.[c.name]),
        diffCell(r.difference[c.name], r.uncertainty?.[c.name])]))))));
  const what = h("p", { class: "compare-what" }, differ.length ? `The rows differ in ${differ.join(", ")}` : "The rows share "
    + "every setting that changes scores (runs of one setting)", same.length ? `; all share ${same.join(", ")}.` : ".");
  return [what, charts.length ? h("div", {}, charts) : h("p", {}, noData("no series to chart")),
    h("div", { class: "table-wrap" }, table)];
}

/** The picker: a task and the leaderboard rows of it to compare. */
async function picker(tasks, chosenTask) {
  const task = chosenTask || tasks[0];
  const board = await api(`/v1/leaderboard?task=${encodeURIComponent(task)}`);
  const taskSelect = h("select", { id: "compare-task", name: "task" }, tasks.map((t) => h("option", { value: t, selected: t === task }, t)));
  taskSelect.addEventListener("change", () => { location.href = `/compare?task=${encodeURIComponent(taskSelect.value)}`; });
  const boxes = board.rows.map((r, i) => h("div", {}, h("label", {},
    h("input", { type: "checkbox", name: "jobs", value: r.job, checked: i < 2 }), ` ${label(r)} (job ${r.job})`)));
  return h("form", { method: "get", action: "/compare", id: "compare-form" },
    h("div", { class: "filters" }, h("div", {}, h("label", { for: "compare-task" }, "Task"), taskSelect)),
    h("fieldset", {}, h("legend", {}, "Rows to compare (the first is the baseline)"),
      boxes.length ? boxes : noData("no results for this task yet")),
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary" }, "Compare")));
}

export async function show() {
  const params = new URLSearchParams(location.search);
  const tasks = await taskNames();
  const jobs = params.getAll("jobs");
  const chosen = params.getAll("task").filter((t) => t);
  const nodes = [h("h1", {}, "Compare")];
  if (jobs.length >= 2) {
    for (const task of chosen.length ? chosen : tasks) {
      try {
        const cmp = await api(`/v1/compare?task=${encodeURIComponent(task)}&${jobs.map((j) => `jobs=${encodeURIComponent(j)}`).join("&")}`);
        nodes.push(section(`Task: ${task}`, ...comparisonView(cmp)));
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        if (chosen.length) nodes.push(section(`Task: ${task}`, errorBox(e.message)));
      }
    }
    if (nodes.length === 1) nodes.push(noData("These jobs share no task with results."));
  } else if (jobs.length === 1) {
    nodes.push(errorBox("Pick two or more jobs to compare."));
  }
  nodes.push(section(jobs.length >= 2 ? "Compare other rows" : "Pick rows", await picker(tasks, chosen[0])));
  render(...nodes);
}
