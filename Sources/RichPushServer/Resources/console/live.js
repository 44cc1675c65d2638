// ---------------------------------------------------------------------------------------------------------------
// A Live Activity series: states composed one by one, previewed, then sent in order and followed

import { $, fill, api, el, errorText, state } from "./core.js";
import { buildSend, markIssues } from "./compose.js";
import { liveCard } from "./preview.js";
import { followUntilDone } from "./send.js";

const series = [];

function describe(body) {
  const live = body.live_activity;
  const values = Object.entries(live.content_state || {}).filter(([k]) => k !== "chart").map(([k, v]) => `${k} ${typeof v === "string" ? v : JSON.stringify(v)}`);
  return `${live.event}${values.length ? ": " + values.join(", ") : ""}`;
}

function show() {
  fill($("live-series"), ...series.map((body, i) => el("li", { "data-event": body.live_activity.event },
    el("span", { text: describe(body) }), " ",
    el("button", { type: "button", class: "quiet", onclick: () => preview(i), text: "Preview" }), " ",
    el("button", { type: "button", class: "quiet", onclick: () => { series.splice(i, 1); show(); }, text: "Remove" }))));
  $("live-send").disabled = series.length === 0;
}

// The state as the Lock Screen would show it, in the iOS panel.
function preview(i) {
  const body = series[i];
  fill($("panel-ios"), liveCard(body, body.title, body.body, null, state.app ? state.app.name : "App"));
  $("tab-ios").click();
}

export function addState() {
  const { body, local } = buildSend();
  if (local.length) { markIssues(local.map((i) => ({ ...i, severity: "error" }))); return; }
  if (!body.live_activity) { fill($("live-result"), el("p", { class: "sev-error", text: "Choose an event (start, update or end) first." })); return; }
  delete body.send_at; delete body.spread_seconds;
  series.push(body);
  fill($("live-result"));
  show();
}

// Each state in order, a second apart (its timestamp is the second the server accepts it), each followed to its end.
export async function sendSeries() {
  const out = $("live-result");
  const rows = series.map((body) => el("li", { "data-event": body.live_activity.event, text: `${describe(body)}: sending…` }));
  fill(out, el("ol", { id: "live-outcomes" }, ...rows));
  $("live-send").disabled = true;
  const ids = [];
  for (const [i, body] of series.entries()) {
    if (i > 0) await new Promise((resolve) => setTimeout(resolve, 1100));
    const r = await api("POST", `/v1/apps/${encodeURIComponent(state.appID)}/notifications`, body);
    if (r.status !== 202) { rows[i].textContent = `${describe(body)}: refused: ${errorText(r)}`; rows[i].className = "sev-error"; ids.push(null); continue; }
    ids.push(r.json.id);
    rows[i].textContent = `${describe(body)}: accepted`;
  }
  await Promise.all(ids.map((id, i) => id && followUntilDone(id, (n) => {
    const counts = Object.entries(n.counts || {}).filter(([, v]) => v > 0).map(([k, v]) => `${k} ${v}`).join(", ");
    rows[i].textContent = `${describe(series[i])}: ${counts || "no deliveries"}`;
    rows[i].dataset.state = (n.counts || {}).delivered ? "delivered" : "";
  })));
  $("live-send").disabled = series.length === 0;
}
