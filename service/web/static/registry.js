// Checkpoints and schedules: the registry (family, variant, RoPE, fingerprint, latest
// results) and each schedule with its next run and the jobs it submitted.

import { api, ApiError } from "./api.js";
import { h, noData, render, section, statusBadge, when } from "./dom.js";

function params(n) {
  return n >= 1e9 ? `${(n / 1e9).toFixed(1)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : `${(n / 1e3).toFixed(0)} k`;
}

async function latest(checkpoint) {
  const list = await api(`/v1/jobs?checkpoint=${encodeURIComponent(checkpoint.name)}&status=succeeded&limit=1`);
  const job = list.items[0];
  if (!job) return noData("no results yet");
  try {
    const body = await api(`/v1/jobs/${job.id}/results`);
    return h("div", {}, h("a", { href: `/jobs/${job.id}` }, `job ${job.id}`), ` (${when(job.finished_at)})`,
      h("ul", {}, Object.entries(body.results || {}).map(([k, e]) => h("li", {}, e.result?.summary || k))));
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return h("a", { href: `/jobs/${job.id}` }, `job ${job.id}`);
  }
}

async function checkpointsTable(checkpoints) {
  if (!checkpoints.length) return h("p", {}, noData("No checkpoints registered."));
  const last = await Promise.all(checkpoints.map(latest));
  return h("div", { class: "table-wrap" }, h("table", { id: "checkpoints-table" },
    h("thead", {}, h("tr", {}, ["Name", "Family", "Variant", "Parameters", "RoPE", "Context", "Fingerprint", "Path",
      "Registered", "Latest results"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, checkpoints.map((c, i) => h("tr", {},
      h("th", { scope: "row" }, c.name), h("td", {}, c.family ?? noData()), h("td", {}, c.variant),
      h("td", { class: "num" }, params(c.parameters)), h("td", {}, c.rope_label ?? noData()),
      h("td", { class: "num" }, c.context_length ?? noData()),
      h("td", {}, h("code", { class: "fp", title: c.fingerprint }, c.fingerprint.slice(0, 12))),
      h("td", {}, c.path), h("td", {}, when(c.created_at)), h("td", {}, last[i]))))));
}

async function schedulesTable(schedules) {
  if (!schedules.length) return h("p", {}, noData("No schedules."));
  const jobs = await Promise.all(schedules.map((s) => api(`/v1/jobs?schedule=${encodeURIComponent(s.name)}&limit=20`)));
  return h("div", { class: "table-wrap" }, h("table", { id: "schedules-table" },
    h("thead", {}, h("tr", {}, ["Name", "Cron", "Watch folders", "Suite", "Next run", "Last run", "Jobs submitted"]
      .map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, schedules.map((s, i) => h("tr", {},
      h("th", { scope: "row" }, s.name), h("td", {}, h("code", {}, s.cron)), h("td", {}, s.watch.join(", ")),
      h("td", {}, (s.suite.tasks || []).map((t) => t.name).join(", "),
        ` · rope=${s.rope_label} backend=${s.suite.backend || "auto"}`),
      h("td", {}, when(s.next_run_at)), h("td", {}, when(s.last_run_at)),
      h("td", {}, jobs[i].total ? [h("span", {}, `${jobs[i].total} in all`), h("ul", {}, jobs[i].items.map((j) =>
        h("li", {}, h("a", { href: `/jobs/${j.id}` }, j.id), ` ${j.checkpoint} `, statusBadge(j.status))))]
        : noData("none yet")))))));
}

export async function show() {
  const [checkpoints, schedules] = await Promise.all([api("/v1/checkpoints"), api("/v1/schedules")]);
  render(h("h1", {}, "Checkpoints and schedules"),
    section("Checkpoints", await checkpointsTable(checkpoints)),
    section("Schedules", await schedulesTable(schedules)));
}
