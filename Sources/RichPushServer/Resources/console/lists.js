// ---------------------------------------------------------------------------------------------------------------
// Lists: past notifications, the registry

import { $, fill, api, el, errorText, number, state } from "./core.js";
import { field } from "./compose.js";
import { hoursChart } from "./outcomes.js";

const permissionNames = { authorized: "allowed", denied: "turned off", provisional: "quietly", ephemeral: "for a while", not_determined: "not asked yet", unknown: "not reported" };

/** The app over the last 48 hours: queued, delivered and opened per hour, the most common failures, the devices by
 * where their notification permission stands, and the hours as CSV. */
export async function appInsights() {
  const box = $("insights");
  const path = `/v1/apps/${encodeURIComponent(state.appID)}/insights?hours=48`;
  const r = await api("GET", path);
  if (r.status !== 200) { fill(box, el("p", { class: "sev-error", text: errorText(r) })); return; }
  const width = Math.max(300, Math.min(720, (box.clientWidth || 640) - 40));
  const failures = r.json.top_failures || [];
  const permissions = Object.entries(r.json.devices_by_permission || {}).sort((a, b) => b[1] - a[1]);
  const csv = el("button", { type: "button", class: "quiet", text: "Download the hours (CSV)", onclick: async () => {
    // A link cannot carry the key: the CSV is fetched with it and handed to the browser as a file.
    const response = await fetch(path + "&format=csv", { headers: { Authorization: `Bearer ${state.key}` } });
    if (!response.ok) return;
    const url = URL.createObjectURL(await response.blob());
    const a = el("a", { href: url, download: `insights-${state.appID}.csv` });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  } });
  fill(box, 
    el("h3", { text: "The last 48 hours" }),
    hoursChart(r.json.hours || [], width, r.json.since, r.json.since + 47 * 3600),
    el("p", { class: "legend note" }, el("span", { class: "key hours-accepted" }), " queued ", el("span", { class: "key hours-delivered" }), " accepted by the service ",
      el("span", { class: "key hours-opened" }), " opened"),
    el("p", { id: "insights-failures", class: "note", text: failures.length ? `Most common failures: ${failures.map((f) => `${f.reason} ${number(f.count)}`).join(", ")}.` : "No failures in these hours." }),
    el("p", { id: "insights-permissions", class: "note", text: permissions.length ? `Devices by notification permission: ${permissions.map(([p, n]) => `${permissionNames[p] || p} ${number(n)}`).join(", ")}.` : "No devices registered." }),
    csv);
}

export async function listNotifications(before) {
  const box = $("notifications-list");
  const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/notifications?limit=20${before ? "&before=" + encodeURIComponent(before) : ""}`);
  if (r.status !== 200) { fill(box, el("p", { class: "sev-error", text: errorText(r) })); return; }
  const items = r.json.notifications || [];
  fill(box, 
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
  if (r.status !== 200) { fill(box, el("p", { class: "sev-error", text: errorText(r) })); return; }
  const devices = r.json.devices || [];
  fill(box, 
    el("p", { text: `${number(r.json.total)} device${r.json.total === 1 ? "" : "s"} registered${q ? `; matching “${q}”:` : ":"}` }),
    el("table", {}, el("thead", {}, el("tr", {}, ["Token", "Platform", "Notifications", "User", "Tags", "Updated", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, devices.map((d) => el("tr", {},
        el("td", { text: d.token.length > 24 ? d.token.slice(0, 24) + "…" : d.token, title: d.token }), el("td", { text: `${d.platform} (${d.provider})` }),
        el("td", { text: d.permission ? permissionNames[d.permission] || d.permission : "—" }), el("td", { text: d.user_id || "" }), el("td", { text: (d.tags || []).join(", ") }), el("td", { text: new Date(d.updated_at).toLocaleString() }),
        el("td", {}, el("button", { type: "button", class: "quiet", text: "Test here", onclick: () => { $("f-test-token").value = d.token; location.hash = "compose"; } })))))),
    r.json.next_after ? el("button", { type: "button", text: "More", onclick: () => searchDevices(r.json.next_after) }) : null);
}
