// The API and the small helpers every screen of the console uses.


export const $ = (id) => document.getElementById(id);
// `updating`: the notification (its first version's id) the next send updates in place, or null.
export const state = { key: sessionStorage.getItem("richpush.key"), appID: sessionStorage.getItem("richpush.app"), app: null, admin: false, sandbox: false, updating: null };

// ---------------------------------------------------------------------------------------------------------------
// The API

export async function api(method, path, body, { raw = false, headers = {} } = {}) {
  const init = { method, headers: { Authorization: `Bearer ${state.key}`, ...headers } };
  if (body !== undefined) {
    init.body = raw ? body : JSON.stringify(body);
    if (!raw) init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  let json = null;
  try { json = await response.json(); } catch { json = null; }
  return { status: response.status, json, retryAfter: response.headers.get("Retry-After") };
}

export function errorText(r) {
  const e = r.json && r.json.error;
  if (r.status === 503) return `the server's database is away; try again in ${r.retryAfter || "a few"} s`;
  if (!e) return `the server answered ${r.status}`;
  const issues = (e.issues || []).map((i) => `${i.path ? i.path + ": " : ""}${i.message}`).join("; ");
  return e.message + (issues ? ` (${issues})` : "");
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

export const debounce = (fn, ms) => { let t; return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); }; };
export const number = (n) => new Intl.NumberFormat().format(n);

/** Replaces a node's children, leaving out those not there (null, undefined, false): `cond ? el(…) : null`. */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}
