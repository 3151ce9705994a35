// Job status, per-task progress and the cancel button, shared by the job list and a job's page.

import { api, ApiError } from "./api.js";
import { duration, fmt, h } from "./dom.js";

export const ACTIVE = new Set(["queued", "running"]);

/** Tokens prefilled (of those planned), the speed and the ETA of a running task. */
function detail(p, running) {
  const parts = [];
  if (p.tokens) parts.push(`${fmt(p.tokens)}${p.planned_tokens ? ` / ${fmt(p.planned_tokens)}` : ""} tokens prefilled`);
  if (p.tokens_per_s) parts.push(`${fmt(Math.round(p.tokens_per_s))} tok/s`);
  if (running && p.done < p.total) parts.push(p.eta_s == null ? "ETA: measuring" : `ETA ${duration(p.eta_s)}`);
  return parts.length ? h("span", { class: "muted progress-detail" }, parts.join(" · ")) : null;
}

/** One line per task: a progress bar with done/total, tokens prefilled, speed and ETA. A bar
 * moves with the tokens prefilled while no sample has finished yet (a long prefill). */
export function progressCell(job) {
  const tasks = Object.entries(job.progress || {});
  if (!tasks.length) return [h("span", { class: "muted" }, job.status === "queued" ? "waiting" : "–")];
  const running = job.status === "running";
  return tasks.map(([task, p]) => {
    const samples = p.done / (p.total || 1);
    const share = p.planned_tokens && p.done < p.total ? Math.max(samples, Math.min(1, p.tokens / p.planned_tokens)) : samples;
    return h("div", { class: "progress" },
      h("span", {}, task),
      h("progress", { max: 1000, value: Math.round(1000 * share), "aria-label": `${task} progress` }),
      h("span", { class: "count" }, `${p.done}/${p.total}`), detail(p, running));
  });
}

/** A cancel button for a queued or running job; `done(job | error)` runs after the answer. */
export function cancelButton(job, message, done) {
  const button = h("button", { type: "button", class: "danger", "aria-label": `Cancel job ${job.id}` }, "Cancel");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const cancelled = await api(`/v1/jobs/${job.id}/cancel`, { method: "POST" });
      message.replaceChildren(h("span", { class: "ok" }, `Job ${job.id} cancelled.`));
      done?.(cancelled);
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      message.replaceChildren(h("span", { class: "error", role: "alert" }, `Cancel refused (HTTP ${e.status}): ${e.message}`));
      button.disabled = false;
    }
  });
  return button;
}
