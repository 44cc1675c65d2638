// ---------------------------------------------------------------------------------------------------------------
// Previews: what each device will show, from the message as it would be sent

import { $, fill, el, number, state } from "./core.js";

export function imageOf(sent) {
  const media = sent && sent.media;
  const first = Array.isArray(media) ? media[0] : media;
  const url = first && (first.url || first);
  const kind = first && first.kind;
  return typeof url === "string" && (!kind || kind === "image" || kind === "gif") ? url : null;
}

export function notificationCard({ title, subtitle, body, thumb, big, collapsed, app }) {
  return el("div", { class: `notif ${collapsed ? "collapsed" : "expanded"}` },
    el("div", { class: "head" }, el("span", { class: "icon", "aria-hidden": "true" }), app, " · now"),
    big ? el("img", { class: "big", src: big, alt: "the attachment" }) : null,
    el("div", { class: "main" },
      el("div", { class: "text" },
        title ? el("div", { class: "t", text: title }) : null,
        subtitle ? el("div", { class: "s", text: subtitle }) : null,
        body ? el("div", { class: "b", text: body }) : null),
      thumb ? el("img", { class: "thumb", src: thumb, alt: "thumbnail" }) : null));
}

export function render(message, dry) {
  const sent = (dry && dry.message) || message;
  const title = sent.alert ? sent.alert.title : sent.title;
  const subtitle = sent.alert ? sent.alert.subtitle : sent.subtitle;
  const body = sent.alert ? (typeof sent.alert === "string" ? sent.alert : sent.alert.body) : sent.body;
  const picture = imageOf(sent);
  const chart = sent.chart_image_url || null;
  const app = state.app ? state.app.name : "App";
  const shown = picture || chart;

  // A Live Activity: the Lock Screen's card instead of a notification (on Android and the web, the notification
  // below, replaced by each state).
  if (sent.live_activity) {
    fill($("panel-ios"), liveCard(sent, title, body, chart, app));
    renderOthers(sent, dry, { title, subtitle, body, shown, app });
    return;
  }

  // iOS: the first attachment is the thumbnail collapsed and the picture expanded; a chart is drawn by the
  // extension with the same renderer as the server's PNG.
  const ios = $("panel-ios");
  fill(ios, 
    el("div", { class: "device" },
      el("p", { class: "clock", text: "9:41" }),
      notificationCard({ title, subtitle, body, thumb: shown, collapsed: true, app }),
      el("p", { class: "caption", text: "Lock screen" }),
      notificationCard({ title, subtitle, body, big: shown, collapsed: false, app }),
      el("p", { class: "caption", text: "Expanded (long press)" })),
    chart ? el("p", { class: "note", text: picture
      ? "The picture is the thumbnail and the attachment; the chart is attached second. Below, the chart as the iPhone draws it: the server's PNG, the same bytes as the device library's."
      : "The chart, drawn by the iPhone's device library, is the attachment; the server's PNG of it is the same bytes." }) : null,
    chart && picture ? el("img", { class: "big", src: chart, alt: "the chart as drawn", id: "chart-preview" }) : null);
  if (chart && !picture) ios.querySelector(".big").id = "chart-preview";

  renderOthers(sent, dry, { title, subtitle, body, shown, app });
}

/// The Lock Screen's Live Activity: the state's values, its chart (the server's PNG of the same spec), and what the
/// event does to it.
export function liveCard(sent, title, body, chart, app) {
  const live = sent.live_activity;
  const values = Object.entries(live.content_state || {}).filter(([k]) => k !== "chart");
  const what = { start: "Starts the activity (push-to-start)", update: "Replaces the activity's state", end: "Ends the activity" }[live.event] || live.event;
  const dates = [];
  if (live.stale_date) dates.push(`out of date at ${new Date(live.stale_date * 1000).toLocaleTimeString()}`);
  if (live.dismissal_date) dates.push(`gone at ${new Date(live.dismissal_date * 1000).toLocaleTimeString()}`);
  return el("div", { class: "device" },
    el("p", { class: "clock", text: "9:41" }),
    el("div", { class: `live-card ${live.event === "end" ? "ended" : ""}`, id: "live-card", "data-event": live.event },
      el("div", { class: "head" }, el("span", { class: "icon", "aria-hidden": "true" }), app, live.attributes_type ? ` · ${live.attributes_type}` : ""),
      el("dl", {}, ...values.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: typeof v === "string" ? v : JSON.stringify(v) })])),
      chart ? el("img", { class: "big", src: chart, alt: "the chart as the widget draws it", id: "chart-preview" }) : null,
      title || body ? el("p", { class: "alert", text: [title, body].filter(Boolean).join(" — ") }) : null),
    el("p", { class: "caption", text: `${what}${dates.length ? "; " + dates.join(", ") : ""}` }));
}

