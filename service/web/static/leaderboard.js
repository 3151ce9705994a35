// Leaderboard: per task, a row per checkpoint x setting, columns grouped (metrics, then
// each series by its axis: per length, per language, per category...) and coloured as a
// heatmap; sortable; rows picked for Compare; and the nightly runs of each watch folder as
// a curve of the headline score against checkpoint.

import { api, taskNames } from "./api.js";
import { lineChart, unitRange } from "./charts.js";
import { groupColumns, heatFor, unitOf } from "./columns.js";
import { collator, fmt, h, noData, render, section, when } from "./dom.js";

function sortable(table, tbody, rows, valueOf) {
  let state = { index: null, dir: "descending" };
  return (th, index) => {
    const button = h("button", { type: "button", class: "sort" }, th.textContent);
    th.replaceChildren(button);
    button.addEventListener("click", () => {
      state = { index, dir: state.index === index && state.dir === "descending" ? "ascending" : "descending" };
      for (const other of table.querySelectorAll("th[aria-sort]")) other.removeAttribute("aria-sort");
      th.setAttribute("aria-sort", state.dir);
      const sign = state.dir === "ascending" ? 1 : -1;
      const sorted = [...rows].sort((a, b) => {
        const va = valueOf(a.row, index), vb = valueOf(b.row, index);
        if (va == null) return 1;
        if (vb == null) return -1;
        return sign * (typeof va === "number" ? va - vb : collator.compare(va, vb));
      });
      tbody.replaceChildren(...sorted.map((r) => r.tr));
    });
  };
}

function boardTable(task, board) {
  const groups = groupColumns(board.columns, board.column_info);
  const columns = groups.flatMap((g) => g.columns);
  const heat = new Map(groups.map((g) => [g, heatFor(g, board.rows.flatMap((r) => g.columns.map((c) => r.values[c.name])))]));
  const lead = ["Compare", "Checkpoint", "Setting", "Job", "Finished"];
  const top = h("tr", {}, h("td", { colspan: lead.length }),
    groups.map((g) => h("th", { scope: "colgroup", colspan: g.columns.length }, `${g.group}${unitOf(g)}`)));
  const ths = [...lead.map((t) => h("th", { scope: "col" }, t)),
    ...columns.map((c) => h("th", { scope: "col", class: "num", title: c.name },
      c.name === board.headline ? `${c.key} ★` : c.key))];
  const tbody = h("tbody", {});
  const rows = board.rows.map((r) => {
    const tr = h("tr", {},
      h("td", {}, h("input", { type: "checkbox", class: "pick", value: r.job, "aria-label": `compare ${r.checkpoint} ${r.setting}` })),
      h("th", { scope: "row" }, r.checkpoint), h("td", {}, r.setting),
      h("td", {}, h("a", { href: `/jobs/${r.job}` }, r.job)), h("td", {}, when(r.finished_at)),
      groups.flatMap((g) => g.columns.map((c) => {
        const v = r.values[c.name];
        const beyond = c.axis === "length" && (r.beyond_context || []).includes(Number(c.key));
        if (v == null) return h("td", { class: "num cell-nodata" }, noData());
        return h("td", { class: beyond ? "num beyond" : "num", style: heat.get(g)(v),
          title: beyond ? `beyond the ${r.trained_context}-token context it was trained for (or its RoPE scaling reaches)` : null },
        fmt(v), beyond ? " †" : null);
      })));
    return { row: r, tr };
  });
  const table = h("table", { class: "board", id: `board-${task.replace(/[^\w-]/g, "_")}` },
    h("caption", { class: "muted" }, (board.headline ? `Sorted by ${board.headline} (★), best first; click a column to sort`
      : "Click a column to sort") + (board.rows.some((r) => (r.beyond_context || []).length)
      ? "; † a length beyond the model's context (trained, or reached by its RoPE scaling)" : "")),
    h("thead", {}, top, h("tr", {}, ths)), tbody);
  const sortBy = sortable(table, tbody, rows, (r, i) => i < lead.length
    ? [null, r.checkpoint, r.setting, r.job, r.finished_at][i] : r.values[columns[i - lead.length].name]);
  ths.forEach((th, i) => { if (i > 0) sortBy(th, i); });
  tbody.replaceChildren(...rows.map((r) => r.tr));
  const compare = h("button", { type: "button" }, "Compare selected");
  const note = h("span", { class: "muted", "aria-live": "polite" });
  compare.addEventListener("click", () => {
    const jobs = [...table.querySelectorAll("input.pick:checked")].map((i) => i.value);
    if (jobs.length < 2) { note.textContent = "Pick two or more rows to compare."; return; }
    location.href = `/compare?task=${encodeURIComponent(task)}&${jobs.map((j) => `jobs=${encodeURIComponent(j)}`).join("&")}`;
  });
  return [h("div", { class: "table-wrap" }, table), h("div", { class: "buttons" }, compare, note)];
}

