// Small helpers to build elements and format values; no framework.

/** h("a", {href: "/", class: "x", onclick: fn}, "text", child, [more]) */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value == null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace the page's content (after its title). */
export function render(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren();
  append(main, nodes);
}

/** A number as a table shows it: 3 decimals below 1000, integers as integers. */
export function fmt(value, digits = 3) {
  if (value == null || Number.isNaN(value)) return "–";
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString("en-US");
  return value.toFixed(digits);
}

export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return d.toLocaleString("en-GB", { year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit" });
}

export function duration(seconds) {
  if (seconds == null) return "–";
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

export const collator = new Intl.Collator("en", { numeric: true });

/** An explicit "no data" mark for an empty cell, chart or list. */
export function noData(what = "no data") {
  return h("span", { class: "nodata" }, what);
}

export function statusBadge(status) {
  return h("span", { class: `status status-${status}` }, status);
}

/** An error shown where it happened, announced to screen readers. */
export function errorBox(message) {
  return h("p", { class: "error", role: "alert" }, message);
}

export function section(title, ...children) {
  const id = title.toLowerCase().replace(/[^a-z0-9]+/g, "-");
  return h("section", { "aria-labelledby": id }, h("h2", { id }, title), ...children);
}
