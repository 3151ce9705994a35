// A job: its facts and live progress, then its results (summary table, charts of its
// series, the evaluators' plots), partial results and error of a failed job, and the
// per-sample table with filters and a sample viewer (prompt with the needle marked).
// A succeeded job's numbers (metrics, series points) are its stored rows, the ones the
// leaderboard and comparisons show (GET /v1/jobs/{id}/standings); its results.json adds
// what is not stored: summaries, samples per value, the evaluator's point order, plots.

import { api, ApiError } from "./api.js";
import { axisDomain, lineChart, unitRange } from "./charts.js";
import { duration, errorBox, fmt, h, noData, render, section, statusBadge, when } from "./dom.js";
import { ACTIVE, cancelButton, progressCell } from "./progress.js";
import { samplesSection } from "./samples.js";

const POLL_MS = 1500;

function facts(job) {
  const rows = [
    ["Status", statusBadge(job.status)],
    ["Checkpoint", h("span", {}, h("a", { href: "/checkpoints" }, job.checkpoint), ` (${job.checkpoint_path})`)],
    ["Fingerprint", h("code", { class: "fp" }, job.fingerprint)],
    ["Setting", `rope=${job.rope_label} backend=${job.backend}`],
    ["Tasks", job.tasks.map((t) => t.name).join(", ")],
    ["Priority", job.priority],
    ["Schedule", job.schedule || "–"],
    ...(job.ran_elsewhere ? [["Ran", "elsewhere (lctx eval), recorded with lctx upload"]] : []),
    ["Created", when(job.created_at)], ["Started", when(job.started_at)], ["Finished", when(job.finished_at)],
    ["Duration", duration(job.duration_s)], ["Attempts", job.attempts],
  ];
  return h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

const seriesLabel = (name, at) => [name, ...Object.keys(at).sort().map((k) => `${k}=${at[k]}`)].join(".");

/** A task's result from its stored row (values, units, directions, the headline), with the
 * results file's entry (`file`, null where it is gone) adding what is not stored: the summary,
 * the samples behind each value, the evaluator's order of metrics and points. */
function storedResult(standing, file) {
  const info = new Map(standing.column_info.map((c) => [c.name, c]));
  const value = (name) => standing.row.values[name] ?? null;
  const fileMetrics = file?.metrics || [];
  const metrics = standing.columns.filter((n) => info.get(n).kind === "metric").map((n) => ({
    name: n, value: value(n), unit: info.get(n).unit, higher_is_better: info.get(n).higher_is_better,
    n: fileMetrics.find((m) => m.name === n)?.n, error: fileMetrics.find((m) => m.name === n)?.error,
  }));
  const at = (i) => fileMetrics.findIndex((m) => m.name === i.name) >>> 0;  // not in the file: last
  metrics.sort((a, b) => at(a) - at(b));
  const groups = new Map();
  for (const n of standing.columns) {
    const c = info.get(n);
    if (c.kind !== "point") continue;
    const id = `${c.series} by ${c.axis}`;
    if (!groups.has(id)) {
      const twin = (file?.series || []).find((f) => f.axis === c.axis && seriesLabel(f.name, f.at) === c.series);
      const [name, ...coords] = c.series.split(/\.(?=[A-Za-z_]\w*=)/);  // `accuracy.depth=50`
      groups.set(id, { twin, name: twin ? twin.name : name, axis: c.axis, unit: c.unit, points: [],
        at: twin ? twin.at : Object.fromEntries(coords.map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)])) });
    }
    groups.get(id).points.push({ key: /^-?\d+$/.test(c.key) ? Number(c.key) : c.key, value: value(n) });
  }
  const series = [...groups.values()].map(({ twin, ...se }) => {
    if (twin) {
      const keys = twin.points.map((p) => String(p.key));
      const pos = (p) => keys.indexOf(String(p.key)) >>> 0;
      se.points.sort((a, b) => pos(a) - pos(b));
      for (const p of se.points) {
        p.n = twin.points[pos(p)]?.n;
        p.error = twin.points[pos(p)]?.error;
      }
    }
    return se;
  });
  return { headline: standing.headline, metrics, series, summary: file?.summary || "" };
}

/** A value's error as the tables show it: `± se [low, high]`, or why it has none; the method in the title. */
function errorCell(e) {
  if (!e) return h("td", { class: "num muted", title: "results written before lctx recorded errors" }, "–");
  const how = `${e.method}${e.cluster ? ` by ${e.cluster}` : ""}${e.clusters ? ` (${e.clusters} contexts)` : ""}`
    + `${e.resamples ? ` (${e.resamples} resamples)` : ""}${e.reason ? `: ${e.reason}` : ""}`;
  if (e.stderr == null) return h("td", { class: "muted", title: how }, `none: ${e.reason}`);
  return h("td", { class: "num", title: how }, `± ${fmt(e.stderr)} [${fmt(e.low)}, ${fmt(e.high)}]`);
}

