// The submit form, built from the API's request schema (each task's option model as
// OpenAPI shows it): a field per option, blank meaning the evaluator's default. The API
// validates; its 4xx messages are shown next to the field they name.

import { api, ApiError, detailText, openapi, taskModels } from "./api.js";
import { h } from "./dom.js";

function deref(s, schema) {
  return schema?.$ref ? s.components.schemas[schema.$ref.split("/").pop()] : schema;
}

/** The schema of a field without its `null` alternative, and whether it had one. */
function plain(s, schema) {
  const alts = schema.anyOf || schema.oneOf;
  if (alts) {
    const real = alts.filter((a) => a.type !== "null");
    return { ...deref(s, real[0]), description: schema.description, default: schema.default, nullable: true };
  }
  return deref(s, schema);
}

function describe(field) {
  const parts = [];
  if (field.description) parts.push(field.description);
  if (field.default !== undefined && field.default !== null) {
    const d = Array.isArray(field.default) ? field.default.join(",") : String(field.default);
    parts.push(`default: ${d.length > 60 ? d.slice(0, 57) + "…" : d}`);
  }
  if (field.type === "array") parts.push("comma-separated");
  return parts.join("; ");
}

/** One labelled control with its hint and error slot; `read()` gives the value to send. */
function control(id, name, field, s) {
  const hintId = `${id}-hint`, errId = `${id}-error`;
  const describedBy = `${hintId} ${errId}`;
  let input, read;
  const enumValues = field.enum || (field.type === "array" ? deref(s, field.items)?.enum : null);
  if (field.type === "boolean") {
    input = h("select", { id, name, "aria-describedby": describedBy },
      h("option", { value: "" }, "(default)"), h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
    read = () => (input.value === "" ? undefined : input.value === "true");
  } else if (enumValues && field.type !== "array") {
    input = h("select", { id, name, "aria-describedby": describedBy },
      h("option", { value: "" }, "(default)"), enumValues.map((v) => h("option", { value: v }, v)));
    read = () => input.value || undefined;
  } else {
    const numeric = field.type === "integer" || field.type === "number";
    input = h("input", { id, name, type: "text", inputmode: numeric ? "numeric" : null, autocomplete: "off",
      placeholder: field.default != null ? String(Array.isArray(field.default) ? field.default.join(",") : field.default) : "",
      "aria-describedby": describedBy });
    read = () => {
      const v = input.value.trim();
      if (v === "") return undefined;
      if (numeric && /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(v)) return Number(v);
      return v; // lists go as "256,512": the API splits them; anything else it refuses with a message
    };
  }
  const help = describe(field);
  if (help) input.title = help; // the help on hover while the hints are folded away
  const wrap = h("div", {}, h("label", { for: id }, name), input,
    h("p", { class: "hint field-hint", id: hintId }, help),
    h("p", { class: "field-error", id: errId, "aria-live": "polite" }));
  return { wrap, input, read, name };
}

/** The form element; `onSubmitted(job)` runs after a 202. */
// The submission's plan (service/cost.py): samples, tokens, the estimated time and its basis, warnings.
function planText(plan) {
  if (!plan) return [];
  const n = (v) => (v === null || v === undefined ? "?" : v.toLocaleString("en"));
  const time = plan.seconds === null ? "time not known" : `about ${duration(plan.seconds)}`;
  return [h("span", { class: "plan" }, `: ${n(plan.samples)} samples, ${n(plan.prompt_tokens)} tokens to prefill, `
            + `${n(plan.generated_tokens)} to generate; ${time} (${plan.basis})`),
          ...plan.warnings.map((w) => h("div", { class: "warning" }, `warning: ${w}`))];
}

function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  return `${(s / 86400).toFixed(1)} days`;
}

