// RichPush's service worker: shows the notification a RichPush server sent, opens its link on a click, and posts
// the delivery report (what it showed, how long it took) to the address the message carries.
//
// On the site's origin, in the file the page registers:  importScripts("https://push.example.com/sdk/web/sw.js");
//
// The message is the server's declarative push message: {"web_push": 8030, "notification": {title, body,
// navigate, image, icon, badge, tag, renotify, silent, require_interaction, timestamp, data}, "app_badge",
// "mutable"}. Browsers that show declarative messages themselves hand it here first (mutable), so every browser
// takes the same path.
"use strict";

(function () {
  function read(event) {
    if (!event.data) return { notification: { title: "" } };
    try {
      const message = event.data.json();
      if (message && typeof message === "object") return message;
    } catch (e) {
      // Not JSON: shown as text.
    }
    return { notification: { title: event.data.text() } };
  }

  function options(n) {
    const o = { body: n.body || "", data: Object.assign({}, n.data || {}, { navigate: n.navigate || null }) };
    for (const name of ["image", "icon", "badge", "tag", "lang", "dir", "timestamp"]) {
      if (n[name] !== undefined && n[name] !== null) o[name] = n[name];
    }
    if (n.tag && n.renotify) o.renotify = true;
    if (n.silent) o.silent = true;
    if (n.require_interaction) o.requireInteraction = true;
    if (Array.isArray(n.actions)) {
      o.actions = n.actions.slice(0, 2).map((a) => ({ action: String(a.action || ""), title: String(a.title || "") }));
      // Where each button goes, for the click.
      o.data.actions = n.actions.slice(0, 2).map((a) => ({ action: String(a.action || ""), navigate: a.navigate || null }));
    }
    return o;
  }

  async function report(address, shown, started, problem) {
    const attachments = shown.image ? [{ url: shown.image, type: "image", shown_by: "browser" }] : [];
    const body = {
      report: {
        attachments: attachments,
        skipped: problem ? [{ url: "", reason: "system-refused", message: String(problem).slice(0, 200) }] : [],
        elapsed_ms: Math.max(0, Date.now() - started),
        deadline_hit: false,
        platform: "web",
        shown: shown.shown,
        title: shown.title,
      },
    };
    // text/plain needs no CORS preflight; the worker does not read the answer.
    await fetch(address, { method: "POST", body: JSON.stringify(body), mode: "no-cors", credentials: "omit" });
  }

  async function handle(event) {
    const started = Date.now();
    const message = read(event);
    const n = message.notification || {};
    const o = options(n);
    let problem = null;
    try {
      await self.registration.showNotification(String(n.title || ""), o);
    } catch (e) {
      problem = e;
    }
    if (typeof message.app_badge === "number" && self.navigator && self.navigator.setAppBadge) {
      self.navigator.setAppBadge(message.app_badge).catch(() => {});
    }
    const ours = (n.data && n.data.rp) || {};
    const address = typeof ours.receipt === "string" ? ours.receipt : "";
    // Reports go to https addresses (a sandbox on this machine: plain http on loopback).
    if (address.startsWith("https:") || /^http:\/\/(127\.0\.0\.1|localhost)[:/]/.test(address)) {
      const shown = { shown: problem === null, title: String(n.title || ""), image: problem === null ? o.image : undefined };
      try {
        await report(address, shown, started, problem);
      } catch (e) {
        // A report that cannot be posted is not retried: the notification was shown, which is what counts.
      }
    }
  }

  self.addEventListener("push", (event) => event.waitUntil(handle(event)));

  self.addEventListener("notificationclick", (event) => {
    event.notification.close();
    const data = event.notification.data || {};
    const chosen = event.action && Array.isArray(data.actions) ? data.actions.find((a) => a.action === event.action) : null;
    const url = (chosen && chosen.navigate) || data.navigate;
    if (url) event.waitUntil(self.clients.openWindow(url));
  });
})();
