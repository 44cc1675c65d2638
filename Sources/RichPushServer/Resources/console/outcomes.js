// ---------------------------------------------------------------------------------------------------------------
// A notification's outcomes and funnel, updated live from the server's event stream (no polling: the server reads
// the numbers once per turn for every watcher)

import { $, fill, api, debounce, el, errorText, number, state } from "./core.js";

export let following = null;
let reading = null;
const SVG = "http://www.w3.org/2000/svg";
const shortNames = { provider_accepted: "By the service", received: "On the device" };
const stageNames = { accepted: "Accepted", sent: "Sent", provider_accepted: "Accepted by the service", received: "Received on the device", media_shown: "Media shown", opened: "Opened" };

export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  for (const c of children.flat()) if (c) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

/** What an empty chart says, in its middle: a chart with no data is not a blank box. */
function nothingYet(chart, width, height, text = "Nothing yet") {
  chart.append(svg("text", { x: width / 2, y: height / 2, class: "chart-label empty", "text-anchor": "middle", "data-empty": "true" }, text));
  return chart;
}

const percent = (r) => (r === null || r === undefined ? "—" : `${(r * 100).toFixed(r >= 0.1 ? 0 : 1)}%`);

/** The funnel: one bar per stage, its length the stage's share of those accepted. */
export function funnelChart(funnel, width = 600) {
  const stages = funnel.stages || [];
  const accepted = Math.max(1, (stages[0] || {}).count || 0);
  // Drawn at the width it is shown at, so that its text stays readable on a phone.
  const rowH = 34, labelW = width < 480 ? 150 : 190;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${stages.length * rowH + 6}`, class: "chart funnel", role: "img", id: "funnel-chart",
    "aria-label": stages.map((s) => `${stageNames[s.stage] || s.stage} ${s.count}`).join(", ") || "Nothing yet" });
  if (!stages.length) {
    chart.setAttribute("viewBox", `0 0 ${width} 60`);
    return nothingYet(chart, width, 60);
  }
  stages.forEach((s, i) => {
    const w = Math.max(2, ((width - labelW - 10) * s.count) / accepted);
    const y = i * rowH + 3;
    chart.append(svg("g", { class: "funnel-stage", "data-stage": s.stage, "data-count": String(s.count) },
      svg("title", {}, `${stageNames[s.stage] || s.stage}: ${s.count}${i ? `, ${percent(s.rate)} of the stage before` : ""}`),
      svg("text", { x: 0, y: y + 20, class: "chart-label" }, (width < 480 && shortNames[s.stage]) || stageNames[s.stage] || s.stage),
      svg("rect", { x: labelW, y, width: w, height: rowH - 8, rx: 3, class: `bar stage-${i}` }),
      svg("text", { x: labelW + w + 6 > width - 100 ? labelW + 6 : labelW + w + 6, y: y + 18, class: labelW + w + 6 > width - 100 ? "chart-value inside" : "chart-value" },
        `${number(s.count)}${i ? " · " + percent(s.rate) : ""}`)));
  });
  return chart;
}

/** Counts over time while the view was open: sent and accepted by the service, received, opened. */
export function timeChart(series, width = 600) {
  const height = 160, pad = 48;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart over-time", role: "img", id: "delivered-chart",
    "aria-label": series.length ? `Deliveries over ${series[series.length - 1][0] - series[0][0]} s` : "No deliveries yet" });
  if (series.length < 1) return nothingYet(chart, width, height, "Nothing yet: counts appear here as they change while this page is open");
  const t0 = series[0][0], t1 = Math.max(t0 + 1, series[series.length - 1][0]);
  const top = Math.max(1, ...series.map((p) => Math.max(p[1], p[2])));
  const x = (t) => pad + ((width - pad - 8) * (t - t0)) / (t1 - t0);
  const y = (v) => height - pad - ((height - pad - 8) * v) / top;
  chart.append(svg("line", { x1: pad, y1: height - pad, x2: width - 8, y2: height - pad, class: "axis" }));
  chart.append(svg("text", { x: pad, y: height - 10, class: "chart-label small" }, "0 s"));
  chart.append(svg("text", { x: width - 8, y: height - 10, class: "chart-label small end" }, `${t1 - t0} s`));
  chart.append(svg("text", { x: pad - 4, y: 16, class: "chart-label small end" }, number(top)));
  ["sent", "delivered", "received", "opened"].forEach((name, k) => {
    const points = series.map((p) => `${x(p[0]).toFixed(1)},${y(p[k + 1]).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { points, class: `line line-${name}`, "data-series": name, "data-last": String(series[series.length - 1][k + 1]) }));
  });
  return chart;
}