function renderOthers(sent, dry, { title, subtitle, body, shown, app }) {
  const android = $("panel-android");
  fill(android, el("div", { class: "device android" },
    el("p", { class: "clock", text: "9:41" }),
    notificationCard({ title, body, thumb: shown, collapsed: true, app }),
    el("p", { class: "caption", text: "Collapsed" }),
    notificationCard({ title, body, big: shown, collapsed: false, app }),
    el("p", { class: "caption", text: "Expanded (big picture)" })),
    subtitle ? el("p", { class: "note", text: "Android shows no subtitle." }) : null);

  // A browser shows the server's Web Push message: from the dry run's request when there is one.
  const requests = (dry && dry.requests) || {};
  const webMessage = requests.webpush && requests.webpush.payload && requests.webpush.payload.notification;
  const w = webMessage || { title, body, image: shown };
  const site = webMessage && webMessage.navigate ? new URL(webMessage.navigate).host : location.host;
  const web = $("panel-web");
  fill(web, 
    el("div", { class: "device web" },
      notificationCard({ title: w.title, body: w.body, big: w.image, collapsed: false, app: site }),
      el("p", { class: "caption", text: "Where the browser shows the image option" }),
      notificationCard({ title: w.title, body: w.body, collapsed: true, app: site }),
      el("p", { class: "caption", text: "Where it does not: title and body" })),
    el("p", { class: "note", id: "web-navigate", text: webMessage
      ? (webMessage.navigate ? `A click opens ${webMessage.navigate}.` : "No https deep link and no default page for the app: the service worker shows it, and a click opens nothing.")
      : "The browser's message appears once the message is valid." }),
    webMessage && !dry.message.deep_link && webMessage.navigate ? el("p", { class: "note", text: "The link is the app's default page (no https deep link in the message)." }) : null);

  const tag = (dry && dry.message && dry.message.id) || "";
  const sentPanel = $("panel-sent");
  fill(sentPanel, 
    requests.apns ? el("h4", { text: `APNs: POST ${requests.apns.path} (${number(requests.apns.bytes)} bytes)` }) : null,
    requests.apns ? el("pre", { id: "sent-apns", "data-dry-run": tag, text: JSON.stringify({ headers: requests.apns.headers, payload: requests.apns.payload }, null, 2) }) : null,
    requests.fcm ? el("h4", { text: `FCM: POST ${requests.fcm.path} (${number(requests.fcm.bytes)} bytes)` }) : null,
    requests.fcm ? el("pre", { id: "sent-fcm", "data-dry-run": tag, text: JSON.stringify(requests.fcm.body, null, 2) }) : null,
    requests.webpush ? el("h4", { text: `Web Push: POST to each subscription's endpoint (${number(requests.webpush.bytes)} bytes before encryption, ${number(requests.webpush.bytes_encrypted)} after)` }) : null,
    requests.webpush ? el("pre", { id: "sent-webpush", "data-dry-run": tag, text: JSON.stringify({ headers: requests.webpush.headers, payload: requests.webpush.payload }, null, 2) }) : null,
    dry ? el("h4", { text: "The message as the server would send it (its id, receipt address, hosted media and chart image set)" }) : null,
    dry ? el("pre", { id: "sent-message", "data-dry-run": tag, text: JSON.stringify(dry.message, null, 2) }) : null,
    !dry ? el("p", { class: "note", text: "Fix the problems listed to see the exact requests." }) : null);

  // Payload sizes against each provider's limit (the receipt address included: it is in the payload as sent).
  const gauges = [];
  const gauge = (name, bytes, limit) => el("div", { class: "gauge" },
    el("span", { text: name }), el("meter", { min: 0, max: limit, low: limit * 0.75, high: limit * 0.9, optimum: 0, value: bytes, "aria-label": `${name}: ${bytes} of ${limit} bytes` }),
    el("span", { text: `${number(bytes)} / ${number(limit)} B` }));
  if (requests.apns) gauges.push(gauge("APNs payload", requests.apns.bytes, 4096));
  if (requests.fcm) {
    const topic = /"(topic|condition)"/.test(JSON.stringify(requests.fcm.body.message ? Object.keys(requests.fcm.body.message) : []));
    gauges.push(gauge(`FCM message${topic ? " (topic)" : ""}`, requests.fcm.bytes, topic ? 2048 : 4096));
  }
  if (requests.webpush) gauges.push(gauge("Web Push payload", requests.webpush.bytes, 3993));
  fill($("gauges"), ...gauges);
}
