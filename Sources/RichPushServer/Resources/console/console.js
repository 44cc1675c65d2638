// The RichPush console: one page, plain modules, no build step and nothing fetched from elsewhere. Every figure it
// shows comes from the server's own checks (a dry run of the send, the media preflight, the device simulator).

// ---------------------------------------------------------------------------------------------------------------
// Wiring

import { $, state } from "./core.js";
import { route, showUpdating, signIn, signOut } from "./session.js";
import { checkSoon, field, markEdited, preflight, upload } from "./compose.js";
import { send, testSend } from "./send.js";
import { addState, sendSeries } from "./live.js";
import { stopFollowing } from "./outcomes.js";
import { searchDevices } from "./lists.js";
import { addWebhook } from "./webhooks.js";

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
  compose.addEventListener("input", (e) => { if (e.target.id !== "f-test-token") { markEdited(); checkSoon(); } if (e.target.id === "f-media") preflight(); });
  compose.addEventListener("change", (e) => { if (e.target.id !== "f-test-token") markEdited(); checkSoon(); });
  compose.addEventListener("submit", (e) => e.preventDefault());
  $("test-send").addEventListener("click", testSend);
  $("send").addEventListener("click", send);
  $("updating-cancel").addEventListener("click", () => { state.updating = null; showUpdating(); });
  $("live-add").addEventListener("click", addState);
  $("live-send").addEventListener("click", sendSeries);
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); if (e.dataTransfer.files[0]) upload(e.dataTransfer.files[0]); });
  drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); $("f-file").click(); } });
  $("f-file").addEventListener("change", (e) => { if (e.target.files[0]) upload(e.target.files[0]); });
  $("devices-search").addEventListener("submit", (e) => { e.preventDefault(); searchDevices(); });
  $("webhook-form").addEventListener("submit", (e) => { e.preventDefault(); addWebhook(); });
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
  window.addEventListener("hashchange", () => { stopFollowing(); route(); });
}

async function start() {
  wire();
  if (state.key) {
    try { await signIn(state.key, state.appID); } catch { sessionStorage.clear(); state.key = null; }
  }
  route();
}

start();