function metricsTable(result, source) {
  return h("table", { class: "metrics-table", "data-source": source },
    h("thead", {}, h("tr", {}, ["Metric", "Value", "± s.e. [95%]", "Unit", "n", "Better"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, result.metrics.map((m) => h("tr", {},
      h("th", { scope: "row" }, m.name === result.headline ? h("strong", {}, `${m.name} (headline)`) : m.name),
      h("td", { class: "num" }, m.value == null ? noData() : fmt(m.value)), errorCell(m.error), h("td", {}, m.unit),
      h("td", { class: "num" }, m.n ?? "–"), h("td", {}, m.higher_is_better == null ? "–" : m.higher_is_better ? "higher" : "lower")))));
}

/** One chart per (series name, axis): the series of a 2-D grid (`at`) are its lines. */
function seriesCharts(task, result, job) {
  const groups = new Map();
  for (const se of result.series || []) {
    const key = `${se.name} by ${se.axis}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(se);
  }
  const charts = [];
  for (const [key, list] of groups) {
    const numeric = list.every((se) => se.points.every((p) => typeof p.key === "number"));
    const categories = numeric ? null : [...new Set(list.flatMap((se) => se.points.map((p) => String(p.key))))];
    const series = list.map((se) => ({
      label: Object.keys(se.at).length ? Object.entries(se.at).map(([k, v]) => `${k}=${v}`).join(" ") : se.name,
      points: se.points.map((p) => ({ x: numeric ? p.key : String(p.key), y: p.value, n: p.n })),
    }));
    const axis = list[0].axis.replace("_", " ");
    charts.push(lineChart({
      title: `${task}: ${key} — ${job.checkpoint}, rope=${job.rope_label} backend=${job.backend}`,
      xLabel: axis === "length" ? "length (tokens)" : axis, yLabel: `${list[0].name} (${list[0].unit})`,
      series, categories, yRange: unitRange(list[0].unit), xDomain: numeric ? axisDomain(list[0].axis) : null,
    }));
  }
  return charts;
}

/** The points of series along a named axis (bins, categories) as tables: one row per key,
 * one column per series of the group (a grid's `at`, "all" for none), each cell the value
 * and the samples behind it. MRCR's and Graphwalks' per-bin tables are these. */
function seriesTables(result) {
  const groups = new Map();
  for (const se of result.series || []) {
    if (se.points.every((p) => typeof p.key === "number")) continue;  // lengths, depths: the charts show them
    const key = `${se.name} by ${se.axis}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(se);
  }
  const label = (se) => (Object.keys(se.at).length
    ? Object.entries(se.at).map(([k, v]) => `${k}=${v}`).join(" ") : "all");
  const cell = (se, key) => {
    const p = se.points.find((q) => String(q.key) === key);
    if (p == null || p.value == null) return noData();
    const err = p.error?.stderr != null ? ` ± ${fmt(p.error.stderr)}` : "";
    return p.n == null ? `${fmt(p.value)}${err}` : `${fmt(p.value)}${err} (n=${p.n})`;
  };
  return [...groups].map(([key, list]) => {
    const keys = [...new Set(list.flatMap((se) => se.points.map((p) => String(p.key))))];
    return h("table", { class: "series-table" },
      h("caption", {}, `${key} (${list[0].unit})`),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, list[0].axis),
        list.map((se) => h("th", { scope: "col" }, label(se))))),
      h("tbody", {}, keys.map((k) => h("tr", {}, h("th", { scope: "row" }, k),
        list.map((se) => h("td", { class: "num" }, cell(se, k)))))));
  });
}

function taskSection(key, entry, plots, job, standing) {
  const result = standing ? storedResult(standing, entry.result) : entry.result;
  const body = [];
  if (entry.partial) {
    body.push(h("p", { class: "muted" }, `Partial: ${entry.samples_done ?? "?"} samples recorded` +
      (entry.error ? ` (${entry.error})` : "")));
  }
  const beyond = entry.context?.beyond || [];
  if (beyond.length) {
    body.push(h("p", { class: "beyond-note", role: "note" }, `† ${beyond.join(", ")} tokens lie beyond the ` +
      `${entry.context.rope_scaled ? "context its RoPE scaling reaches" : "context the model was trained for"} ` +
      `(${entry.context.reach} tokens${entry.context.rope_scaled ? `, trained ${entry.context.trained}` : ", no RoPE scaling"}): ` +
      "run on purpose, scores there measure extrapolation."));
  }
  if (entry.chat_template) {
    body.push(h("p", { class: "muted" }, entry.chat_template.applied
      ? `Prompts wrapped in the checkpoint's chat template (${entry.chat_template.file}).` : "No chat template applied."));
  }
  if (result) {
    if (!standing && job.status === "succeeded") {
      body.push(h("p", { class: "muted" }, "Not on the leaderboard: no row was stored for this task; " +
        "the numbers below are its results file's."));
    }
    body.push(h("p", {}, result.summary), metricsTable(result, standing ? "stored" : "file"), ...seriesTables(result),
      h("div", {}, seriesCharts(key, result, job)));
  } else {
    body.push(noData("no results for this task"));
  }
  const mine = plots.filter((p) => p.task === key);
  if (mine.length) {
    body.push(h("h3", {}, "Plots"), h("div", {}, mine.map((p) => h("figure", { class: "plot" },
      h("img", { src: p.url, alt: `${key} plot ${p.name} of job ${job.id} (${job.checkpoint})`, loading: "lazy" }),
      h("figcaption", {}, `${p.name} — ${job.checkpoint}, rope=${job.rope_label}`)))));
  }
  return section(`Results: ${key}`, ...body);
}