/** Opens per 10 minutes. */
export function opensChart(buckets, width = 600) {
  const height = 120, pad = 24;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart opens", role: "img", id: "opens-chart",
    "aria-label": `${buckets.reduce((a, b) => a + b[1], 0)} opens over ${buckets.length} ten-minute spans` });
  if (!buckets.length) return nothingYet(chart, width, height, "No opens yet");
  const first = buckets[0][0], last = buckets[buckets.length - 1][0];
  const spans = Math.max(1, (last - first) / 600 + 1);
  const top = Math.max(1, ...buckets.map((b) => b[1]));
  const w = Math.max(2, (width - 8) / spans - 2);
  for (const [start, n] of buckets) {
    const h = ((height - pad - 6) * n) / top;
    const x = 4 + ((start - first) / 600) * ((width - 8) / spans);
    chart.append(svg("rect", { x, y: height - pad - h, width: w, height: h, class: "bar opens-bar", "data-count": String(n) },
      svg("title", {}, `${new Date(start * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}: ${n} opens`)));
  }
  chart.append(svg("text", { x: 4, y: height - 6, class: "chart-label small" }, new Date(first * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })));
  return chart;
}

/** An app's hours from `from` to `to` (the starts of the first and the last, in seconds): per hour, three bars side
 * by side (accepted, delivered by the service, opened); an hour without any is an empty slot. */
export function hoursChart(hours, width = 600, from = null, to = null) {
  const height = 150, pad = 22, kinds = ["accepted", "delivered", "opened"];
  const total = (k) => hours.reduce((a, h) => a + (h[k] || 0), 0);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart hours", role: "img", id: "hours-chart",
    "aria-label": hours.length ? kinds.map((k) => `${number(total(k))} ${k}`).join(", ") + ` over ${hours.length} hours` : "Nothing in these hours" });
  chart.append(svg("line", { x1: 0, y1: height - pad, x2: width, y2: height - pad, class: "axis" }));
  if (!hours.length) return nothingYet(chart, width, height, "Nothing in these hours");
  const first = Math.min(from ?? hours[0].hour, hours[0].hour), last = Math.max(to ?? 0, hours[hours.length - 1].hour);
  const spans = Math.max(1, (last - first) / 3600 + 1);
  const slot = width / spans, w = Math.max(1, slot / 3 - 1);
  const top = Math.max(1, ...hours.map((h) => Math.max(...kinds.map((k) => h[k] || 0))));
  for (const h of hours) {
    const x0 = ((h.hour - first) / 3600) * slot;
    const g = svg("g", { class: "hour", "data-hour": String(h.hour) }, svg("title", {},
      `${new Date(h.hour * 1000).toLocaleString([], { weekday: "short", hour: "2-digit", minute: "2-digit" })}: ` + kinds.map((k) => `${number(h[k] || 0)} ${k}`).join(", ")));
    kinds.forEach((k, i) => {
      const v = h[k] || 0, bh = ((height - pad - 8) * v) / top;
      g.append(svg("rect", { x: (x0 + i * (w + 1)).toFixed(1), y: (height - pad - bh).toFixed(1), width: w.toFixed(1), height: bh.toFixed(1), class: `bar hours-${k}`, "data-kind": k, "data-count": String(v) }));
    });
    chart.append(g);
  }
  const time = (t) => new Date(t * 1000).toLocaleString([], { weekday: "short", hour: "2-digit", minute: "2-digit" });
  chart.append(svg("text", { x: 0, y: height - 6, class: "chart-label small" }, time(first)));
  chart.append(svg("text", { x: width, y: height - 6, class: "chart-label small end" }, time(last)));
  chart.append(svg("text", { x: 2, y: 12, class: "chart-label small" }, `highest: ${number(top)}`));
  return chart;
}

