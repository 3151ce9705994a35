// Leaderboard: per task, a row per checkpoint x setting, columns grouped (metrics, then
// each series by its axis: per length, per language, per category...) and coloured as a
// heatmap; a page at a time, sorted and paged by the server (a year of nightly runs is
// thousands of rows); rows picked for Compare; and the nightly runs of each watch folder as
// a curve of the headline score against checkpoint, read as that one lineage's rows.

import { api, taskNames } from "./api.js";
import { lineChart, unitRange } from "./charts.js";
import { groupColumns, heatFor, unitOf } from "./columns.js";
import { collator, fmt, h, noData, render, section, when } from "./dom.js";

const PAGE = 50;
const CURVE_NIGHTS = 200; // points of a nightly curve: its newest nights

/** One page of a task's board, as the server sorts and pages it. */
function boardQuery(task, state, extra = {}) {
  const params = new URLSearchParams({ task, limit: String(PAGE), offset: String(state.offset), ...extra });
  if (state.sort) params.set("sort", state.sort);
  if (state.order) params.set("order", state.order);
  return api(`/v1/leaderboard?${params}`);
}

/**
 * The column groups shown: the metrics always, then the others the reader chose, or (none
 * chosen) as many as fit the screen (`hidden` set by `fitToScreen`); the rest are folded
 * behind a chooser, so a task with many series (RULER: one per sub-task) never scrolls sideways.
 */
function shownGroups(all, state) {
  if (state.shown) return all.filter((g) => g.group === "metrics" || state.shown.has(g.group));
  return all.filter((g) => !(state.hidden || new Set()).has(g.group));
}

function columnChooser(all, shown, state, redraw) {
  const folded = all.filter((g) => !shown.includes(g));
  if (!folded.length && !state.shown) return null;
  const boxes = all.filter((g) => g.group !== "metrics").map((g) => {
    const box = h("input", { type: "checkbox", class: "column-group", value: g.group, checked: shown.includes(g) });
    box.addEventListener("change", () => {
      const picked = new Set([...document.querySelectorAll(`#${state.id} input.column-group:checked`)].map((b) => b.value));
      redraw({ shown: picked, choosing: true });
    });
    return h("label", {}, box, ` ${g.group}`);
  });
  return h("details", { class: "more-columns", id: state.id, open: state.choosing },
    h("summary", {}, folded.length ? `${folded.length} column group(s) folded to fit the screen: choose the columns`
      : "Choose the columns"), h("div", { class: "buttons" }, boxes));
}

