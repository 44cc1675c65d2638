// ---------------------------------------------------------------------------------------------------------------
// Compose: the message and audience from the form

import { $, fill, api, debounce, el, errorText, number, state } from "./core.js";
import { render } from "./preview.js";

export const field = (id) => $(id).value.trim();
export const list = (text) => text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);

export function buildSend() {
  const local = [];
  const m = {};
  for (const [id, key] of [["f-title", "title"], ["f-subtitle", "subtitle"], ["f-body", "body"], ["f-sound", "sound"], ["f-category", "category"],
    ["f-link", "deep_link"], ["f-collapse", "collapse_id"], ["f-priority", "priority"], ["f-level", "interruption_level"]]) {
    if (field(id)) m[key] = field(id);
  }
  if (field("f-media")) m.media = field("f-media");
  if (field("f-ttl")) {
    const ttl = Number(field("f-ttl"));
    if (Number.isInteger(ttl)) m.ttl = ttl; else local.push({ path: "ttl", message: "TTL is a whole number of seconds" });
  }
  if (field("f-data")) {
    try {
      const data = JSON.parse(field("f-data"));
      if (data === null || typeof data !== "object" || Array.isArray(data)) throw new Error();
      m.data = data;
    } catch { local.push({ path: "data", message: "custom data is a JSON object, like {\"order\": \"42\"}" }); }
  }
  if (field("f-chart-type")) {
    const chart = { type: field("f-chart-type") };
    const raw = field("f-chart-values");
    const rows = raw.split(/\n/).map((line) => line.trim()).filter(Boolean);
    const parse = (line) => list(line).map((v) => (v === "null" || v === "" ? null : Number(v)));
    const series = rows.map(parse);
    if (!rows.length) local.push({ path: "chart.values", message: "give the chart some numbers" });
    else if (series.some((s) => s.some((v) => v !== null && !Number.isFinite(v)))) local.push({ path: "chart.values", message: "values are numbers, separated by commas (one line per series)" });
    else if (series.length === 1) chart.values = series[0];
    else chart.series = series.map((values) => ({ values }));
    if (field("f-chart-labels")) chart.labels = field("f-chart-labels").split(",").map((s) => s.trim()).filter(Boolean);
    for (const [id, key] of [["f-chart-title", "title"], ["f-chart-value", "value"], ["f-chart-change", "change"]]) if (field(id)) chart[key] = field(id);
    if (field("f-chart-theme") === "dark") chart.theme = "dark";
    m.chart = chart;
  }
  if (field("f-live-event")) {
    const live = { event: field("f-live-event") };
    const json = (id, path, what) => {
      if (!field(id)) return undefined;
      try {
        const v = JSON.parse(field(id));
        if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error();
        return v;
      } catch { local.push({ path, message: `${what} is a JSON object, like {"eta_minutes": 12}` }); return undefined; }
    };
    const minutes = (id, path) => {
      if (!field(id)) return undefined;
      const n = Number(field(id));
      if (!Number.isFinite(n) || n < 0) { local.push({ path, message: "a number of minutes" }); return undefined; }
      return Math.round(Date.now() / 1000 + n * 60);
    };
    const state = json("f-live-state", "live_activity.content_state", "the content state");
    if (state) live.content_state = state;
    if (field("f-live-type")) live.attributes_type = field("f-live-type");
    const attributes = json("f-live-attributes", "live_activity.attributes", "the attributes");
    if (attributes) live.attributes = attributes;
    const stale = minutes("f-live-stale", "live_activity.stale_date");
    if (stale) live.stale_date = stale;
    const dismiss = minutes("f-live-dismiss", "live_activity.dismissal_date");
    if (dismiss) live.dismissal_date = dismiss;
    m.live_activity = live;
  }
  const kind = field("f-audience");
  const value = field("f-audience-value");
  let audience;
  if (kind === "all") audience = { all: true };
  else if (kind === "live_start") audience = { live_start: value ? { user: value } : {} };
  else if (["tokens", "apns_tokens", "fcm_tokens"].includes(kind)) audience = { [kind]: list(value) };
  else audience = { [kind]: value };
  const body = { ...m, audience };
  if (field("f-send-at")) body.send_at = Math.round(new Date(field("f-send-at")).getTime() / 1000);
  if (field("f-spread")) body.spread_seconds = Number(field("f-spread"));
  return { body, local, message: m };
}

// Which form field an issue's path names (the server's paths, and the form's own).
export function fieldFor(path) {
  const p = path.replace(/\[\d+\]/g, "");
  for (const input of document.querySelectorAll("#compose [data-path]")) {
    if (input.dataset.path.split(" ").some((d) => p === d || p.startsWith(d + "."))) return input;
  }
  return null;
}

// Whether the user has changed the form: until then an empty form's errors (no title, no audience) are not shown,
// only warnings; the first input, or a press of Send, shows them all.
let edited = false;
export function markEdited() { edited = true; }

