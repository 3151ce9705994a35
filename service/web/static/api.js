// The JSON API as the pages use it: bearer token from sessionStorage (asked for once, in
// a dialog, when the service has one), refusals as ApiError with the API's detail.

const TOKEN_KEY = "lctx-token";

export class ApiError extends Error {
  constructor(status, body) {
    super(detailText(body?.detail) || `HTTP ${status}`);
    this.status = status;
    this.detail = body?.detail;
    this.code = body?.code;
  }
}

/** The API's `detail`: a message, or pydantic's list of {loc, msg}. */
export function detailText(detail) {
  if (detail == null) return "";
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((e) => `${(e.loc || []).join(".")}: ${e.msg}`).join("; ");
  return JSON.stringify(detail);
}

let schema;
/** The OpenAPI schema: the task option models and whether a token is checked. */
export function openapi() {
  schema ??= fetch("/openapi.json").then((r) => r.json());
  return schema;
}

/** Which requests need a token, as the server's truthful OpenAPI says. */
export async function auth() {
  const s = await openapi();
  const writes = Boolean(s.components?.securitySchemes);
  const reads = writes && Object.values(s.paths).some((ops) => ops.get?.security);
  return { writes, reads };
}

export const token = () => sessionStorage.getItem(TOKEN_KEY);

/** Ask for the token in the page's dialog; resolves to it, or null when skipped. */
let asking = null;
let readsSkipped = false;

export function askToken(why) {
  asking ??= ask(why).finally(() => { asking = null; });
  return asking;
}

function ask(why) {
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  document.getElementById("token-why").textContent = why ||
    "This service needs a token (the server's LCTX_API_TOKEN) for this action. It is kept for this browser tab only.";
  input.value = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const value = dialog.returnValue === "ok" ? input.value.trim() : "";
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      resolve(value || null);
    }, { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    input.focus();
  });
}

/** A request to the API; `write` marks one that needs the token when the service has one. */
export async function api(path, { method = "GET", body, write = method !== "GET", raw = false } = {}) {
  const needs = await auth();
  if (write ? needs.writes && !token() : needs.reads && !token() && !readsSkipped) {
    if (!(await askToken()) && !write) readsSkipped = true; // reads: asked once per page
  }
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!response.ok) {
    let parsed = null;
    try { parsed = await response.json(); } catch { /* not JSON */ }
    if (response.status === 401) sessionStorage.removeItem(TOKEN_KEY); // asked again next time
    throw new ApiError(response.status, parsed);
  }
  if (raw) return response;
  return response.status === 204 ? null : response.json();
}

/** Newline-delimited JSON records (samples). */
export async function records(path) {
  const text = await (await api(path, { raw: true })).text();
  return text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
}

/** The task names in the order the API lists them (from the job request schema). */
export async function taskNames() {
  const s = await openapi();
  return taskModels(s).map(([name]) => name);
}

/** [name, schema] of each task's request model. */
export function taskModels(s) {
  const refs = s.components.schemas.Suite.properties.tasks.items.oneOf;
  return refs.map((r) => {
    const model = s.components.schemas[r.$ref.split("/").pop()];
    return [model.properties.name.const, model];
  });
}
