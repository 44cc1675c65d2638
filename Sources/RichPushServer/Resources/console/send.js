// ---------------------------------------------------------------------------------------------------------------
// Test send and send

import { $, fill, api, el, errorText, number, state } from "./core.js";
import { buildSend, field, lastDryRun, markEdited, markIssues } from "./compose.js";

export const isAPNsToken = (t) => /^[0-9a-fA-F]{64,200}$/.test(t) && t.length % 2 === 0;
export const isWebToken = (t) => /^https:\/\/[^#\s]+#[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(t);
const providerNames = { apns: "APNs", fcm: "FCM", webpush: "Web Push" };

export async function followUntilDone(id, onUpdate, seconds = 20) {
  for (let i = 0; i < seconds * 4; i++) {
    const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/notifications/${encodeURIComponent(id)}?limit=100`);
    if (r.status === 200) {
      onUpdate(r.json);
      const c = r.json.counts || {};
      // Over: nothing waiting, and no fan-out still adding deliveries.
      if (!c.queued && !c.leased && !r.json.fanning_out && r.json.total > 0) return r.json;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return null;
}

export async function testSend() {
  const out = $("test-result");
  const token = field("f-test-token");
  if (!token) { fill(out, el("p", { class: "sev-error", text: "Give a device token to send the test to." })); $("f-test-token").focus(); return; }
  const { body, local } = buildSend();
  if (local.length) { markIssues(local.map((i) => ({ ...i, severity: "error" }))); return; }
  delete body.send_at; delete body.spread_seconds;
  // A browser is registered by its subscription: its token (endpoint#keys) is sent to as a registered device.
  body.audience = isWebToken(token) ? { tokens: [token] }
    : isAPNsToken(token) ? { apns_tokens: [token.toLowerCase()] } : { fcm_tokens: [token] };
  fill(out, el("p", { text: "Sending the test…" }));
  const r = await api("POST", `/v1/apps/${encodeURIComponent(state.appID)}/notifications`, body);
  if (r.status !== 202) { fill(out, el("p", { class: "sev-error", text: errorText(r) })); return; }
  const id = r.json.id;
  const done = await followUntilDone(id, (n) => fill(out, el("p", { text: `Test ${id.slice(0, 8)}…: ${JSON.stringify(n.counts)}` })));
  const delivery = done && (done.deliveries || [])[0];
  const lines = [el("p", { id: "test-outcome", class: delivery && delivery.state === "delivered" ? "ok" : "sev-error",
    text: delivery ? `${providerNames[delivery.provider] || delivery.provider}: ${delivery.state}${delivery.reason ? " (" + delivery.reason + ")" : ""}` : "No outcome yet." })];
  fill(out, ...lines);
  if (!(state.sandbox && delivery && delivery.provider === "apns" && delivery.state === "delivered")) return;
  // In sandbox mode the simulated iPhone runs the device library on what the APNs emulator received.
  out.append(el("p", { text: "The simulated iPhone is processing it…" }));
  for (let i = 0; i < 40; i++) {
    const s = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/notifications/${encodeURIComponent(id)}/simulation`);
    if (s.status === 200) { out.lastChild.replaceWith(simulated(s.json)); return; }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  out.lastChild.textContent = "The simulated iPhone did not receive it.";
}

export function simulated(report) {
  const attachments = report.attachments || [];
  const skipped = report.skipped || [];
  return el("div", { class: "simulated", id: "simulated" },
    el("h4", { text: "The simulated iPhone shows" }),
    el("p", {}, el("b", { text: report.title || "" }), report.subtitle ? ` — ${report.subtitle}` : "", report.body ? el("br") : null, report.body || ""),
    el("table", {}, el("caption", { class: "visually-hidden", text: "Attachments" }),
      el("thead", {}, el("tr", {}, el("th", { text: "Attached" }), el("th", { text: "Kind" }), el("th", { class: "num", text: "Bytes" }))),
      el("tbody", {}, attachments.length ? attachments.map((a) => el("tr", { class: "attachment" },
        el("td", { text: a.url && !a.url.startsWith("chart:") ? a.url + (a.fetched ? ` (fetched as ${a.fetched})` : "") : "the chart, drawn on the device" }),
        el("td", { class: "nowrap", text: `${a.kind || ""}${a.uti ? " (" + a.uti.replace(/^public\./, "").replace(/^com\.compuserve\./, "").toUpperCase() + ")" : ""}` }),
        el("td", { class: "num", text: number(a.bytes || 0) })))
        : el("tr", {}, el("td", { colspan: 3, text: "Nothing attached." })))),
    skipped.length ? el("ul", { class: "verdicts" }, skipped.map((s) => el("li", { class: "sev-warning skipped", text: `Skipped ${s.url || ""}${s.fetched ? ` (fetched as ${s.fetched})` : ""}: ${s.reason}${s.message ? " — " + s.message : ""}` }))) : null,
    el("p", { class: "note", text: `${report.deadline_hit ? "The deadline was hit. " : ""}Processed in ${report.elapsed_ms ?? "?"} ms.` }));
}

export async function send() {
  markEdited();
  const { body, local } = buildSend();
  if (local.length) { markIssues(local.map((i) => ({ ...i, severity: "error" }))); return; }
  if (state.updating) { await sendUpdate(body); return; }
  // Nothing goes out to an audience the sender has not seen counted.
  const d = lastDryRun && lastDryRun.deliveries;
  const reach = d ? Object.values(d).reduce((a, b) => a + (Number(b) || 0), 0) : null;
  const who = body.audience.all ? "every registered device" : `the audience (${Object.keys(body.audience)[0].replace("_", " ")})`;
  const counted = reach === null ? "how many devices it reaches is not shown to this key" : `${number(reach)} device${reach === 1 ? "" : "s"} now registered`;
  if (!confirm(`Send to ${who}: ${counted}${body.send_at ? ", at the time set" : ""}?`)) return;
  $("send").disabled = true;
  const r = await api("POST", `/v1/apps/${encodeURIComponent(state.appID)}/notifications`, body, { headers: { "Idempotency-Key": crypto.randomUUID() } });
  $("send").disabled = false;
  if (r.status !== 202) { $("send-error").textContent = errorText(r); return; }
  $("send-error").textContent = "";
  location.hash = `n/${r.json.id}`;
}

/** The composed message as the next version of `state.updating`: to the devices the first version went to. */
async function sendUpdate(body) {
  const root = state.updating.id;
  for (const k of ["audience", "send_at", "spread_seconds", "dry_run"]) delete body[k];
  if (!confirm(`Send this as the next version of ${root}, to every device it went to?`)) return;
  $("send").disabled = true;
  const r = await api("POST", `/v1/apps/${encodeURIComponent(state.appID)}/notifications/${encodeURIComponent(root)}/updates`, body, { headers: { "Idempotency-Key": crypto.randomUUID() } });
  $("send").disabled = false;
  if (r.status !== 202) { $("send-error").textContent = errorText(r); return; }
  $("send-error").textContent = "";
  state.updating = null;
  location.hash = `n/${r.json.id}`;
}
