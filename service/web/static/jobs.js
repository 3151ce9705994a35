// Jobs: the submit form and the job list, polled every 1.5 s (progress without a reload).

import { api } from "./api.js";
import { duration, h, noData, render, statusBadge, when } from "./dom.js";
import { submitForm } from "./form.js";
import { ACTIVE, cancelButton, progressCell } from "./progress.js";

const POLL_MS = 1500;

export async function show() {
  const message = h("div", { id: "jobs-message", "aria-live": "polite" });
  const summary = h("p", { id: "jobs-summary", class: "muted", "aria-live": "polite" });
  const tbody = h("tbody", {});
  const table = h("table", { id: "jobs-table" },
    h("caption", { class: "muted" }, "Newest first; progress updates every 1.5 s"),
    h("thead", {}, h("tr", {}, ["Job", "Checkpoint", "Tasks", "Setting", "Priority", "Status", "Progress", "Created",
      "Duration", "Actions"].map((t) => h("th", { scope: "col" }, t)))),
    tbody);
  const rows = new Map(); // job id -> {tr, status}

  function row(job) {
    const cells = {
      status: h("td", {}, statusBadge(job.status)),
      progress: h("td", {}, progressCell(job)),
      duration: h("td", { class: "num" }, duration(job.duration_s)),
      actions: h("td", {}, ACTIVE.has(job.status) ? cancelButton(job, message, refresh) : null),
    };
    const tr = h("tr", { id: `job-${job.id}`, dataset: { status: job.status } },
      h("th", { scope: "row" }, h("a", { href: `/jobs/${job.id}` }, job.id)),
      h("td", { class: "wrap" }, job.checkpoint),
      h("td", {}, job.tasks.map((t) => t.name).join(", ")),
      h("td", { class: "wrap" }, `rope=${job.rope_label} backend=${job.backend}`),
      h("td", { class: "num" }, job.priority),
      cells.status, cells.progress, h("td", {}, when(job.created_at)), cells.duration, cells.actions);
    return { tr, cells, status: job.status };
  }

  function update(entry, job) {
    entry.tr.dataset.status = job.status;
    entry.cells.progress.replaceChildren(...progressCell(job));
    entry.cells.duration.textContent = duration(job.duration_s);
    if (entry.status !== job.status) {
      entry.cells.status.replaceChildren(statusBadge(job.status));
      entry.cells.actions.replaceChildren(...(ACTIVE.has(job.status) ? [cancelButton(job, message, refresh)] : []));
      entry.status = job.status;
    }
  }

  async function refresh() {
    const list = await api("/v1/jobs?limit=50");
    const seen = new Set();
    let previous = null;
    for (const job of list.items) {
      seen.add(job.id);
      let entry = rows.get(job.id);
      if (entry) update(entry, job);
      else rows.set(job.id, entry = row(job));
      if (previous ? previous.nextSibling !== entry.tr : tbody.firstChild !== entry.tr) {
        previous ? previous.after(entry.tr) : tbody.prepend(entry.tr);
      }
      previous = entry.tr;
    }
    for (const [id, entry] of rows) if (!seen.has(id)) { entry.tr.remove(); rows.delete(id); }
    // every job's status, not only the page shown (the API counts them)
    const counts = list.by_status || {};
    const shown = list.items.length < list.total ? ` (the ${list.items.length} newest shown)` : "";
    summary.textContent = list.total ? `${list.total} jobs: ` + Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ")
      + shown : "";
    empty.hidden = list.total > 0;
  }

  const empty = h("p", {}, noData("No jobs yet: submit one above."));
  const form = await submitForm(() => refresh());
  render(
    h("h1", {}, "Jobs"),
    h("details", { open: true, class: "submit" }, h("summary", {}, h("strong", {}, "Submit a job")), form),
    h("h2", { id: "list-title" }, "Jobs"), summary, message, empty,
    h("div", { class: "table-wrap" }, table));
  await refresh();
  const timer = setInterval(() => refresh().catch((e) => {
    summary.textContent = `Could not refresh the list: ${e.message}`;
  }), POLL_MS);
  window.addEventListener("pagehide", () => clearInterval(timer));
}