/** Per schedule and watch folder: the headline against checkpoint (names in natural order). */
function nightlyCharts(task, board, schedules, jobsBySchedule) {
  if (!board.headline) return [];
  const unit = board.column_info.find((c) => c.name === board.headline)?.unit;
  const charts = [];
  for (const sch of schedules) {
    const jobs = jobsBySchedule.get(sch.name) || new Map();
    const rows = board.rows.filter((r) => jobs.has(r.job));
    for (const watch of sch.watch) {
      const inside = rows.filter((r) => {
        const p = jobs.get(r.job).checkpoint_path;
        return watch === "." || p === watch || p.startsWith(`${watch}/`);
      });
      if (!inside.length) continue;
      const checkpoints = [...new Set(inside.map((r) => r.checkpoint))].sort(collator.compare);
      const settings = [...new Set(inside.map((r) => r.setting))];
      charts.push(lineChart({
        title: `Nightly "${sch.name}" in ${watch}: ${task} ${board.headline} by checkpoint`,
        xLabel: "checkpoint (in name order: the training step)", yLabel: `${board.headline}${unit ? ` (${unit})` : ""}`,
        categories: checkpoints, yRange: unitRange(unit),
        series: settings.map((st) => ({ label: st, points: inside.filter((r) => r.setting === st)
          .map((r) => ({ x: r.checkpoint, y: r.values[board.headline] })) })),
      }));
    }
  }
  return charts;
}

export async function show() {
  const tasks = await taskNames();
  const [boards, schedules] = await Promise.all([
    Promise.all(tasks.map((t) => api(`/v1/leaderboard?task=${encodeURIComponent(t)}`))),
    api("/v1/schedules"),
  ]);
  const jobsBySchedule = new Map(await Promise.all(schedules.map(async (s) => {
    const list = await api(`/v1/jobs?schedule=${encodeURIComponent(s.name)}&status=succeeded&limit=500`);
    return [s.name, new Map(list.items.map((j) => [j.id, j]))];
  })));
  const sections = [];
  const empty = [];
  tasks.forEach((task, i) => {
    const board = boards[i];
    if (!board.rows.length) { empty.push(task); return; }
    const nightly = nightlyCharts(task, board, schedules, jobsBySchedule);
    sections.push(section(`Task: ${task}`, ...boardTable(task, board),
      nightly.length ? [h("h3", {}, "Nightly runs"), nightly] : null));
  });
  render(h("h1", {}, "Leaderboard"),
    h("p", { class: "muted" }, "A row is one checkpoint under one setting (RoPE, backend, scoring options) with its latest results. "
      + "Cells run dark (worse) to light (better); striped cells have no data."),
    sections.length ? sections : h("p", {}, noData("No results yet: run a job first.")),
    empty.length ? h("p", { class: "muted", id: "no-results" }, `No results yet for: ${empty.join(", ")}.`) : null);
}
