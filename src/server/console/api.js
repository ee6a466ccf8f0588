// The console's plumbing: the session (the token and what it may do), calls to the admin
// API with the token in a header, and DOM helpers that only ever set text, never HTML, so
// nothing an API answer holds can run as script.

const STORAGE_KEY = "switchyard.console.token";

// The token lives in this object; in sessionStorage too if the operator asks, so that a
// reload of the tab keeps the session. Never in a cookie: the browser would send a cookie
// by itself, to calls another site makes.
export const session = { token: null, role: null };

export function restoreToken() {
  try {
    return sessionStorage.getItem(STORAGE_KEY);
  } catch (_) {
    return null;
  }
}

export function keepToken(token, remember) {
  session.token = token;
  try {
    if (remember) sessionStorage.setItem(STORAGE_KEY, token);
    else sessionStorage.removeItem(STORAGE_KEY);
  } catch (_) {
    // Storage off: the token stays in memory only.
  }
}

export function forgetToken() {
  session.token = null;
  session.role = null;
  try {
    sessionStorage.removeItem(STORAGE_KEY);
  } catch (_) {}
}

// A failed call, with the API's own message.
export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

// Calls the gateway with the token; answers the parsed JSON (or the text, for CSV).
export async function call(method, path, body, token) {
  const headers = { Authorization: "Bearer " + (token || session.token || "") };
  const init = { method, headers, credentials: "omit", cache: "no-store", redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const type = response.headers.get("content-type") || "";
  const payload = type.includes("json") ? await response.json().catch(() => null) : await response.text();
  if (!response.ok) {
    const message =
      (payload && payload.error && payload.error.message) || response.status + " " + response.statusText;
    throw new ApiError(response.status, message, payload);
  }
  return payload;
}

// What a token may do: "admin" (the admin API answers), "metrics" (only the scorecard), or
// null (neither).
export async function probe(token) {
  try {
    await call("GET", "/admin/budgets", undefined, token);
    return "admin";
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
  }
  try {
    await call("GET", "/v1/scorecard", undefined, token);
    return "metrics";
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
  }
  return null;
}

// An element: el("td", {class: "x", "data-testid": "y"}, "text", child...). Attributes are
// set with setAttribute and children as text nodes or elements: never parsed as HTML.
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "value") node.value = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

// A time in epoch ms as ISO 8601 (UTC, to the second); "" for none.
export function when(ms) {
  if (ms === null || ms === undefined) return "";
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

export function usd(value) {
  if (value === null || value === undefined) return "";
  return "$" + Number(value).toFixed(value >= 1 ? 2 : 6).replace(/0+$/, "").replace(/\.$/, "");
}

export function orDash(value) {
  return value === null || value === undefined || value === "" ? "—" : value;
}

// A banner that says what happened; errors in the API's own words.
export function notice(container, kind, text) {
  const box = el("div", { class: "notice " + kind, role: kind === "error" ? "alert" : "status", "data-testid": "notice-" + kind }, text);
  container.prepend(box);
  return box;
}

// A labelled input for a form.
export function field(label, name, attrs) {
  const input = el("input", Object.assign({ name, id: "f-" + name, "data-testid": "input-" + name }, attrs || {}));
  return el("label", { for: "f-" + name }, el("span", {}, label), input);
}

// A form's named inputs as an object of trimmed strings (checkboxes as booleans).
export function values(form) {
  const out = {};
  for (const input of form.querySelectorAll("input, select, textarea")) {
    if (!input.name) continue;
    out[input.name] = input.type === "checkbox" ? input.checked : input.value.trim();
  }
  return out;
}

// "" -> null, else a number (NaN stays, for the API to refuse in its own words).
export function numberOrNull(text) {
  return text === "" ? null : Number(text);
}

// "a, b" -> ["a", "b"]; "" -> null (all).
export function listOrNull(text) {
  const items = text.split(",").map((s) => s.trim()).filter(Boolean);
  return items.length ? items : null;
}

// A table from column headings and rows (or a tbody the caller redraws).
export function table(testid, headings, rows) {
  return el(
    "table",
    { "data-testid": testid },
    el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col" }, h)))),
    rows instanceof Element && rows.tagName === "TBODY" ? rows : el("tbody", {}, rows),
  );
}
