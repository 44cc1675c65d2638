// ---------------------------------------------------------------------------------------------------------------
// The app: credentials and keys; a new app (admin key)

import { $, fill, api, el, errorText, state } from "./core.js";
import { route } from "./session.js";
import { field } from "./compose.js";

export async function renderApp() {
  const box = $("app-body");
  if (!state.app) {
    if (!state.admin) { fill(box, el("p", { text: "This key has no app." })); return; }
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
      fill(box, el("div", { class: "card" }, el("p", { text: "The app's first API key, shown once (only its hash is kept):" }), el("p", { class: "secret", text: r.json.api_key }),
        el("button", { type: "button", text: "Continue", onclick: () => { location.hash = "app"; route(); } })));
    });
    fill(box, await appList(), form);
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
    const r = await api("PATCH", `/v1/apps/${encodeURIComponent(state.appID)}`, { apns: { key: await file.text(), key_id: field("apns-key-id"), team_id: field("apns-team"), environment: field("apns-env") } });
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
    const r = await api("PATCH", `/v1/apps/${encodeURIComponent(state.appID)}`, { fcm: { service_account: await file.text() } });
    if (r.status !== 200) { $("fcm-error").textContent = errorText(r); return; }
    state.app = r.json.app; renderApp();
  });
  const keys = el("div", { class: "card", id: "keys" }, el("h3", { text: "API keys" }));
  const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/keys`);
  if (r.status === 200) {
    keys.append(el("table", {}, el("thead", {}, el("tr", {}, ["Key", "Scopes", "Made", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, r.json.keys.map((k) => el("tr", {}, el("td", { text: k.id }), el("td", { text: k.scopes.join(", ") }), el("td", { text: new Date(k.created_at).toLocaleString() }),
        el("td", {}, el("button", { type: "button", class: "quiet", text: "Revoke", "aria-label": `Revoke ${k.id}`, onclick: async () => {
          if (!confirm(`Revoke ${k.id}? Requests with it are refused at once.`)) return;
          const d = await api("DELETE", `/v1/apps/${encodeURIComponent(state.appID)}/keys/${encodeURIComponent(k.id)}`);
          if (d.status === 200) renderApp(); else alert(errorText(d));
        } })))))));
  } else keys.append(el("p", { class: "note", text: errorText(r) }));
  const make = el("form", { class: "row", id: "key-form" },
    el("fieldset", {}, el("legend", { text: "A new key's scopes" }),
      ["send", "manage", "read", "register"].map((s) => el("label", {}, el("input", { type: "checkbox", value: s, checked: s === "send" || s === "read", class: "check" }), ` ${s}`))),
    el("div", { class: "end" }, el("button", { type: "submit", text: "Make a key" })));
  make.addEventListener("submit", async (e) => {
    e.preventDefault();
    const scopes = [...make.querySelectorAll("input:checked")].map((i) => i.value);
    const k = await api("POST", `/v1/apps/${encodeURIComponent(state.appID)}/keys`, { scopes });
    if (k.status !== 201) { alert(errorText(k)); return; }
    await renderApp();
    $("keys").append(el("p", { text: `The new key (${k.json.id}), shown once:` }), el("p", { class: "secret", text: k.json.api_key }));
  });
  keys.append(make);
  fill(box, el("div", { class: "card" }, el("h3", { text: app.name }), el("p", { text: `${app.id} · bundle id ${app.bundle_id}${app.fcm_project_id ? " · FCM project " + app.fcm_project_id : ""}` }),
    state.admin ? el("button", { type: "button", class: "quiet", id: "switch-app", text: "Another app…", onclick: () => { leaveApp(); } }) : null),
    credentials, fcm, keys, await pushServices(), state.admin ? deleteCard(app) : null);
}

/** With the admin key: back to the list of apps. */
function leaveApp() {
  state.app = null; state.appID = null;
  sessionStorage.removeItem("richpush.app");
  location.hash = "app";
  route();
}

/** The server's apps (admin key), each to open or delete: a lost app id is found here by its name. */
async function appList() {
  const card = el("div", { class: "card", id: "apps" }, el("h3", { text: "Apps on this server" }));
  const apps = [];
  let after = "";
  for (let page = 0; page < 10; page++) {  // the first thousand
    const r = await api("GET", `/v1/apps?limit=100${after ? "&after=" + encodeURIComponent(after) : ""}`);
    if (r.status !== 200) { card.append(el("p", { class: "note", text: errorText(r) })); return card; }
    apps.push(...r.json.apps);
    if (!r.json.next_after) break;
    after = r.json.next_after;
  }
  if (!apps.length) { card.append(el("p", { class: "note", text: "No app yet: create the first below." })); return card; }
  card.append(el("table", {}, el("thead", {}, el("tr", {}, ["Name", "Id", "Bundle id", ""].map((h) => el("th", { text: h })))),
    el("tbody", {}, apps.map((a) => el("tr", { "data-app": a.id }, el("td", { text: a.name }), el("td", { text: a.id }), el("td", { text: a.bundle_id }),
      el("td", {}, el("button", { type: "button", class: "quiet", text: "Open", "aria-label": `Open ${a.name}`, onclick: () => {
        state.app = a; state.appID = a.id;
        sessionStorage.setItem("richpush.app", a.id);
        location.hash = "compose"; route();
      } })))))));
  return card;
}

/** Deleting the app (admin key): confirmed by typing its name, since everything it holds goes with it. */
function deleteCard(app) {
  const form = el("form", { class: "card danger", id: "delete-app" },
    el("h3", { text: "Delete this app" }),
    el("p", { text: `Its keys stop working at once; its devices, notifications with their outcomes, receipts and opens, live tokens and identity keys are removed for good. Type the app's name, ${app.name}, to confirm.` }),
    el("label", { for: "delete-name", text: "The app's name" }), el("input", { id: "delete-name", autocomplete: "off" }),
    el("button", { type: "submit", id: "delete-app-button", text: "Delete the app and all it holds" }), el("p", { class: "error", id: "delete-error", role: "alert" }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (field("delete-name") !== app.name) { $("delete-error").textContent = `Type ${app.name} exactly to delete it.`; return; }
    const r = await api("DELETE", `/v1/apps/${encodeURIComponent(app.id)}`);
    if (r.status !== 200) { $("delete-error").textContent = errorText(r); return; }
    leaveApp();
  });
  return form;
}