function boardTable(task, board, state, reload, redraw) {
  const all = groupColumns(board.columns, board.column_info);
  const groups = shownGroups(all, state);
  const columns = groups.flatMap((g) => g.columns);
  const heat = new Map(groups.map((g) => [g, heatFor(g, board.rows.flatMap((r) => g.columns.map((c) => r.values[c.name])))]));
  const lead = [["Compare", null], ["Checkpoint", "checkpoint"], ["Setting", "setting"], ["Job", "job"], ["Finished", "finished_at"]];
  const top = h("tr", {}, h("td", { colspan: lead.length }),
    groups.map((g) => h("th", { scope: "colgroup", colspan: g.columns.length }, `${g.group}${unitOf(g)}`)));
  const sortedBy = state.sort || board.headline;
  const header = (label, key, num) => {
    const th = h("th", { scope: "col", class: num ? "num" : null, title: num ? key : null });
    if (!key) { th.textContent = label; return th; }
    const button = h("button", { type: "button", class: "sort" }, label.replace(/_/g, "_\u200b"));  // breaks after _
    if (key === sortedBy) th.setAttribute("aria-sort", state.order === "asc" ? "ascending" : "descending");
    button.addEventListener("click", () => {
      const order = key === sortedBy && state.order !== "asc" ? "asc" : "desc";
      reload({ sort: key, order, offset: 0 });
    });
    th.append(button);
    return th;
  };
  const ths = [...lead.map(([label, key]) => header(label, key, false)),
    ...columns.map((c) => header(c.name === board.headline ? `${c.key} ★` : c.key, c.name, true))];
  const rows = board.rows.map((r) => h("tr", {},
    h("td", {}, h("input", { type: "checkbox", class: "pick", value: r.job, "aria-label": `compare ${r.checkpoint} ${r.setting}` })),
    h("th", { scope: "row" }, r.checkpoint), h("td", {}, r.setting),
    h("td", {}, h("a", { href: `/jobs/${r.job}` }, r.job)), h("td", {}, when(r.finished_at)),
    groups.flatMap((g) => g.columns.map((c) => {
      const v = r.values[c.name];
      const beyond = c.axis === "length" && (r.beyond_context || []).includes(Number(c.key));
      if (v == null) return h("td", { class: "num cell-nodata" }, noData());
      const se = r.errors?.[c.name];  // the value's standard error: in the cell's title, the cell stays a number
      const said = [se != null ? `± ${fmt(se)} (standard error)` : null,
        beyond ? `beyond the ${r.trained_context}-token context it was trained for (or its RoPE scaling reaches)` : null]
        .filter((x) => x).join("; ");
      return h("td", { class: beyond ? "num beyond" : "num", style: heat.get(g)(v), title: said || null },
        fmt(v), beyond ? " †" : null);
    }))));
  const table = h("table", { class: "board", id: `board-${task.replace(/[^\w-]/g, "_")}` },
    h("caption", { class: "muted" }, (board.headline && !state.sort ? `Sorted by ${board.headline} (★), best first; click a column to sort`
      : "Click a column to sort") + "; a value's standard error in its title"
      + (board.rows.some((r) => (r.beyond_context || []).length)
      ? "; † a length beyond the model's context (trained, or reached by its RoPE scaling)" : "")),
    h("thead", {}, top, h("tr", {}, ths)), h("tbody", {}, rows));
  const compare = h("button", { type: "button" }, "Compare selected");
  const note = h("span", { class: "muted", "aria-live": "polite" });
  compare.addEventListener("click", () => {
    const jobs = [...table.querySelectorAll("input.pick:checked")].map((i) => i.value);
    if (jobs.length < 2) { note.textContent = "Pick two or more rows to compare."; return; }
    location.href = `/compare?task=${encodeURIComponent(task)}&${jobs.map((j) => `jobs=${encodeURIComponent(j)}`).join("&")}`;
  });
  const last = state.offset + board.rows.length;
  const previous = h("button", { type: "button", class: "page-previous", disabled: state.offset === 0 }, "Previous");
  // a total that is a lower bound (`total_exact` false: an ad-hoc filter counted up to its bound): page on while full
  const more = board.total_exact === false ? board.rows.length >= PAGE : last < board.total;
  const next = h("button", { type: "button", class: "page-next", disabled: !more }, "Next");
  previous.addEventListener("click", () => reload({ offset: Math.max(0, state.offset - PAGE) }));
  next.addEventListener("click", () => reload({ offset: state.offset + PAGE }));
  const pager = h("div", { class: "buttons pager" }, previous,
    h("span", { class: "muted page-range" }, `rows ${board.rows.length ? state.offset + 1 : 0}–${last} of ${board.total_exact === false ? "at least " : ""}${board.total}`),
    next);
  return [h("div", { class: "table-wrap" }, table), columnChooser(all, groups, state, redraw), pager,
    h("div", { class: "buttons" }, compare, note)].filter(Boolean);
}

/** A task's board that pages and sorts in place. */
function boardBlock(task, first) {
  const block = h("div", { class: "board-block" });
  let state = { offset: 0, sort: null, order: null, shown: null, hidden: null,
    id: `columns-${task.replace(/[^\w-]/g, "_")}` };
  let board = first;
  const draw = () => block.replaceChildren(...boardTable(task, board, state, reload, redraw));
  // Column groups folded, last first (never the metrics), until the table fits its screen.
  const fitToScreen = () => {
    if (state.shown || !block.isConnected) return;
    // a series of the whole task (RULER's average by length) before those of one part of it (`score.task=vt`)
    const groups = groupColumns(board.columns, board.column_info).filter((g) => g.group !== "metrics");
    const names = [...groups.filter((g) => !String(g.label).includes("=")),
      ...groups.filter((g) => String(g.label).includes("="))].map((g) => g.group);
    state = { ...state, hidden: new Set() };
    draw();
    for (let keep = names.length - 1; keep >= 0; keep -= 1) {
      const wrap = block.querySelector(".table-wrap");
      if (wrap.scrollWidth <= wrap.clientWidth) return;
      state = { ...state, hidden: new Set(names.slice(keep)) };
      draw();
    }
  };
  const redraw = (change) => { state = { ...state, ...change }; draw(); };
  const reload = async (change) => {
    state = { ...state, ...change };
    board = await boardQuery(task, state);
    draw();
    fitToScreen();
  };
  draw();
  requestAnimationFrame(fitToScreen);  // once the page is on screen (show() renders it synchronously)
  return block;
}

