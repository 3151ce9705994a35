// Job status, per-task progress and the cancel button, shared by the job list and a job's page.

import { api, ApiError } from "./api.js";
import { h } from "./dom.js";

export const ACTIVE = new Set(["queued", "running"]);

/** One line per task: a progress bar with done/total. */
export function progressCell(job) {
  const tasks = Object.entries(job.progress || {});
  if (!tasks.length) return [h("span", { class: "muted" }, job.status === "queued" ? "waiting" : "–")];
  return tasks.map(([task, p]) => h("div", { class: "progress" },
    h("span", {}, task),
    h("progress", { max: p.total || 1, value: p.done, "aria-label": `${task} progress` }),
    h("span", { class: "count" }, `${p.done}/${p.total}`)));
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
