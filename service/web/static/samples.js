// The per-sample table of a job: filter by task, length, depth and outcome; open one
// sample to read its prompt (needle marked), prediction and references.

import { api, ApiError, records } from "./api.js";
import { collator, errorBox, fmt, h, noData, section } from "./dom.js";

const PAGE = 100;

/** A sample's depth as one label: needle's percent, or passkey's decile. */
function depthOf(r) {
  if (r.depth_percent != null) return `${r.depth_percent}%`;
  if (r.depth_decile != null) return `${r.depth_decile * 10}-${r.depth_decile * 10 + 10}%`;
  return null;
}

/** Task, then length, then depth (needle's percent or passkey's decile), then id (natural order). */
function bySampleOrder(a, b) {
  const depth = (r) => r.depth_percent ?? (r.depth_decile != null ? r.depth_decile * 10 : -1);
  return collator.compare(a._key, b._key) || (a.length ?? 0) - (b.length ?? 0) || depth(a) - depth(b)
    || collator.compare(String(a.id), String(b.id));
}

function outcome(r) {
  if (r.error) return "error";
  if (typeof r.score !== "number") return "unscored";
  return r.score > 0 ? "right" : "wrong";
}

function text(value) {
  if (value == null) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function select(id, label, values) {
  const el = h("select", { id }, h("option", { value: "" }, "all"), values.map((v) => h("option", { value: v }, v)));
  return { el, wrap: h("div", {}, h("label", { for: id }, label), el) };
}

async function openSample(job, r, dialog) {
  const body = h("div", {}, h("p", { class: "muted" }, "Loading the prompt…"));
  const facts = Object.entries(r).filter(([k]) => !k.startsWith("_") && !["prediction", "references", "id", "config"].includes(k));
  dialog.replaceChildren(
    h("h2", { id: "sample-title" }, `Sample ${r.id}`),
    h("dl", { class: "facts" },
      h("dt", {}, "Outcome"), h("dd", {}, `${outcome(r)} (score ${fmt(r.score)})`),
      h("dt", {}, "Prediction"), h("dd", {}, h("code", { id: "sample-prediction" }, text(r.prediction) || "(empty)")),
      h("dt", {}, "References"), h("dd", { id: "sample-references" }, (r.references || []).map((x) => h("code", {}, text(x))),
        (r.references || []).length ? null : noData()),
      facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, text(v))])),
    h("h3", {}, "Prompt"), body,
    h("form", { method: "dialog", class: "buttons" }, h("button", { value: "close", autofocus: true }, "Close")));
  dialog.showModal();
  try {
    const p = await api(`/v1/jobs/${job.id}/prompt?task=${encodeURIComponent(r._key)}&sample=${encodeURIComponent(r.id)}`);
    const pre = h("pre", { class: "prompt", tabindex: "0", "aria-label": "prompt" });
    if (p.needle_start >= 0) {
      const end = p.needle_start + p.needle.length;
      pre.append(p.prompt.slice(0, p.needle_start), h("mark", { class: "needle" }, p.prompt.slice(p.needle_start, end)),
        p.prompt.slice(end));
    } else {
      pre.append(p.prompt);
    }
    body.replaceChildren(h("p", { class: "muted" }, `${p.prompt.length.toLocaleString("en-US")} characters; the needle is marked.`), pre);
    pre.querySelector("mark")?.scrollIntoView({ block: "center" });
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    body.replaceChildren(h("p", { class: "muted" }, `No prompt to show: ${e.message}`));
  }
}

export async function samplesSection(job) {
  const keys = Object.keys(job.progress || {}).length ? Object.keys(job.progress) : job.tasks.map((t) => t.name);
  let all = [];
  try {
    for (const key of keys) {
      const rs = await records(`/v1/jobs/${job.id}/samples?task=${encodeURIComponent(key)}`);
      all = all.concat(rs.map((r) => ({ ...r, _key: key })));
    }
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return section("Samples", errorBox(e.message));
  }
  if (!all.length) return section("Samples", noData("no samples recorded yet"));
  all.sort(bySampleOrder);  // records arrive in completion order; read them by task, length, depth, id
  const lengths = [...new Set(all.map((r) => r.length).filter((v) => v != null))].sort((a, b) => a - b);
  const depths = [...new Set(all.map(depthOf).filter((v) => v != null))].sort(collator.compare);
  const fTask = select("filter-task", "Task", keys);
  const fLength = select("filter-length", "Length (tokens)", lengths.map(String));
  const fDepth = select("filter-depth", "Depth", depths);
  const fOutcome = select("filter-outcome", "Outcome", ["right", "wrong", "error"]);
  const count = h("p", { id: "samples-count", "aria-live": "polite" });
  const tbody = h("tbody", {});
  const more = h("button", { type: "button" }, "Show more");
  const dialog = h("dialog", { id: "sample-dialog", "aria-labelledby": "sample-title" });
  let limit = PAGE;

  function draw() {
    const shown = all.filter((r) => (!fTask.el.value || r._key === fTask.el.value)
      && (!fLength.el.value || String(r.length) === fLength.el.value)
      && (!fDepth.el.value || depthOf(r) === fDepth.el.value)
      && (!fOutcome.el.value || outcome(r) === fOutcome.el.value));
    count.textContent = `${shown.length} of ${all.length} samples`;
    tbody.replaceChildren(...shown.slice(0, limit).map((r) => h("tr", { dataset: { outcome: outcome(r) } },
      h("th", { scope: "row" }, h("button", { type: "button", class: "link", onclick: () => openSample(job, r, dialog),
        "aria-label": `Open sample ${r.id}` }, r.id)),
      h("td", {}, r._key), h("td", { class: "num" }, r.length ?? "–"), h("td", {}, depthOf(r) ?? "–"),
      h("td", { class: "pred" }, text(r.prediction)), h("td", {}, (r.references || []).map(text).join(" | ")),
      h("td", { class: "num" }, r.error ? h("span", { class: "error" }, "error") : fmt(r.score)),
      h("td", {}, outcome(r)))));
    more.hidden = shown.length <= limit;
  }
  for (const f of [fTask, fLength, fDepth, fOutcome]) f.el.addEventListener("change", () => { limit = PAGE; draw(); });
  more.addEventListener("click", () => { limit += PAGE; draw(); });
  draw();
  return section("Samples",
    h("div", { class: "filters" }, fTask.wrap, fLength.wrap, fDepth.wrap, fOutcome.wrap), count,
    h("div", { class: "table-wrap" }, h("table", { id: "samples-table" },
      h("thead", {}, h("tr", {}, ["Sample", "Task", "Length", "Depth", "Prediction", "References", "Score", "Outcome"]
        .map((t) => h("th", { scope: "col" }, t)))), tbody)),
    more, dialog);
}