/** Per schedule and watch folder: the headline against checkpoint (names in natural order),
 * read as that lineage's own rows. */
async function nightlyCharts(task, board, schedules) {
  if (!board.headline) return [];
  const unit = board.column_info.find((c) => c.name === board.headline)?.unit;
  const charts = [];
  for (const sch of schedules) {
    for (const watch of sch.watch) {
      // the newest CURVE_NIGHTS nights of the lineage: a fixed cost however long the run (the title says
      // how many it has; the chart orders checkpoints by name)
      const params = new URLSearchParams({ task, lineage: watch, schedule: sch.name, sort: "finished_at", order: "desc",
        limit: String(CURVE_NIGHTS) });
      const answer = await api(`/v1/leaderboard?${params}`);
      const inside = answer.rows;
      if (!inside.length) continue;
      const shown = answer.total > inside.length ? ` (the newest ${inside.length} of ${answer.total} rows)` : "";
      // the regressions the schedule found in this lineage: their checkpoints marked ▼ on the curve, listed below it
      const regressions = await api(`/v1/regressions?${new URLSearchParams({ schedule: sch.name, task, lineage: watch,
        limit: "200" })}`);
      const dropped = new Set(regressions.map((r) => r.checkpoint));
      const mark = (c) => (dropped.has(c) ? `${c} ▼` : c);
      const checkpoints = [...new Set(inside.map((r) => r.checkpoint))].sort(collator.compare);
      const settings = [...new Set(inside.map((r) => r.setting))];
      charts.push(lineChart({
        title: `Nightly "${sch.name}" in ${watch}: ${task} ${board.headline} by checkpoint${shown}`,
        xLabel: "checkpoint (in name order: the training step; ▼ a regression)",
        yLabel: `${board.headline}${unit ? ` (${unit})` : ""}`,
        categories: checkpoints.map(mark), yRange: unitRange(unit),
        series: settings.map((st) => ({ label: st, points: inside.filter((r) => r.setting === st)
          .map((r) => ({ x: mark(r.checkpoint), y: r.values[board.headline] })) })),
      }));
      if (regressions.length) {
        charts.push(h("ul", { class: "regressions" }, regressions.map((r) => h("li", {},
          h("a", { href: `/jobs/${r.job_id}` }, r.checkpoint), `: ${r.column} ${fmt(r.baseline_value)} → ${fmt(r.value)} `
          + `(${fmt(r.difference)}, 95% [${fmt(r.low)}, ${fmt(r.high)}]) against the ${r.against} job ${r.baseline_job_id}`))));
      }
    }
  }
  return charts;
}

export async function show() {
  const tasks = await taskNames();
  const [boards, schedules] = await Promise.all([
    Promise.all(tasks.map((t) => boardQuery(t, { offset: 0 }))),
    api("/v1/schedules"),
  ]);
  const present = tasks.filter((_, i) => boards[i].rows.length);
  const nightly = await Promise.all(present.map((t) => nightlyCharts(t, boards[tasks.indexOf(t)], schedules)));
  const sections = present.map((task, i) => section(`Task: ${task}`, boardBlock(task, boards[tasks.indexOf(task)]),
    nightly[i].length ? [h("h3", {}, "Nightly runs"), nightly[i]] : null));
  const empty = tasks.filter((t) => !present.includes(t));
  render(h("h1", {}, "Leaderboard"),
    h("p", { class: "muted" }, "A row is one checkpoint under one setting (RoPE, backend, scoring options) with its latest results. "
      + "Cells run dark (worse) to light (better); striped cells have no data."),
    sections.length ? sections : h("p", {}, noData("No results yet: run a job first.")),
    empty.length ? h("p", { class: "muted", id: "no-results" }, `No results yet for: ${empty.join(", ")}.`) : null);
}
