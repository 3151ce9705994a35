// Entry point: marks the current section in the navigation, offers the token button when
// the service checks one, and runs the page's module.

import { askToken, auth, token } from "./api.js";
import { errorBox, render, h } from "./dom.js";

const PAGES = {
  jobs: () => import("./jobs.js"),
  job: () => import("./job.js"),
  leaderboard: () => import("./leaderboard.js"),
  compare: () => import("./compare.js"),
  registry: () => import("./registry.js"),
};

async function start() {
  const page = document.body.dataset.page;
  for (const a of document.querySelectorAll("nav a[data-page]")) {
    if (a.dataset.page === page || (page === "job" && a.dataset.page === "jobs")) a.setAttribute("aria-current", "page");
  }
  const needs = await auth();
  if (needs.writes) {
    const button = document.getElementById("token-button");
    const label = () => { button.textContent = token() ? "Change token" : "Set token"; };
    label();
    button.hidden = false;
    button.addEventListener("click", async () => { await askToken("Token for this service (the server's LCTX_API_TOKEN)."); label(); });
  }
  const module = await PAGES[page]();
  await module.show();
}

start().catch((e) => {
  render(h("h1", {}, document.title), errorBox(`This page could not load: ${e.message}`));
  throw e;
});
