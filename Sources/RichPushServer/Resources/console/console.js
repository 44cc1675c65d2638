// The RichPush console: one page, plain modules, no build step and nothing fetched from elsewhere. Every figure it
// shows comes from the server's own checks (a dry run of the send, the media preflight, the device simulator).

const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem("richpush.key"), appID: sessionStorage.getItem("richpush.app"), app: null, admin: false, sandbox: false };

// ---------------------------------------------------------------------------------------------------------------
// The API

async function api(method, path, body, { raw = false, headers = {} } = {}) {
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

function errorText(r) {
  const e = r.json && r.json.error;
  if (r.status === 503) return `the server's database is away; try again in ${r.retryAfter || "a few"} s`;
  if (!e) return `the server answered ${r.status}`;
  const issues = (e.issues || []).map((i) => `${i.path ? i.path + ": " : ""}${i.message}`).join("; ");
  return e.message + (issues ? ` (${issues})` : "");
}

function el(tag, attrs = {}, ...children) {
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

const debounce = (fn, ms) => { let t; return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); }; };
const number = (n) => new Intl.NumberFormat().format(n);

// ---------------------------------------------------------------------------------------------------------------
// Signing in and moving between views

async function signIn(key, appID) {
  state.key = key;
  const me = await api("GET", "/v1/me");
  if (me.status !== 200) { state.key = null; throw new Error(me.status === 401 ? "this key is not one of this server's" : errorText(me)); }
  state.admin = me.json.admin;
  state.sandbox = me.json.sandbox;
  if (me.json.app) { state.app = me.json.app; state.appID = me.json.app.id; }
  else if (appID) {
    const app = await api("GET", `/v1/apps/${encodeURIComponent(appID)}`);
    if (app.status !== 200) { state.key = null; throw new Error(errorText(app)); }
    state.app = app.json.app; state.appID = appID;
  } else { state.app = null; state.appID = null; }
  sessionStorage.setItem("richpush.key", key);
  if (state.appID) sessionStorage.setItem("richpush.app", state.appID); else sessionStorage.removeItem("richpush.app");
}

function signOut() {
  sessionStorage.clear();
  Object.assign(state, { key: null, appID: null, app: null, admin: false });
  location.hash = "";
  route();
}

