// Checkpoints and schedules: the registry (family, variant, RoPE, chat template, source,
// fingerprint, latest results), a form that pulls a checkpoint from the hub or a GGUF file,
// the served models (endpoints) with a form to register one, and each schedule with its next
// run and the jobs it submitted.

import { api, ApiError, detailText } from "./api.js";
import { errorBox, h, noData, render, section, statusBadge, when } from "./dom.js";

function params(n) {
  return n >= 1e9 ? `${(n / 1e9).toFixed(1)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : `${(n / 1e3).toFixed(0)} k`;
}

async function latest(checkpoint) {
  const list = await api(`/v1/jobs?checkpoint=${encodeURIComponent(checkpoint.name)}&status=succeeded&limit=1`);
  const job = list.items[0];
  if (!job) return noData("no results yet");
  try {
    const body = await api(`/v1/jobs/${job.id}/results`);
    return h("div", { class: "latest" }, h("a", { href: `/jobs/${job.id}` }, `job ${job.id}`), ` (${when(job.finished_at)})`,
      h("div", { class: "setting" }, `rope=${job.rope_label} backend=${job.backend}`),
      h("ul", {}, Object.entries(body.results || {}).map(([k, e]) => h("li", {}, e.result?.summary || k))));
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return h("a", { href: `/jobs/${job.id}` }, `job ${job.id}`);
  }
}

function sourceText(source) {
  if (!source) return noData("registered");
  if (source.kind === "hub") {
    return h("span", { class: "wrap", title: `commit ${source.commit}` }, `hub ${source.repo_id}@${source.revision} (${source.commit.slice(0, 10)})`);
  }
  return h("span", { class: "wrap", title: `sha256 ${source.sha256}` }, `GGUF ${source.file} (${source.sha256.slice(0, 10)})`);
}

/** Pull from the hub (id and revision) or a GGUF file on the server; the API's refusal shown as is. */
function pullForm() {
  const field = (id, label, attrs = {}) => {
    const input = h("input", { id, name: id, ...attrs });
    return [input, h("div", {}, h("label", { for: id }, label), input)];
  };
  const [name, nameWrap] = field("pull-name", "Name", { required: true, placeholder: "smollm2-135m" });
  const [source, sourceWrap] = field("pull-source", "Hub repository (owner/name) or .gguf file on the server",
    { required: true, placeholder: "HuggingFaceTB/SmolLM2-135M-Instruct" });
  const [revision, revisionWrap] = field("pull-revision", "Revision (hub)", { value: "main" });
  const status = h("div", { id: "pull-status", "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "primary" }, "Pull and register");
  const form = h("form", { id: "pull-form" },
    h("p", { class: "hint" }, "Safetensors, config, tokenizer and chat template only (never code); a GGUF file is "
      + "dequantised to float32. The folder is written to the first checkpoint root."),
    h("div", { class: "form-grid" }, nameWrap, sourceWrap, revisionWrap), h("div", { class: "buttons" }, button, status));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const raw = source.value.trim();
    const body = raw.endsWith(".gguf") ? { name: name.value.trim(), gguf: raw }
      : { name: name.value.trim(), hub: raw, revision: revision.value.trim() || "main" };
    button.disabled = true;
    status.replaceChildren(h("span", {}, `Pulling ${raw} … (a download or conversion can take minutes)`));
    try {
      const ck = await api("/v1/checkpoints/pull", { method: "POST", body });
      status.replaceChildren(h("span", { class: "ok" }, `Registered ${ck.name} (${ck.path})`));
      await show();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      status.replaceChildren(errorBox(e.message));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

async function checkpointsTable(checkpoints) {
  if (!checkpoints.length) return h("p", {}, noData("No checkpoints registered."));
  const last = await Promise.all(checkpoints.map(latest));
  return h("div", { class: "table-wrap" }, h("table", { id: "checkpoints-table" },
    h("thead", {}, h("tr", {}, ["Name", "Family", "Variant", "Parameters", "RoPE", "Context", "Chat template",
      "Source", "Fingerprint", "Path", "Registered", "Latest results"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, checkpoints.map((c, i) => h("tr", {},
      h("th", { scope: "row", class: "wrap" }, c.name), h("td", {}, c.family ?? noData()), h("td", {}, c.variant),
      h("td", { class: "num" }, params(c.parameters)), h("td", {}, c.rope_label ?? noData()),
      h("td", { class: "num" }, c.context_length ?? noData()),
      h("td", {}, c.chat_template ? h("code", { class: "wrap" }, c.chat_template) : noData("none")),
      h("td", {}, sourceText(c.source)),
      h("td", {}, h("code", { class: "fp", title: c.fingerprint }, c.fingerprint.slice(0, 12))),
      h("td", { class: "wrap" }, c.path), h("td", {}, when(c.created_at)), h("td", { class: "latest-results" }, last[i]))))));
}

function endpointsTable(endpoints) {
  if (!endpoints.length) return h("p", {}, noData("No endpoints registered."));
  const yes = (v) => (v ? "yes" : "no");
  return h("div", { class: "table-wrap" }, h("table", { id: "endpoints-table" },
    h("thead", {}, h("tr", {}, ["Name", "URL", "Served model", "Style", "Context", "Prompt logprobs", "Server version",
      "Concurrency", "API key variable", "Registered"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, endpoints.map((e) => h("tr", {},
      h("th", { scope: "row" }, e.name), h("td", {}, h("code", {}, e.base_url)), h("td", {}, e.served_model),
      h("td", {}, e.api_style), h("td", { class: "num" }, e.context_length),
      h("td", {}, yes(e.capabilities.prompt_logprobs)), h("td", {}, e.capabilities.server_version ?? noData()),
      h("td", { class: "num" }, e.concurrency), h("td", {}, e.api_key_env ? h("code", {}, e.api_key_env) : noData("none")),
      h("td", {}, when(e.created_at)))))));
}

function endpointForm() {
  const field = (name, label, attrs = {}) => h("label", {}, label, h("input", { name, ...attrs }));
  const status = h("div", { id: "endpoint-form-status" });
  const form = h("form", { id: "endpoint-form", class: "stack" },
    field("name", "Name", { required: true, pattern: "[A-Za-z0-9_.\\-]{1,128}" }),
    field("base_url", "API root", { required: true, placeholder: "http://127.0.0.1:8001/v1" }),
    field("served_model", "Served model (as /v1/models lists it, or as the server answers to it)", { required: true }),
    field("tokenizer", "Tokenizer folder (inside the checkpoint roots; empty: the server's /tokenize)"),
    field("context_length", "Context (tokens; default from the folder's config.json, else the server's)",
      { type: "number", min: 16 }),
    h("label", {}, "API style", h("select", { name: "api_style" },
      h("option", { value: "completions" }, "completions"), h("option", { value: "chat" }, "chat"))),
    field("api_key_env", "API key variable name (the key stays on the workers)", { placeholder: "LCTX_ENDPOINT_KEY_VLLM" }),
    h("button", { type: "submit" }, "Register endpoint"), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = Object.fromEntries([...new FormData(form)].filter(([, v]) => v !== ""));
    if (body.context_length) body.context_length = Number(body.context_length);
    status.replaceChildren(h("p", {}, "Asking the server what it serves…"));
    try {
      const e = await api("/v1/endpoints", { method: "POST", body });
      status.replaceChildren(h("p", {}, `Registered ${e.name}: ${e.served_model} at ${e.base_url}.`));
      await show();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      status.replaceChildren(errorBox(detailText(e.detail)));
    }
  });
  return form;
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
  const [checkpoints, endpoints, schedules] = await Promise.all([api("/v1/checkpoints"), api("/v1/endpoints"),
    api("/v1/schedules")]);
  render(h("h1", {}, "Checkpoints and schedules"),
    section("Checkpoints", await checkpointsTable(checkpoints)),
    section("Pull a checkpoint", pullForm()),
    section("Endpoints (served models)", endpointsTable(endpoints),
      h("details", {}, h("summary", {}, "Register an endpoint"), endpointForm())),
    section("Schedules", await schedulesTable(schedules)));
}