// The push services the app's deliveries went to lately, as the node that answers sees them: each one's circuit
// (open: its deliveries wait untried until a probe succeeds), its sends in flight and its bound.
async function pushServices() {
  const card = el("div", { class: "card", id: "push-services" }, el("h3", { text: "Push services" }));
  const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/push-services`);
  if (r.status !== 200) { card.append(el("p", { class: "note", text: errorText(r) })); return card; }
  const when = (t) => (t ? new Date(t).toLocaleTimeString() : "");
  if (!r.json.push_services.length) card.append(el("p", { class: "note", text: "Nothing sent through this node lately." }));
  else card.append(el("table", {}, el("thead", {}, el("tr", {}, ["Push service", "State", "In flight", "Failures in a row", "Last failure", "Next probe"].map((h) => el("th", { text: h })))),
    el("tbody", {}, r.json.push_services.map((s) => el("tr", { "data-state": s.state },
      el("td", { text: s.origin }), el("td", {}, el("span", { class: `circuit ${s.state}`, text: s.state })),
      el("td", { text: `${s.in_flight} of ${s.in_flight_limit}` }), el("td", { text: s.failures_in_a_row }),
      el("td", { text: s.last_failure || "" }), el("td", { text: when(s.retry_at) }))))));
  card.append(el("p", { class: "note", text: `This app holds ${r.json.app_in_flight} of the ${r.json.app_in_flight_limit} deliveries it may hold at once${r.json.node ? " on node " + r.json.node : ""}. An open push service gets no sends: its deliveries wait, untried, until one probe gets an answer.` }));
  return card;
}