export async function show() {
  const id = location.pathname.split("/").pop();
  let job;
  try {
    job = await api(`/v1/jobs/${id}`);
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    render(h("h1", {}, `Job ${id}`), errorBox(e.message), h("p", {}, h("a", { href: "/" }, "All jobs")));
    return;
  }
  const message = h("div", { "aria-live": "polite" });
  const progress = h("div", { id: "job-progress", "aria-live": "polite" }, progressCell(job));
  const head = h("div", { id: "job-facts" }, facts(job));
  const actions = h("div", { class: "buttons" });
  const results = h("div", { id: "job-results" });
  const raw = h("p", {}, "Raw JSON: ", h("a", { href: `/v1/jobs/${id}` }, "job"), " · ",
    h("a", { href: `/v1/jobs/${id}/results`, id: "raw-results" }, "results"), " · ",
    h("a", { href: `/v1/jobs/${id}/samples` }, "samples (JSON lines)"));
  render(h("h1", {}, `Job ${id}`), head, h("h2", {}, "Progress"), progress, actions, message, raw, results);

  function setActions(j) {
    actions.replaceChildren(...(ACTIVE.has(j.status) ? [cancelButton(j, message, () => tick())] : []));
  }

  async function showResults(j) {
    if (ACTIVE.has(j.status)) {
      results.replaceChildren(h("p", { class: "muted" }, "Results appear when the job ends."),
        await samplesSection(j));
      return;
    }
    const nodes = [];
    if (j.status !== "succeeded") {
      nodes.push(section("Error", errorBox(j.error || `the job was ${j.status}`),
        h("p", { class: "muted" }, "What finished before it ended is shown below as partial results.")));
    }
    const [stored, file, dropped] = await Promise.allSettled([
      j.status === "succeeded" ? api(`/v1/jobs/${id}/standings`) : Promise.resolve({ tasks: [] }),
      api(`/v1/jobs/${id}/results`),
      j.status === "succeeded" && j.schedule ? api(`/v1/regressions?job=${id}`) : Promise.resolve([])]);
    for (const r of [stored, file, dropped]) {
      if (r.status === "rejected" && !(r.reason instanceof ApiError)) throw r.reason;
    }
    if (dropped.value?.length) {  // a nightly regression: this checkpoint dropped beyond the noise
      nodes.push(section("Regressions", h("ul", { class: "regressions" }, dropped.value.map((r) => h("li", {},
        `${r.task} ${r.column}: ${fmt(r.baseline_value)} → ${fmt(r.value)} (${fmt(r.difference)}, 95% `
        + `[${fmt(r.low)}, ${fmt(r.high)}], paired) against the ${r.against} job `,
        h("a", { href: `/jobs/${r.baseline_job_id}` }, r.baseline_job_id))))));
    }
    if (stored.status === "rejected") nodes.push(errorBox(`Stored results: ${stored.reason.message}`));
    if (file.status === "rejected") nodes.push(errorBox(`Results: ${file.reason.message}`));
    const standings = new Map((stored.value?.tasks || []).map((t) => [t.task, t]));
    const entries = file.value?.results || {};
    const plots = file.value?.plots || [];
    const keys = [...new Set([...Object.keys(entries), ...standings.keys()])];  // the file's order; a lost file's rows
    for (const key of keys) nodes.push(taskSection(key, entries[key] || {}, plots, j, standings.get(key)));
    if (!keys.length && file.status === "fulfilled") nodes.push(noData("no results"));
    nodes.push(await samplesSection(j));
    results.replaceChildren(...nodes);
  }

  let shown = job.status;
  setActions(job);
  await showResults(job);
  async function tick() {
    const j = await api(`/v1/jobs/${id}`);
    progress.replaceChildren(...progressCell(j));
    if (j.status !== shown) {
      shown = j.status;
      head.replaceChildren(facts(j));
      setActions(j);
      await showResults(j);
    }
    if (!ACTIVE.has(j.status)) clearInterval(timer);
  }
  const timer = ACTIVE.has(job.status) ? setInterval(() => tick().catch((e) => {
    message.replaceChildren(errorBox(`Could not refresh: ${e.message}`));
  }), POLL_MS) : null;
}
