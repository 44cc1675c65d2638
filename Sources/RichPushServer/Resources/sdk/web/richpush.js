// RichPush for web pages: subscribes this browser to Web Push and registers it with a RichPush server.
//
//   <script src="https://push.example.com/sdk/web/richpush.js"></script>
//   <script>
//     RichPush.subscribe({
//       server: "https://push.example.com", app: "app_…", key: "<a key with the register scope only>",
//       publicKey: "<the app's VAPID public key>", worker: "/richpush-sw.js", tags: ["news"],
//       // The signed-in user, proved by the site's own backend (docs/identity.md): without a proof the browser
//       // is registered without its user.
//       userId: "u-42", identity: async (userId) => (await fetch("/push-identity", {credentials: "include"})).text(),
//     }).then((subscription) => …, (error) => …);
//   </script>
//
// The worker file lives on the site's own origin (browsers require it) and can be one line:
//   importScripts("https://push.example.com/sdk/web/sw.js");
(function (global) {
  "use strict";

  // The application server key as the browser takes it: the uncompressed P-256 point's bytes.
  function keyBytes(base64url) {
    const padded = base64url.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((base64url.length + 3) % 4);
    const raw = atob(padded);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  function required(options, name) {
    if (typeof options[name] !== "string" || options[name] === "") {
      throw new TypeError("RichPush: options." + name + " is required");
    }
    return options[name];
  }

  // Registers a subscription (a PushSubscription or its toJSON()) as a web device of the app. Resolves with the
  // server's answer ({token, provider}); rejects with the server's message when it refuses.
  async function register(subscription, options) {
    const server = required(options, "server").replace(/\/+$/, "");
    const app = required(options, "app");
    const key = required(options, "key");
    const json = typeof subscription.toJSON === "function" ? subscription.toJSON() : subscription;
    const body = { platform: "web", subscription: { endpoint: json.endpoint, keys: json.keys } };
    if (options.userId) body.user_id = String(options.userId);
    if (Array.isArray(options.tags) && options.tags.length) body.tags = options.tags.map(String);
    if (options.topics && options.topics.length) body.topics = options.topics.map(String);
    const locale = options.locale || (global.navigator && global.navigator.language);
    if (locale) body.locale = String(locale).slice(0, 35);
    // Where the browser's permission stands, in the server's words (granted is authorized, default not asked yet).
    if (typeof Notification !== "undefined") {
      const permission = { granted: "authorized", denied: "denied", default: "not_determined" }[Notification.permission];
      if (permission) body.permission = permission;
    }
    // The key in the page speaks for this browser only: its user needs the proof the site's backend signs.
    async function send(proof) {
      const headers = { authorization: "Bearer " + key, "content-type": "application/json" };
      const sent = Object.assign({}, body);
      if (proof) headers["richpush-identity"] = proof;
      else delete sent.user_id;
      return fetch(server + "/v1/apps/" + encodeURIComponent(app) + "/devices", {
        method: "POST", headers: headers, body: JSON.stringify(sent), credentials: "omit",
      });
    }
    async function prove() {
      if (!body.user_id || typeof options.identity !== "function") return null;
      const proof = await options.identity(body.user_id);
      return typeof proof === "string" && proof !== "" ? proof : null;
    }
    let proof = await prove();
    let response = await send(proof);
    // A proof refused (it expired, or the site's key changed): a fresh one, once.
    if (response.status === 401 && proof) {
      proof = await prove();
      response = await send(proof);
    }
    let answer = null;
    try { answer = await response.json(); } catch (e) { answer = null; }
    if (!response.ok) {
      const message = answer && answer.error ? answer.error.message : "HTTP " + response.status;
      const error = new Error("RichPush: the server refused the subscription: " + message);
      error.status = response.status;
      error.issues = answer && answer.error ? answer.error.issues || [] : [];
      throw error;
    }
    return answer;
  }

  // Resolves once the registration's worker is active (`navigator.serviceWorker.ready` would wait forever when
  // this page is outside the worker's scope).
  function activated(registration) {
    const worker = registration.installing || registration.waiting || registration.active;
    if (!worker || worker.state === "activated") return Promise.resolve(registration);
    return new Promise((resolve, reject) => {
      worker.addEventListener("statechange", () => {
        if (worker.state === "activated") resolve(registration);
        if (worker.state === "redundant") reject(new Error("RichPush: the service worker did not install"));
      });
    });
  }

  // Asks for permission, registers the service worker, subscribes (or reuses the subscription) and registers it.
  async function subscribe(options) {
    if (!("serviceWorker" in navigator) || !("PushManager" in global)) {
      throw new Error("RichPush: this browser has no Web Push");
    }
    const publicKey = required(options, "publicKey");
    const registration = await navigator.serviceWorker.register(options.worker || "/richpush-sw.js");
    await activated(registration);
    const permission = await Notification.requestPermission();
    if (permission !== "granted") throw new Error("RichPush: notifications are " + permission);
    let subscription = await registration.pushManager.getSubscription();
    if (!subscription) {
      // The browser asks its push service for an endpoint; one out of reach never answers in some browsers.
      const seconds = Math.max(1, Number(options.timeoutSeconds) || 30);
      let timer;
      const late = new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error("RichPush: the browser's push service did not answer within " + seconds + " s")),
          seconds * 1000
        );
      });
      try {
        subscription = await Promise.race([
          registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(publicKey) }),
          late,
        ]);
      } catch (e) {
        if (String(e.message).indexOf("RichPush:") === 0) throw e;
        throw new Error("RichPush: the browser could not subscribe (" + e.name + ": " + e.message + ")");
      } finally {
        clearTimeout(timer);
      }
    }
    await register(subscription, options);
    return subscription.toJSON();
  }

  global.RichPush = { subscribe: subscribe, register: register, keyBytes: keyBytes };
})(self);