export async function submitForm(onSubmitted) {
  const s = await openapi();
  const job = s.components.schemas.JobCreate;
  const [checkpoints] = await Promise.all([api("/v1/checkpoints").catch(() => [])]);
  const fields = new Map(); // element id -> control
  const general = h("div", { id: "form-message", "aria-live": "polite" });

  // The job's own fields: every field of the request (JobCreate) but its tasks, checkpoint first.
  const names = ["checkpoint", ...Object.keys(job.properties).filter((k) => k !== "checkpoint" && k !== "tasks")];
  const jobControls = names.map((k) => control(`f-${k}`, k, k === "checkpoint"
    ? { description: job.properties.checkpoint.description } : plain(s, job.properties[k]), s));
  const [checkpoint] = jobControls;
  checkpoint.input.setAttribute("list", "checkpoint-names");
  // A checkpoint, or (the endpoint field) a registered served model: the server refuses neither and both.
  if (checkpoints.length) checkpoint.input.value = checkpoints[0].name;
  const rope = jobControls.find((c) => c.name === "rope");
  if (rope) rope.input.placeholder = "the checkpoint's own (e.g. yarn:4, ntk:8, none)";
  for (const c of jobControls) fields.set(c.input.id, c);

  const picks = h("div", { class: "task-pick" });
  const optionSets = h("div", {});
  const tasks = new Map(); // name -> {checkbox, fieldset, controls}
  for (const [name, model] of taskModels(s)) {
    const box = h("input", { type: "checkbox", id: `task-${name}`, name: "tasks", value: name });
    const controls = Object.entries(model.properties).filter(([k]) => k !== "name")
      .map(([k, field]) => control(`opt-${name}-${k}`, k, plain(s, field), s));
    for (const c of controls) fields.set(c.input.id, c);
    const fieldset = h("fieldset", { id: `fs-${name}`, hidden: true },
      h("legend", {}, `${name} options`), h("p", { class: "hint" }, model.description || ""),
      h("div", { class: "form-grid" }, controls.map((c) => c.wrap)),
      h("p", { class: "field-error", id: `fs-${name}-error`, "aria-live": "polite" }));
    box.addEventListener("change", () => { fieldset.hidden = !box.checked; });
    picks.append(h("label", {}, box, ` ${name}`));
    optionSets.append(fieldset);
    tasks.set(name, { box, fieldset, controls });
  }
  tasks.get("passkey").box.checked = true;
  tasks.get("passkey").fieldset.hidden = false;

  // Lengths and trials fitted to the chosen checkpoint's context (the evaluators' defaults, 500-4000
  // tokens x 100 trials, say nothing about a 256-token model and take minutes on a CPU): half, one and
  // two times the context (at least 256 tokens), 20 trials. Only fields the user has not typed in change.
  function fitToCheckpoint() {
    const ck = checkpoints.find((c) => c.name === checkpoint.input.value.trim());
    const ctx = ck?.context_length;
    for (const { controls } of tasks.values()) {
      for (const c of controls) {
        if (c.input.dataset.typed) continue;
        if (c.name === "lengths") {
          c.input.value = ctx ? [...new Set([Math.max(256, Math.floor(ctx / 2)), ctx, 2 * ctx])].join(",") : "";
        } else if (c.name === "trials" && c.input.placeholder && Number(c.input.placeholder) > 20) {
          c.input.value = ctx ? "20" : "";
        }
      }
    }
  }
  for (const c of fields.values()) c.input.addEventListener("input", () => { c.input.dataset.typed = "1"; });
  checkpoint.input.addEventListener("input", fitToCheckpoint);
  checkpoint.input.addEventListener("change", fitToCheckpoint);
  fitToCheckpoint();

  const submit = h("button", { type: "submit", class: "primary" }, "Submit job");
  // Each option's help (a paragraph for some) folded away by default: with it the form is ~900 px
  // tall and pushes the job list below the fold. Its inputs keep it as title and description.
  const helpToggle = h("input", { type: "checkbox", id: "show-help" });
  const form = h("form", { id: "submit-form", novalidate: true },
    h("p", { class: "help-toggle" }, h("label", {}, helpToggle, " Show each option's help")),
    h("datalist", { id: "checkpoint-names" }, checkpoints.map((c) => h("option", { value: c.name }, `${c.variant}`))),
    h("div", { class: "form-grid" }, jobControls.map((c) => c.wrap)),
    h("fieldset", {}, h("legend", {}, "Tasks"), picks, h("p", { class: "field-error", id: "fs-tasks-error" })),
    optionSets,
    h("div", { class: "buttons" }, submit, general));

  helpToggle.addEventListener("change", () => form.classList.toggle("show-help", helpToggle.checked));

  function clearErrors() {
    for (const el of form.querySelectorAll(".field-error")) el.textContent = "";
    for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    general.replaceChildren();
  }

  function show(targetId, message) {
    const input = document.getElementById(targetId);
    const slot = document.getElementById(`${targetId}-error`);
    if (!slot) return false;
    slot.textContent = slot.textContent ? `${slot.textContent}; ${message}` : message;
    if (input && input.tagName !== "FIELDSET") input.setAttribute("aria-invalid", "true");
    return true;
  }

  /** The element a refusal names: pydantic's loc, or the field a message starts with. */
  function target(sent, loc, message) {
    if (loc) {
      const path = loc[0] === "body" ? loc.slice(1) : loc;
      if (path[0] === "tasks" && typeof path[1] === "number") {
        const name = sent[path[1]];
        const option = path[3];
        return option != null && fields.has(`opt-${name}-${option}`) ? `opt-${name}-${option}` : `fs-${name}`;
      }
      if (path[0] === "tasks") return "fs-tasks";
      if (fields.has(`f-${path[0]}`)) return `f-${path[0]}`;
      return null;
    }
    const task = /^tasks\[(\d+)\] \(([\w-]+)\)(?:\.(\w+))?/.exec(message);
    if (task) return task[3] && fields.has(`opt-${task[2]}-${task[3]}`) ? `opt-${task[2]}-${task[3]}` : `fs-${task[2]}`;
    const top = new RegExp(`^(${names.join("|")})\\b`).exec(message);
    return top ? `f-${top[1]}` : null;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    const sent = [...tasks].filter(([, t]) => t.box.checked).map(([name]) => name);
    const body = { tasks: sent.map((name) => {
      const spec = { name };
      for (const c of tasks.get(name).controls) {
        const v = c.read();
        if (v !== undefined) spec[c.name] = v;
      }
      return spec;
    }) };
    if (checkpoint.input.value.trim()) body.checkpoint = checkpoint.input.value.trim();
    for (const c of jobControls.slice(1)) {
      const v = c.read();
      if (v !== undefined) body[c.name] = v;
    }
    submit.disabled = true;
    try {
      const created = await api("/v1/jobs", { method: "POST", body });
      general.replaceChildren(h("span", { class: "ok" }, "Queued job "), h("a", { href: `/jobs/${created.id}` }, created.id),
        ...planText(created.plan));
      onSubmitted(created);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      const problems = Array.isArray(e.detail) ? e.detail : [{ loc: null, msg: detailText(e.detail) || e.message }];
      let unplaced = [];
      for (const p of problems) {
        const id = target(sent, p.loc, p.msg);
        if (!id || !show(id, p.msg)) unplaced.push(p.loc ? `${p.loc.join(".")}: ${p.msg}` : p.msg);
      }
      const first = form.querySelector("[aria-invalid='true']");
      general.replaceChildren(h("span", { class: "error", role: "alert" },
        `Refused (HTTP ${e.status}): ${unplaced.length ? unplaced.join("; ") : "see the marked fields"}`));
      first?.focus();
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