function show(view) {
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${view}`;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  $("nav").hidden = !state.key;
  $("signout").hidden = !state.key;
  $("who").textContent = state.key ? `${state.app ? state.app.name + " (" + state.app.id + ")" : "no app yet"} · ${state.admin ? "admin key" : "app key"}${state.sandbox ? " · sandbox" : ""}` : "";
}

async function route() {
  const hash = location.hash.slice(1);
  if (!state.key) { show("signin"); $("signin-key").focus(); return; }
  if (!state.app) { show("app"); renderApp(); return; }
  if (hash.startsWith("n/")) { show("notification"); openNotification(hash.slice(2)); return; }
  const view = ["compose", "notifications", "devices", "app"].includes(hash) ? hash : "compose";
  show(view);
  if (view === "compose") checkSoon();
  if (view === "notifications") listNotifications();
  if (view === "devices") searchDevices();
  if (view === "app") renderApp();
}

// ---------------------------------------------------------------------------------------------------------------
// Compose: the message and audience from the form

const field = (id) => $(id).value.trim();
const list = (text) => text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);

function buildSend() {
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
  const kind = field("f-audience");
  const value = field("f-audience-value");
  let audience;
  if (kind === "all") audience = { all: true };
  else if (["tokens", "apns_tokens", "fcm_tokens"].includes(kind)) audience = { [kind]: list(value) };
  else audience = { [kind]: value };
  const body = { ...m, audience };
  if (field("f-send-at")) body.send_at = Math.round(new Date(field("f-send-at")).getTime() / 1000);
  if (field("f-spread")) body.spread_seconds = Number(field("f-spread"));
  return { body, local, message: m };
}

// Which form field an issue's path names (the server's paths, and the form's own).
function fieldFor(path) {
  const p = path.replace(/\[\d+\]/g, "");
  for (const input of document.querySelectorAll("#compose [data-path]")) {
    if (input.dataset.path.split(" ").some((d) => p === d || p.startsWith(d + "."))) return input;
  }
  return null;
}

function markIssues(issues) {
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
  ul.replaceChildren(...rest.map((i) => el("li", { class: i.severity === "warning" ? "sev-warning" : "sev-error" },
    `${i.severity === "warning" ? "Warning" : "Error"}: ${i.path ? i.path + " — " : ""}${i.message}${i.rule ? " [" + i.rule + "]" : ""}`)));
  if (!rest.length) ul.replaceChildren(el("li", { class: "ok", text: "No problems found: ready to send." }));
}

let lastDryRun = null;
let checkGeneration = 0;

async function check() {
  if (!state.app) return;
  const generation = ++checkGeneration;
  const { body, local, message } = buildSend();
  if (local.length) { markIssues(local.map((i) => ({ ...i, severity: "error" }))); render(message, null); return; }
  const r = await api("POST", `/v1/apps/${state.appID}/notifications`, { ...body, dry_run: true });
  if (generation !== checkGeneration) return;  // a newer check is under way
  if (r.status === 200) {
    lastDryRun = r.json;
    markIssues(r.json.warnings || []);
    const d = r.json.deliveries || {};
    $("reach").textContent = `Reaches ${number((d.apns || 0) + (d.fcm || 0))} device${(d.apns || 0) + (d.fcm || 0) === 1 ? "" : "s"}: ${number(d.apns || 0)} through APNs, ${number(d.fcm || 0)} through FCM.`;
    render(message, r.json);
  } else {
    lastDryRun = null;
    markIssues(r.json && r.json.error ? (r.json.error.issues || [{ path: "", message: errorText(r) }]).map((i) => ({ severity: "error", ...i })) : [{ path: "", message: errorText(r), severity: "error" }]);
    $("reach").textContent = "";
    render(message, null);
  }
}
const checkSoon = debounce(check, 250);

// ---------------------------------------------------------------------------------------------------------------
// Media: the preflight verdict, uploads

const preflight = debounce(async () => {
  const url = field("f-media");
  const ul = $("preflight");
  if (!url) { ul.replaceChildren(); return; }
  ul.replaceChildren(el("li", { text: "Checking the media…" }));
  const r = await api("POST", "/v1/media/check", { url });
  if (r.status !== 200) { ul.replaceChildren(el("li", { class: "sev-error", text: errorText(r) })); return; }
  const result = (r.json.results || [])[0] || {};
  const items = [];
  const size = result.bytes ? ` of ${number(Math.max(1, Math.round(result.bytes / 1024)))} KB` : "";
  const type = result.type ? result.type.toUpperCase() : "media";
  if (!result.ok) items.push(el("li", { class: "sev-error refused", text: `Refused: ${result.message || result.rule} [${result.rule}]` }));
  if (result.ios === "ok") items.push(el("li", { class: "ok", text: `iOS attaches it as a ${type}${size}.` }));
  else if (result.ios) items.push(el("li", { class: "sev-error", text: `iOS does not attach it: ${result.ios.message} [${result.ios.rule}]` }));
  if (result.android === "ok") items.push(el("li", { class: "ok", text: "Android shows it." }));
  else if (result.android) items.push(el("li", { class: "sev-warning", text: `Android does not show it: ${result.android.message} [${result.android.rule}]` }));
  if (result.rehost_reason) items.push(el("li", { text: `The server will host it itself (${result.rehost_reason}).` }));
  ul.replaceChildren(...items);
}, 400);

async function upload(file) {
  const ul = $("preflight");
  ul.replaceChildren(el("li", { text: `Uploading ${file.name}…` }));
  const r = await api("POST", "/v1/media", file, { raw: true, headers: { "Content-Type": file.type || "application/octet-stream" } });
  if (r.status !== 201 && r.status !== 200) { ul.replaceChildren(el("li", { class: "sev-error", text: `${file.name}: ${errorText(r)}` })); return; }
  $("f-media").value = r.json.url;
  preflight();
  checkSoon();
}

// ---------------------------------------------------------------------------------------------------------------
// Previews: what each device will show, from the message as it would be sent

function imageOf(sent) {
  const media = sent && sent.media;
  const first = Array.isArray(media) ? media[0] : media;
  const url = first && (first.url || first);
  const kind = first && first.kind;
  return typeof url === "string" && (!kind || kind === "image" || kind === "gif") ? url : null;
}

function notificationCard({ title, subtitle, body, thumb, big, collapsed, app }) {
  return el("div", { class: `notif ${collapsed ? "collapsed" : "expanded"}` },
    el("div", { class: "head" }, el("span", { class: "icon", "aria-hidden": "true" }), app, " · now"),
    big ? el("img", { class: "big", src: big, alt: "the attachment" }) : null,
    el("div", { class: "main" },
      el("div", { class: "text" },
        title ? el("div", { class: "t", text: title }) : null,
        subtitle ? el("div", { class: "s", text: subtitle }) : null,
        body ? el("div", { class: "b", text: body }) : null),
      thumb ? el("img", { class: "thumb", src: thumb, alt: "thumbnail" }) : null));
}

function render(message, dry) {
  const sent = (dry && dry.message) || message;
  const title = sent.alert ? sent.alert.title : sent.title;
  const subtitle = sent.alert ? sent.alert.subtitle : sent.subtitle;
  const body = sent.alert ? (typeof sent.alert === "string" ? sent.alert : sent.alert.body) : sent.body;
  const picture = imageOf(sent);
  const chart = sent.chart_image_url || null;
  const app = state.app ? state.app.name : "App";
  const shown = picture || chart;

  // iOS: the first attachment is the thumbnail collapsed and the picture expanded; a chart is drawn by the
  // extension with the same renderer as the server's PNG.
  const ios = $("panel-ios");
  ios.replaceChildren(
    el("div", { class: "device" },
      el("p", { class: "clock", text: "9:41" }),
      notificationCard({ title, subtitle, body, thumb: shown, collapsed: true, app }),
      el("p", { class: "caption", text: "Lock screen" }),
      notificationCard({ title, subtitle, body, big: shown, collapsed: false, app }),
      el("p", { class: "caption", text: "Expanded (long press)" })),
    chart ? el("p", { class: "note", text: picture
      ? "The picture is the thumbnail and the attachment; the chart is attached second. Below, the chart as the iPhone draws it: the server's PNG, the same bytes as the device library's."
      : "The chart, drawn by the iPhone's device library, is the attachment; the server's PNG of it is the same bytes." }) : null,
    chart && picture ? el("img", { class: "big", src: chart, alt: "the chart as drawn", id: "chart-preview" }) : null);
  if (chart && !picture) ios.querySelector(".big").id = "chart-preview";

  const android = $("panel-android");
  android.replaceChildren(el("div", { class: "device android" },
    el("p", { class: "clock", text: "9:41" }),
    notificationCard({ title, body, thumb: shown, collapsed: true, app }),
    el("p", { class: "caption", text: "Collapsed" }),
    notificationCard({ title, body, big: shown, collapsed: false, app }),
    el("p", { class: "caption", text: "Expanded (big picture)" })),
    subtitle ? el("p", { class: "note", text: "Android shows no subtitle." }) : null);

  const web = $("panel-web");
  web.replaceChildren(el("div", { class: "device web" }, notificationCard({ title, body, big: shown, collapsed: false, app: location.host })));

  const requests = (dry && dry.requests) || {};
  const sentPanel = $("panel-sent");
  sentPanel.replaceChildren(
    requests.apns ? el("h4", { text: `APNs: POST ${requests.apns.path} (${number(requests.apns.bytes)} bytes)` }) : null,
    requests.apns ? el("pre", { id: "sent-apns", text: JSON.stringify({ headers: requests.apns.headers, payload: requests.apns.payload }, null, 2) }) : null,
    requests.fcm ? el("h4", { text: `FCM: POST ${requests.fcm.path} (${number(requests.fcm.bytes)} bytes)` }) : null,
    requests.fcm ? el("pre", { id: "sent-fcm", text: JSON.stringify(requests.fcm.body, null, 2) }) : null,
    dry ? el("h4", { text: "The message as the server would send it (its id, receipt address, hosted media and chart image set)" }) : null,
    dry ? el("pre", { id: "sent-message", text: JSON.stringify(dry.message, null, 2) }) : null,
    !dry ? el("p", { class: "note", text: "Fix the problems listed to see the exact requests." }) : null);

  // Payload sizes against each provider's limit (the receipt address included: it is in the payload as sent).
  const gauges = [];
  const gauge = (name, bytes, limit) => el("div", { class: "gauge" },
    el("span", { text: name }), el("meter", { min: 0, max: limit, low: limit * 0.75, high: limit * 0.9, optimum: 0, value: bytes, "aria-label": `${name}: ${bytes} of ${limit} bytes` }),
    el("span", { text: `${number(bytes)} / ${number(limit)} B` }));
  if (requests.apns) gauges.push(gauge("APNs payload", requests.apns.bytes, 4096));
  if (requests.fcm) {
    const topic = /"(topic|condition)"/.test(JSON.stringify(requests.fcm.body.message ? Object.keys(requests.fcm.body.message) : []));
    gauges.push(gauge(`FCM message${topic ? " (topic)" : ""}`, requests.fcm.bytes, topic ? 2048 : 4096));
  }
  $("gauges").replaceChildren(...gauges);
}

// ---------------------------------------------------------------------------------------------------------------
// Test send and send

const isAPNsToken = (t) => /^[0-9a-fA-F]{64,200}$/.test(t) && t.length % 2 === 0;

async function followUntilDone(id, onUpdate, seconds = 20) {
  for (let i = 0; i < seconds * 4; i++) {
    const r = await api("GET", `/v1/apps/${state.appID}/notifications/${id}?limit=100`);
    if (r.status === 200) {
      onUpdate(r.json);
      const c = r.json.counts || {};
      if (!c.queued && !c.leased && r.json.total > 0) return r.json;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return null;
}

async function testSend() {
  const out = $("test-result");
  const token = field("f-test-token");
  if (!token) { out.replaceChildren(el("p", { class: "sev-error", text: "Give a device token to send the test to." })); $("f-test-token").focus(); return; }
  const { body, local } = buildSend();
  if (local.length) { markIssues(local.map((i) => ({ ...i, severity: "error" }))); return; }
  delete body.send_at; delete body.spread_seconds;
  body.audience = isAPNsToken(token) ? { apns_tokens: [token.toLowerCase()] } : { fcm_tokens: [token] };
  out.replaceChildren(el("p", { text: "Sending the test…" }));
  const r = await api("POST", `/v1/apps/${state.appID}/notifications`, body);
  if (r.status !== 202) { out.replaceChildren(el("p", { class: "sev-error", text: errorText(r) })); return; }
  const id = r.json.id;
  const done = await followUntilDone(id, (n) => out.replaceChildren(el("p", { text: `Test ${id.slice(0, 8)}…: ${JSON.stringify(n.counts)}` })));
  const delivery = done && (done.deliveries || [])[0];
  const lines = [el("p", { id: "test-outcome", class: delivery && delivery.state === "delivered" ? "ok" : "sev-error",
    text: delivery ? `${delivery.provider === "apns" ? "APNs" : "FCM"}: ${delivery.state}${delivery.reason ? " (" + delivery.reason + ")" : ""}` : "No outcome yet." })];
  out.replaceChildren(...lines);
  if (!(state.sandbox && delivery && delivery.provider === "apns" && delivery.state === "delivered")) return;
  // In sandbox mode the simulated iPhone runs the device library on what the APNs emulator received.
  out.append(el("p", { text: "The simulated iPhone is processing it…" }));
  for (let i = 0; i < 40; i++) {
    const s = await api("GET", `/v1/apps/${state.appID}/notifications/${id}/simulation`);
    if (s.status === 200) { out.lastChild.replaceWith(simulated(s.json)); return; }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  out.lastChild.textContent = "The simulated iPhone did not receive it.";
}

function simulated(report) {
  const attachments = report.attachments || [];
  const skipped = report.skipped || [];
  return el("div", { class: "simulated", id: "simulated" },
    el("h4", { text: "The simulated iPhone shows" }),
    el("p", {}, el("b", { text: report.title || "" }), report.subtitle ? ` — ${report.subtitle}` : "", report.body ? el("br") : null, report.body || ""),
    el("table", {}, el("caption", { class: "visually-hidden", text: "Attachments" }),
      el("thead", {}, el("tr", {}, el("th", { text: "Attached" }), el("th", { text: "Kind" }), el("th", { class: "num", text: "Bytes" }))),
      el("tbody", {}, attachments.length ? attachments.map((a) => el("tr", { class: "attachment" },
        el("td", { text: a.url && !a.url.startsWith("chart:") ? a.url : "the chart, drawn on the device" }),
        el("td", { class: "nowrap", text: `${a.kind || ""}${a.uti ? " (" + a.uti.replace(/^public\./, "").replace(/^com\.compuserve\./, "").toUpperCase() + ")" : ""}` }),
        el("td", { class: "num", text: number(a.bytes || 0) })))
        : el("tr", {}, el("td", { colspan: 3, text: "Nothing attached." })))),
    skipped.length ? el("ul", { class: "verdicts" }, skipped.map((s) => el("li", { class: "sev-warning skipped", text: `Skipped ${s.url || ""}: ${s.reason}${s.message ? " — " + s.message : ""}` }))) : null,
    el("p", { class: "note", text: `${report.deadline_hit ? "The deadline was hit. " : ""}Processed in ${report.elapsed_ms ?? "?"} ms.` }));
}

async function send() {
  const { body, local } = buildSend();
  if (local.length) { markIssues(local.map((i) => ({ ...i, severity: "error" }))); return; }
  // Nothing goes out to an audience the sender has not seen counted.
  const d = (lastDryRun && lastDryRun.deliveries) || {};
  const reach = (d.apns || 0) + (d.fcm || 0);
  const who = body.audience.all ? "every registered device" : `the audience (${Object.keys(body.audience)[0].replace("_", " ")})`;
  if (!confirm(`Send to ${who}: ${number(reach)} device${reach === 1 ? "" : "s"} now registered${body.send_at ? ", at the time set" : ""}?`)) return;
  $("send").disabled = true;
  const r = await api("POST", `/v1/apps/${state.appID}/notifications`, body, { headers: { "Idempotency-Key": crypto.randomUUID() } });
  $("send").disabled = false;
  if (r.status !== 202) { $("send-error").textContent = errorText(r); return; }
  $("send-error").textContent = "";
  location.hash = `n/${r.json.id}`;
}

// ---------------------------------------------------------------------------------------------------------------
// A notification's outcomes, updating live

let following = null;

async function openNotification(id) {
  const box = $("notification-body");
  const token = {};
  following = token;
  const deliveries = new Map();
  let after = 0;
  let filter = "";
  const draw = (n) => {
    const c = n.counts || {};
    const byProvider = {};
    for (const d of deliveries.values()) {
      byProvider[d.provider] = byProvider[d.provider] || {};
      byProvider[d.provider][d.state] = (byProvider[d.provider][d.state] || 0) + 1;
    }
    const failed = {};
    for (const d of deliveries.values()) if (d.reason && d.state !== "delivered") failed[d.reason] = (failed[d.reason] || 0) + 1;
    const rows = [...deliveries.values()].filter((d) => !filter || d.target.includes(filter) || (d.reason || "").includes(filter) || d.state.includes(filter));
    box.replaceChildren(
      el("p", { class: "note", text: `Notification ${n.id}` }),
      el("div", { class: "counts", id: "counts" }, ["queued", "leased", "delivered", "failed", "pruned", "expired"].map((s) =>
        el("div", { class: "count", "data-state": s }, el("b", { text: number(c[s] || 0) }), s))),
      el("p", { text: `${number(n.total || 0)} deliver${n.total === 1 ? "y" : "ies"} in all.` + (Object.keys(failed).length ? ` Not delivered, by reason: ${Object.entries(failed).map(([r, k]) => `${r} ${k}`).join(", ")}.` : "") }),
      el("p", { text: `By provider: ${Object.entries(byProvider).map(([p, s]) => `${p === "apns" ? "APNs" : "FCM"} ${Object.entries(s).map(([k, v]) => `${k} ${v}`).join(", ")}`).join("; ") || "—"}` }),
      el("p", { id: "receipts", text: `Device receipts: ${number((n.receipts || {}).count || 0)}, ${number((n.receipts || {}).with_media || 0)} showed media` +
        (Object.keys((n.receipts || {}).skipped_reasons || {}).length ? `; media skipped: ${Object.entries(n.receipts.skipped_reasons).map(([r, k]) => `${r} ${k}`).join(", ")}` : "") + "." }),
      el("label", { for: "targets-filter", text: "Search the targets (token, state or reason)" }),
      el("input", { id: "targets-filter", type: "search", value: filter, oninput: (e) => { filter = e.target.value.trim(); draw(n); const f = $("targets-filter"); f.focus(); f.setSelectionRange(f.value.length, f.value.length); } }),
      el("table", {}, el("thead", {}, el("tr", {}, ["Target", "Provider", "State", "Reason", "Attempts"].map((h) => el("th", { text: h })))),
        el("tbody", {}, rows.slice(0, 500).map((d) => el("tr", {}, el("td", { text: d.target }), el("td", { text: d.provider }), el("td", { text: d.state }), el("td", { text: d.reason || "" }), el("td", { class: "num", text: d.attempts })))))
    );
  };
  while (following === token) {
    const r = await api("GET", `/v1/apps/${state.appID}/notifications/${id}?limit=1000${after ? "&after=" + after : ""}`);
    if (r.status !== 200) { box.replaceChildren(el("p", { class: "sev-error", text: errorText(r) })); return; }
    for (const d of r.json.deliveries || []) deliveries.set(d.target + "\u0000" + d.provider, d);
    if (r.json.next_after) { after = r.json.next_after; continue; }
    after = 0;
    if (following === token) draw(r.json);
    const c = r.json.counts || {};
    if (!c.queued && !c.leased && r.json.total > 0 && deliveries.size >= r.json.total) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Lists: past notifications, the registry

async function listNotifications(before) {
  const box = $("notifications-list");
  const r = await api("GET", `/v1/apps/${state.appID}/notifications?limit=20${before ? "&before=" + before : ""}`);
  if (r.status !== 200) { box.replaceChildren(el("p", { class: "sev-error", text: errorText(r) })); return; }
  const items = r.json.notifications || [];
  box.replaceChildren(
    items.length ? el("table", {}, el("thead", {}, el("tr", {}, ["Sent", "Title", "Deliveries", "Delivered"].map((h) => el("th", { text: h })))),
      el("tbody", {}, items.map((n) => el("tr", {},
        el("td", { text: new Date(n.created_at * 1000).toLocaleString() }),
        el("td", {}, el("a", { href: `#n/${n.id}`, text: n.title || n.body || n.id })),
        el("td", { class: "num", text: number(n.total) }), el("td", { class: "num", text: number((n.counts || {}).delivered || 0) })))))
      : el("p", { text: "Nothing sent yet." }),
    r.json.next_before ? el("button", { type: "button", text: "Older", onclick: () => listNotifications(r.json.next_before) }) : null);
}

