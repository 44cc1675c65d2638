// ---------------------------------------------------------------------------------------------------------------
// Lists: past notifications, the registry

import { $, api, el, errorText, number, state } from "./core.js";
import { field } from "./compose.js";

export async function listNotifications(before) {
  const box = $("notifications-list");
  const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/notifications?limit=20${before ? "&before=" + encodeURIComponent(before) : ""}`);
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

export async function searchDevices(after) {
  const box = $("devices-list");
  const q = field("devices-q");
  const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/devices?limit=50&q=${encodeURIComponent(q)}${after ? "&after=" + encodeURIComponent(after) : ""}`);
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