/** Reads `text/event-stream` from a fetch (EventSource cannot send the key), calling `onEvent` with each event's data. */
async function readEvents(path, onEvent, isCurrent) {
  reading = new AbortController();
  let response;
  try {
    response = await fetch(path, { headers: { Authorization: `Bearer ${state.key}`, Accept: "text/event-stream" }, signal: reading.signal });
  } catch { return { status: 0 }; }
  if (response.status !== 200) {
    let json = null;
    try { json = await response.json(); } catch { json = null; }
    return { status: response.status, json };
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (isCurrent()) {
    let chunk;
    try { chunk = await reader.read(); } catch { break; }
    const { value, done } = chunk;
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (data) { try { onEvent(JSON.parse(data)); } catch { /* a broken event is skipped */ } }
    }
  }
  reader.cancel().catch(() => {});
  return { status: 200 };
}

export async function openNotification(id) {
  const box = $("notification-body");
  const token = {};
  following = token;
  let latest = null;
  let deliveries = [];
  let listedAt = 0;
  // The page of deliveries shown: 100 at a time, after the delivery id that ended the page before.
  const pages = [0];
  let nextAfter = null;
  // Its family when it was updated in place: the first version's id, its version and the newest.
  let family = null;
  // What it was and when it was sent, from the outcomes page.
  let heading = null;
  const draw = (n) => {
    const c = n.counts || {};
    const funnel = n.funnel || { stages: [] };
    const failed = {};
    for (const s of funnel.stages || []) if (s.stage === "provider_accepted") Object.assign(failed, s.drops || {});
    const width = Math.max(300, Math.min(720, (box.clientWidth || 640) - 40));
    fill(box, 
      heading ? el("p", { class: "note", id: "notification-sent", text: `Sent ${new Date(heading.created_at * 1000).toLocaleString()}` }) : null,
      el("p", { class: "note", id: "notification-version", text: `Notification ${n.id}` + (family ? ` · version ${family.version}, the newest ${family.latest_version} (the first: ${family.root_id})` : "") }),
      el("button", { type: "button", id: "update-in-place", class: "quiet", text: "Update it in place", onclick: () => { state.updating = { id: (family && family.root_id) || n.id }; location.hash = "compose"; } }),
      el("div", { class: "counts", id: "counts" }, ["queued", "leased", "delivered", "failed", "pruned", "expired", "superseded"].map((s) =>
        el("div", { class: "count", "data-state": s }, el("b", { text: number(c[s] || 0) }), s))),
      el("p", { text: `${number(n.total || 0)} deliver${n.total === 1 ? "y" : "ies"} in all.` + (Object.keys(failed).length ? ` Not delivered, by reason: ${Object.entries(failed).map(([r, k]) => `${r} ${k}`).join(", ")}.` : "") }),
      el("h3", { text: "Funnel" }),
      funnelChart(funnel, width),
      el("p", { id: "funnel-notes", class: "note", text: `Dismissed: ${number(funnel.dismissed || 0)}.` + (Object.keys(funnel.actions || {}).length ? ` Opened by: ${Object.entries(funnel.actions).map(([a, k]) => `${a === "default" ? "the notification" : a} ${k}`).join(", ")}.` : "")
        + (Object.keys(funnel.links || {}).length ? ` Deep links followed: ${Object.entries(funnel.links).sort((a, b) => b[1] - a[1]).map(([l, k]) => `${l} ${k}`).join(", ")}.` : "") }),
      el("h3", { text: "While you watched" }),
      timeChart(n.series || [], width),
      el("p", { class: "legend note" }, el("span", { class: "key line-sent" }), " sent ", el("span", { class: "key line-delivered" }), " accepted by the service ",
        el("span", { class: "key line-received" }), " received ", el("span", { class: "key line-opened" }), " opened"),
      el("h3", { text: "Opens, per 10 minutes" }),
      opensChart(n.opens_over_time || [], width),
      el("table", { id: "deliveries" }, el("caption", { text: `Deliveries ${number((pages.length - 1) * 100 + 1)} to ${number((pages.length - 1) * 100 + deliveries.length)}` }),
        el("thead", {}, el("tr", {}, ["Target", "Provider", "State", "Reason", "Attempts", "Changed", "Next try"].map((h) => el("th", { text: h })))),
        el("tbody", {}, deliveries.map((d) => el("tr", {}, el("td", { text: d.target }), el("td", { text: d.provider }), el("td", { text: d.state }),
          el("td", { class: "reason" }, d.reason ? el("b", { text: d.reason }) : null, d.meaning ? el("span", { class: "note", text: " " + d.meaning }) : null),
          el("td", { class: "num", text: d.attempts }),
          el("td", { text: d.updated_at ? new Date(d.updated_at * 1000).toLocaleTimeString() : "" }),
          el("td", { text: d.next_attempt_at ? new Date(d.next_attempt_at * 1000).toLocaleTimeString() : "" }))))),
      el("div", { class: "row" },
        pages.length > 1 ? el("button", { type: "button", id: "deliveries-back", text: "Previous 100", onclick: () => turn(-1) }) : null,
        nextAfter !== null ? el("button", { type: "button", id: "deliveries-next", text: "Next 100", onclick: () => turn(1) }) : null)
    );
  };
  const list = async () => {
    // One small page, now and then: the numbers come from the stream.
    listedAt = Date.now();
    const r = await api("GET", `/v1/apps/${encodeURIComponent(state.appID)}/notifications/${encodeURIComponent(id)}?limit=100&after=${pages[pages.length - 1]}`);
    if (r.status === 200) {
      deliveries = r.json.deliveries || []; nextAfter = r.json.next_after ?? null;
      heading = { title: r.json.title, created_at: r.json.created_at };
      $("notification-title").textContent = r.json.title ? `“${r.json.title}”` : "Notification (no title)";
      family = r.json.root_id ? { root_id: r.json.root_id, version: r.json.version, latest_version: r.json.latest_version } : null;
    }
  };
  const turn = async (step) => {
    if (step > 0 && nextAfter !== null) pages.push(nextAfter); else if (step < 0 && pages.length > 1) pages.pop();
    await list();
    if (following === token && latest) draw(latest);
  };
  // The charts are drawn at the width they are shown at: again when the window changes.
  window.onresize = debounce(() => { if (following === token && latest) draw(latest); }, 150);
  await list();
  const path = `/v1/apps/${encodeURIComponent(state.appID)}/notifications/${encodeURIComponent(id)}/events`;
  while (following === token) {
    const r = await readEvents(path, (n) => {
      if (following !== token) return;
      latest = n;
      draw(n);
      if (Date.now() - listedAt > 5000) list().then(() => { if (following === token && latest) draw(latest); });
    }, () => following === token);
    if (following !== token) return;
    if (r.status !== 200 && r.status !== 0) {
      if (r.status === 429) { await new Promise((resolve) => setTimeout(resolve, 5000)); continue; }
      fill(box, el("p", { class: "sev-error", text: errorText(r) }));
      return;
    }
    // The stream ended (the server restarted): look again shortly.
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

/** Stops updating the open notification (the view changed). */
export function stopFollowing() {
  following = null;
  window.onresize = null;
  if (reading) reading.abort();
  reading = null;
}