async function searchDevices(after) {
  const box = $("devices-list");
  const q = field("devices-q");
  const r = await api("GET", `/v1/apps/${state.appID}/devices?limit=50&q=${encodeURIComponent(q)}${after ? "&after=" + after : ""}`);
  if (r.status !== 200) { box.replaceChildren(el("p", { class: "sev-error", text: errorText(r) })); return; }
  const devices = r.json.devices || [];
  box.replaceChildren(
    el("p", { text: `${number(r.json.total)} device${r.json.total === 1 ? "" : "s"} registered${q ? `; matching “${q}”:` : ":"}` }),
    el("table", {}, el("thead", {}, el("tr", {}, ["Token", "Platform", "User", "Tags", "Updated", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, devices.map((d) => el("tr", {},
        el("td", { text: d.token.length > 24 ? d.token.slice(0, 24) + "…" : d.token, title: d.token }), el("td", { text: `${d.platform} (${d.provider})` }),
        el("td", { text: d.user_id || "" }), el("td", { text: (d.tags || []).join(", ") }), el("td", { text: new Date(d.updated_at).toLocaleString() }),
        el("td", {}, el("button", { type: "button", class: "quiet", text: "Test here", onclick: () => { $("f-test-token").value = d.token; location.hash = "compose"; } })))))),
    r.json.next_after ? el("button", { type: "button", text: "More", onclick: () => searchDevices(r.json.next_after) }) : null);
}

// ---------------------------------------------------------------------------------------------------------------
// The app: credentials and keys; a new app (admin key)

async function renderApp() {
  const box = $("app-body");
  if (!state.app) {
    if (!state.admin) { box.replaceChildren(el("p", { text: "This key has no app." })); return; }
    const form = el("form", { class: "card narrow", id: "create-app" },
      el("h3", { text: "Create an app" }),
      el("label", { for: "new-name", text: "Name" }), el("input", { id: "new-name", required: true }),
      el("label", { for: "new-bundle", text: "Bundle id (the APNs topic)" }), el("input", { id: "new-bundle", required: true, placeholder: "com.example.app" }),
      el("button", { type: "submit", text: "Create" }), el("p", { class: "error", id: "create-error", role: "alert" }));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const r = await api("POST", "/v1/apps", { name: field("new-name"), bundle_id: field("new-bundle") });
      if (r.status !== 201) { $("create-error").textContent = errorText(r); return; }
      state.app = r.json.app; state.appID = r.json.app.id;
      sessionStorage.setItem("richpush.app", state.appID);
      box.replaceChildren(el("div", { class: "card" }, el("p", { text: "The app's first API key, shown once (only its hash is kept):" }), el("p", { class: "secret", text: r.json.api_key }),
        el("button", { type: "button", text: "Continue", onclick: () => { location.hash = "app"; route(); } })));
    });
    box.replaceChildren(form);
    return;
  }
  const app = state.app;
  const credentials = el("form", { class: "card", id: "apns-form" },
    el("h3", { text: "APNs (token authentication)" }),
    el("p", { text: app.apns ? `Key ${app.apns.key_id}, team ${app.apns.team_id}, ${app.apns.environment}.` : "No APNs credentials: sends use the sandbox's in sandbox mode." }),
    el("label", { for: "apns-file", text: "The .p8 key file" }), el("input", { id: "apns-file", type: "file", accept: ".p8,.pem" }),
    el("div", { class: "row" },
      el("div", {}, el("label", { for: "apns-key-id", text: "Key ID" }), el("input", { id: "apns-key-id", maxlength: 10 })),
      el("div", {}, el("label", { for: "apns-team", text: "Team ID" }), el("input", { id: "apns-team", maxlength: 10 })),
      el("div", {}, el("label", { for: "apns-env", text: "Environment" }), el("select", { id: "apns-env" }, el("option", { text: "production" }), el("option", { text: "development" })))),
    el("button", { type: "submit", text: "Save APNs credentials" }), el("p", { class: "error", id: "apns-error", role: "alert" }));
  credentials.addEventListener("submit", async (e) => {
    e.preventDefault();
    const file = $("apns-file").files[0];
    if (!file) { $("apns-error").textContent = "Choose the .p8 file."; return; }
    const r = await api("PATCH", `/v1/apps/${state.appID}`, { apns: { key: await file.text(), key_id: field("apns-key-id"), team_id: field("apns-team"), environment: field("apns-env") } });
    if (r.status !== 200) { $("apns-error").textContent = errorText(r); return; }
    state.app = r.json.app; renderApp();
  });
  const fcm = el("form", { class: "card", id: "fcm-form" },
    el("h3", { text: "FCM (service account)" }),
    el("p", { text: app.fcm ? `Project ${app.fcm.project_id}, ${app.fcm.client_email}.` : "No FCM credentials." }),
    el("label", { for: "fcm-file", text: "The service account JSON file" }), el("input", { id: "fcm-file", type: "file", accept: ".json,application/json" }),
    el("button", { type: "submit", text: "Save FCM credentials" }), el("p", { class: "error", id: "fcm-error", role: "alert" }));
  fcm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const file = $("fcm-file").files[0];
    if (!file) { $("fcm-error").textContent = "Choose the service account file."; return; }
    const r = await api("PATCH", `/v1/apps/${state.appID}`, { fcm: { service_account: await file.text() } });
    if (r.status !== 200) { $("fcm-error").textContent = errorText(r); return; }
    state.app = r.json.app; renderApp();
  });
  const keys = el("div", { class: "card", id: "keys" }, el("h3", { text: "API keys" }));
  const r = await api("GET", `/v1/apps/${state.appID}/keys`);
  if (r.status === 200) {
    keys.append(el("table", {}, el("thead", {}, el("tr", {}, ["Key", "Scopes", "Made", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, r.json.keys.map((k) => el("tr", {}, el("td", { text: k.id }), el("td", { text: k.scopes.join(", ") }), el("td", { text: new Date(k.created_at).toLocaleString() }),
        el("td", {}, el("button", { type: "button", class: "quiet", text: "Revoke", "aria-label": `Revoke ${k.id}`, onclick: async () => {
          if (!confirm(`Revoke ${k.id}? Requests with it are refused at once.`)) return;
          const d = await api("DELETE", `/v1/apps/${state.appID}/keys/${k.id}`);
          if (d.status === 200) renderApp(); else alert(errorText(d));
        } })))))));
  } else keys.append(el("p", { class: "note", text: errorText(r) }));
  const make = el("form", { class: "row", id: "key-form" },
    el("fieldset", {}, el("legend", { text: "A new key's scopes" }),
      ["send", "manage", "read"].map((s) => el("label", {}, el("input", { type: "checkbox", value: s, checked: s !== "manage", class: "check" }), ` ${s}`))),
    el("div", { class: "end" }, el("button", { type: "submit", text: "Make a key" })));
  make.addEventListener("submit", async (e) => {
    e.preventDefault();
    const scopes = [...make.querySelectorAll("input:checked")].map((i) => i.value);
    const k = await api("POST", `/v1/apps/${state.appID}/keys`, { scopes });
    if (k.status !== 201) { alert(errorText(k)); return; }
    await renderApp();
    $("keys").append(el("p", { text: `The new key (${k.json.id}), shown once:` }), el("p", { class: "secret", text: k.json.api_key }));
  });
  keys.append(make);
  box.replaceChildren(el("div", { class: "card" }, el("h3", { text: app.name }), el("p", { text: `${app.id} · bundle id ${app.bundle_id}${app.fcm_project_id ? " · FCM project " + app.fcm_project_id : ""}` })), credentials, fcm, keys);
}

// ---------------------------------------------------------------------------------------------------------------
// Wiring

function wire() {
  $("signin-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    $("signin-error").textContent = "";
    try { await signIn(field("signin-key"), field("signin-app")); $("signin-key").value = ""; location.hash = state.app ? "compose" : "app"; route(); }
    catch (error) { $("signin-error").textContent = error.message; }
  });
  $("signout").addEventListener("click", signOut);
  $("theme").addEventListener("click", () => {
    const dark = document.body.classList.toggle("dark");
    $("theme").setAttribute("aria-pressed", String(dark));
    $("theme").textContent = dark ? "Light preview" : "Dark preview";
  });
  const compose = $("compose");
  compose.addEventListener("input", (e) => { if (e.target.id !== "f-test-token") checkSoon(); if (e.target.id === "f-media") preflight(); });
  compose.addEventListener("change", () => checkSoon());
  compose.addEventListener("submit", (e) => e.preventDefault());
  $("test-send").addEventListener("click", testSend);
  $("send").addEventListener("click", send);
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); if (e.dataTransfer.files[0]) upload(e.dataTransfer.files[0]); });
  drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); $("f-file").click(); } });
  $("f-file").addEventListener("change", (e) => { if (e.target.files[0]) upload(e.target.files[0]); });
  $("devices-search").addEventListener("submit", (e) => { e.preventDefault(); searchDevices(); });
  // Tabs: arrow keys move between them, as a tab list should.
  const tabs = [...document.querySelectorAll('#tabs [role="tab"]')];
  const select = (tab) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      $(t.getAttribute("aria-controls")).hidden = !on;
    }
    tab.focus();
  };
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (e) => {
      if (e.key === "ArrowRight") select(tabs[(i + 1) % tabs.length]);
      if (e.key === "ArrowLeft") select(tabs[(i + tabs.length - 1) % tabs.length]);
    });
  });
  window.addEventListener("hashchange", () => { following = null; route(); });
}

async function start() {
  wire();
  if (state.key) {
    try { await signIn(state.key, state.appID); } catch { sessionStorage.clear(); state.key = null; }
  }
  route();
}

start();
