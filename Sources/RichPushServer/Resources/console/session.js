// ---------------------------------------------------------------------------------------------------------------
// Signing in and moving between views

import { $, api, errorText, state } from "./core.js";
import { checkSoon } from "./compose.js";
import { openNotification } from "./outcomes.js";
import { appInsights, listNotifications, searchDevices } from "./lists.js";
import { renderApp } from "./app.js";
import { forgetShownSecrets, renderWebhooks } from "./webhooks.js";

export async function signIn(key, appID) {
  state.key = key;
  const me = await api("GET", "/v1/me");
  if (me.status !== 200) { state.key = null; throw new Error(me.status === 401 ? "this key is not one of this server's" : errorText(me)); }
  state.admin = me.json.admin;
  state.sandbox = me.json.sandbox;
  state.sandboxWebhooks = me.json.sandbox_webhooks || null;
  if (me.json.app) { state.app = me.json.app; state.appID = me.json.app.id; }
  else if (appID) {
    const app = await api("GET", `/v1/apps/${encodeURIComponent(appID)}`);
    if (app.status !== 200) { state.key = null; throw new Error(errorText(app)); }
    state.app = app.json.app; state.appID = appID;
  } else { state.app = null; state.appID = null; }
  sessionStorage.setItem("richpush.key", key);
  if (state.appID) sessionStorage.setItem("richpush.app", state.appID); else sessionStorage.removeItem("richpush.app");
}

export function signOut() {
  sessionStorage.clear();
  Object.assign(state, { key: null, appID: null, app: null, admin: false });
  location.hash = "";
  route();
}

export function show(view) {
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${view}`;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  $("nav").hidden = !state.key;
  $("signout").hidden = !state.key;
  $("who").textContent = state.key ? `${state.app ? state.app.name + " (" + state.app.id + ")" : "no app yet"} · ${state.admin ? "admin key" : "app key"}${state.sandbox ? " · sandbox" : ""}` : "";
}

/** In the compose view, whether the next send is an update in place of a notification sent before. */
export function showUpdating() {
  const u = state.updating;
  $("updating").hidden = !u;
  $("send").textContent = u ? "Send the update" : "Send";
  if (u) $("updating-text").textContent = `Updating notification ${u.id} in place: the message below goes as its next version to the devices it went to, and replaces what they show (it needs the first version's collapse id). The audience and the timing below are not used.`;
}

export async function route() {
  const hash = location.hash.slice(1);
  forgetShownSecrets();
  if (!state.key) { show("signin"); $("signin-key").focus(); return; }
  if (!state.app) { show("app"); renderApp(); return; }
  if (hash.startsWith("n/")) { show("notification"); openNotification(hash.slice(2)); return; }
  const view = ["compose", "notifications", "devices", "webhooks", "app"].includes(hash) ? hash : "compose";
  show(view);
  if (view === "compose") { showUpdating(); checkSoon(); }
  if (view === "notifications") { appInsights(); listNotifications(); }
  if (view === "devices") searchDevices();
  if (view === "webhooks") renderWebhooks();
  if (view === "app") renderApp();
}