export function markIssues(issues) {
  if (!edited) issues = issues.filter((i) => i.severity === "warning");
  for (const old of document.querySelectorAll("#compose .field-issue")) old.remove();
  for (const input of document.querySelectorAll("#compose [aria-invalid]")) { input.removeAttribute("aria-invalid"); input.removeAttribute("aria-describedby"); }
  const rest = [];
  issues.forEach((issue, i) => {
    const input = issue.severity !== "warning" && fieldFor(issue.path || "");
    if (input) {
      const id = `issue-${i}`;
      input.setAttribute("aria-invalid", "true");
      input.setAttribute("aria-describedby", id);
      input.insertAdjacentElement("afterend", el("p", { class: "field-issue", id, text: issue.message }));
    }
    rest.push(issue);
  });
  const ul = $("issues");
  fill(ul, ...rest.map((i) => el("li", { class: i.severity === "warning" ? "sev-warning" : "sev-error" },
    `${i.severity === "warning" ? "Warning" : "Error"}: ${i.path ? i.path + " — " : ""}${i.message}${i.rule ? " [" + i.rule + "]" : ""}`)));
  if (!rest.length) fill(ul, el("li", { class: "ok", text: "No problems found: ready to send." }));
}

export let lastDryRun = null;
export let checkGeneration = 0;

// Every panel drawn from a dry run carries that run's id (data-dry-run), and says aria-busy while a newer one is
// on its way: the panels never mix two runs, and a reader can tell a settled view from one about to change.
const dryRunPanels = ["panel-ios", "panel-android", "panel-web", "panel-sent", "gauges", "reach"];
export function markPending() {
  for (const id of dryRunPanels) $(id)?.setAttribute("aria-busy", "true");
}
export function markShown(dry) {
  for (const id of dryRunPanels) {
    const panel = $(id);
    if (!panel) continue;
    panel.removeAttribute("aria-busy");
    panel.dataset.dryRun = (dry && dry.message && dry.message.id) || "";
  }
}

export async function check() {
  if (!state.app) return;
  const generation = ++checkGeneration;
  markPending();
  const { body, local, message } = buildSend();
  if (local.length) { markIssues(local.map((i) => ({ ...i, severity: "error" }))); render(message, null); markShown(null); return; }
  const r = await api("POST", `/v1/apps/${encodeURIComponent(state.appID)}/notifications`, { ...body, dry_run: true });
  if (generation !== checkGeneration) return;  // a newer check is under way
  if (r.status === 200) {
    lastDryRun = r.json;
    markIssues(r.json.warnings || []);
    const d = r.json.deliveries || {};
    if (!r.json.deliveries) $("reach").textContent = `Reach not shown: ${r.json.deliveries_withheld || "not counted"}.`;
    else {
      const total = (d.apns || 0) + (d.fcm || 0) + (d.webpush || 0);
      $("reach").textContent = `Reaches ${number(total)} device${total === 1 ? "" : "s"}: ${number(d.apns || 0)} through APNs, ${number(d.fcm || 0)} through FCM, ${number(d.webpush || 0)} browser${d.webpush === 1 ? "" : "s"} through Web Push.`;
    }
    render(message, r.json);
    markShown(r.json);
  } else {
    lastDryRun = null;
    markIssues(r.json && r.json.error ? (r.json.error.issues || [{ path: "", message: errorText(r) }]).map((i) => ({ severity: "error", ...i })) : [{ path: "", message: errorText(r), severity: "error" }]);
    $("reach").textContent = "";
    render(message, null);
    markShown(null);
  }
}
const checkLater = debounce(check, 250);
// A check after the typing pauses; the panels say at once that what they show is about to change.
export function checkSoon() {
  if (state.app) markPending();
  checkLater();
}

// ---------------------------------------------------------------------------------------------------------------
// Media: the preflight verdict, uploads

export const preflight = debounce(async () => {
  const url = field("f-media");
  const ul = $("preflight");
  if (!url) { fill(ul); return; }
  fill(ul, el("li", { text: "Checking the media…" }));
  const r = await api("POST", "/v1/media/check", { url });
  if (r.status !== 200) { fill(ul, el("li", { class: "sev-error", text: errorText(r) })); return; }
  const result = (r.json.results || [])[0] || {};
  const items = [];
  // The server reads the URL (one set of rules, docs/payload-format.md section 7) and says what it fetched.
  if (result.fetched) items.push(el("li", { class: "fetched", text: `Fetched and sent as ${result.fetched}` }));
  const size = result.bytes ? ` of ${number(Math.max(1, Math.round(result.bytes / 1024)))} KB` : "";
  const type = result.type ? result.type.toUpperCase() : "media";
  if (!result.ok) items.push(el("li", { class: "sev-error refused", text: `Refused: ${result.message || result.rule} [${result.rule}]` }));
  if (result.ios === "ok") items.push(el("li", { class: "ok", text: `iOS attaches it as a ${type}${size}.` }));
  else if (result.ios) items.push(el("li", { class: "sev-error", text: `iOS does not attach it: ${result.ios.message} [${result.ios.rule}]` }));
  if (result.android === "ok") items.push(el("li", { class: "ok", text: "Android shows it." }));
  else if (result.android) items.push(el("li", { class: "sev-warning", text: `Android does not show it: ${result.android.message} [${result.android.rule}]` }));
  if (result.rehost_reason) items.push(el("li", { text: `The server will host it itself (${result.rehost_reason}).` }));
  fill(ul, ...items);
}, 400);

export async function upload(file) {
  const ul = $("preflight");
  fill(ul, el("li", { text: `Uploading ${file.name}…` }));
  const r = await api("POST", "/v1/media", file, { raw: true, headers: { "Content-Type": file.type || "application/octet-stream" } });
  if (r.status !== 201 && r.status !== 200) { fill(ul, el("li", { class: "sev-error", text: `${file.name}: ${errorText(r)}` })); return; }
  $("f-media").value = r.json.url;
  preflight();
  checkSoon();
}
