// ---------------------------------------------------------------------------------------------------------------
// A notification's outcomes, updating live

import { $, api, el, errorText, number, state } from "./core.js";

export let following = null;

export async function openNotification(id) {
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
    const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/notifications/${encodeURIComponent(id)}?limit=1000${after ? "&after=" + encodeURIComponent(after) : ""}`);
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


/** Stops updating the open notification (the view changed). */
export function stopFollowing() { following = null; }
