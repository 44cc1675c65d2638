// ---------------------------------------------------------------------------------------------------------------
// Webhooks: the app's endpoints, each with its state, and what can be done to it (a test, disable and enable, a
// new secret, a replay, deletion); a new endpoint. Needs a key with the manage scope.

import { $, fill, api, el, errorText, number, state } from "./core.js";
import { field } from "./compose.js";

const stateNames = { active: "Active", failing: "Failing", disabled: "Disabled" };
const base = () => `/v1/apps/${encodeURIComponent(state.appID)}/webhooks`;
const when = (t) => (t ? new Date(t).toLocaleString() : "never");
let generation = 0;

/** How far off a time is, said the way a person reads it ("in 8 s", "in 4 min"), with the time itself. */
function soon(t) {
  const s = Math.round((new Date(t).getTime() - Date.now()) / 1000);
  const rel = s <= 0 ? "now" : s < 90 ? `in ${s} s` : `in ${Math.round(s / 60)} min`;
  return `${rel} (${new Date(t).toLocaleTimeString()})`;
}

/** The list of the app's endpoints; `then` runs on the new list (an action's result, the focus put back). */
export async function renderWebhooks(then) {
  const box = $("webhooks-list");
  const mine = ++generation;
  $("wh-sandbox").hidden = !state.sandbox || !!state.sandboxWebhooks;
  const use = $("wh-use-sandbox");
  use.hidden = !state.sandboxWebhooks;
  // The receiver takes any name after /hooks/: "orders" here, whatever the user makes of it.
  use.onclick = () => { $("wh-url").value = state.sandboxWebhooks + "orders"; $("wh-url").focus(); };
  $("wh-url").placeholder = state.sandbox ? "https://127.0.0.1:<port>/hooks/orders" : "https://api.example.com/richpush/events";
  const r = await api("GET", base());
  if (mine !== generation) return;  // a newer listing is under way
  const heading = el("div", { class: "row" },
    el("div", { class: "grow" }, el("h3", { id: "webhooks-heading", tabindex: "-1", text: "Endpoints" })),
    el("div", { class: "end" }, el("button", { type: "button", class: "quiet", id: "webhooks-refresh", text: "Refresh", onclick: () => renderWebhooks(() => $("webhooks-refresh")?.focus()) })));
  if (r.status !== 200) {
    fill(box, heading, el("p", { class: "sev-error", text: errorText(r) }));
    $("webhook-form").hidden = r.status === 403;  // this key may not manage webhooks: nothing to add with it
    return;
  }
  $("webhook-form").hidden = false;
  const all = r.json.webhooks || [];
  // The 36 hours are the server's WebhookLimits.disableAfter.
  fill(box, heading,
    all.length ? el("p", { class: "note", text: `${number(all.length)} endpoint${all.length === 1 ? "" : "s"}. Each hears the events it subscribed to, signed with its own secret; a failing one is retried with a growing pause and disabled after 36 hours without a success.` })
      : el("p", { class: "note", id: "webhooks-empty", text: "No endpoint yet: add one below, and your backend hears this app's events as they happen." }),
    all.map(endpointView));
  if (then) then();
}

function endpointView(w) {
  const facts = [["Events", (w.events || []).join(", ")], ["Last success", when(w.last_success_at)], ["Last attempt", when(w.last_attempt_at)], ["Batch size", `${number(w.batch_size)} events a request`]];
  if (w.replay) facts.push(["Replaying", `the events recorded from ${when(w.replay.from)} to ${when(w.replay.to)}`]);
  if (w.previous_secret_until) facts.push(["Previous secret", `signs beside the new one until ${when(w.previous_secret_until)}`]);
  const label = w.description || w.url;
  const button = (action, text, onclick) => el("button", { type: "button", class: "quiet", "data-action": action, text, "aria-label": `${text}: ${label}`, onclick });
  return el("article", { class: "webhook", id: `webhook-${w.id}`, "data-webhook": w.id, "data-state": w.state, "aria-labelledby": `webhook-${w.id}-url` },
    el("h4", { class: "webhook-url", id: `webhook-${w.id}-url`, text: w.url }),
    el("p", {}, el("span", { class: `webhook-state ${w.state}`, text: stateNames[w.state] || w.state }), w.description ? ` · ${w.description}` : "", el("span", { class: "note", text: ` · ${w.id}` })),
    stateLine(w),
    el("dl", { class: "facts" }, facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])),
    el("div", { class: "actions" },
      button("test", "Send a test", () => test(w)),
      w.state === "disabled" ? button("enable", "Enable", () => setEnabled(w, true)) : button("disable", "Disable", () => setEnabled(w, false)),
      button("rotate", "Rotate the secret", () => rotate(w)),
      button("delete", "Delete", () => remove(w))),
    replayForm(w),
    el("div", { class: "webhook-result", id: `webhook-${w.id}-result`, "aria-live": "polite" }),
    el("div", { id: `webhook-${w.id}-secret`, "aria-live": "polite" }));
}

/** Why a failing or disabled endpoint is so, in words; nothing for an active one. */
function stateLine(w) {
  if (w.state === "failing") {
    return el("p", { class: "sev-error webhook-why" },
      `${number(w.failures)} failed attempt${w.failures === 1 ? "" : "s"} in a row since ${when(w.failing_since)}. Last error: `,
      el("span", { class: "webhook-error", text: w.last_error || "not recorded" }),
      w.next_attempt_at ? `. Next attempt ${soon(w.next_attempt_at)}.` : ".");
  }
  if (w.state === "disabled") {
    return el("p", { class: "webhook-why" }, `Disabled ${when(w.disabled_at)}: `, el("span", { class: "webhook-reason", text: w.disabled_reason || "no reason recorded" }),
      w.last_error ? el("span", { class: "note", text: ` (last error: ${w.last_error})` }) : null, ". Enable it to send again.");
  }
  return null;
}

/** Where an action's answer goes, on the endpoint's view as it is now drawn (a new secret has a place of its own: a
 * test sent before it is copied does not take it away). */
const result = (w) => $(`webhook-${w.id}-result`);
const focusAction = (w, action) => document.querySelector(`#webhook-${w.id} [data-action="${action}"]`)?.focus();

async function test(w) {
  fill(result(w), el("p", { text: "Sending a test event…" }));
  const r = await api("POST", `${base()}/${encodeURIComponent(w.id)}/test`);
  if (r.status !== 200) { fill(result(w), el("p", { class: "sev-error", text: errorText(r) })); return; }
  const t = r.json;
  const text = t.status !== undefined
    ? `The receiver answered ${t.status} in ${number(t.milliseconds)} ms${t.delivered ? "." : ": not a 2xx, so events would be retried."}`
    : `Not delivered after ${number(t.milliseconds)} ms: ${t.error || "no answer"}.`;
  fill(result(w), el("p", { class: `webhook-test ${t.delivered ? "ok" : "sev-error"}`, "data-status": t.status ?? "", text }),
    el("p", { class: "note", text: `Request ${t.webhook_id}: one webhook.test event, signed as every request is.` }));
}

async function setEnabled(w, enabled) {
  const r = await api("PATCH", `${base()}/${encodeURIComponent(w.id)}`, { enabled });
  if (r.status !== 200) { fill(result(w), el("p", { class: "sev-error", text: errorText(r) })); return; }
  await renderWebhooks(() => {
    fill(result(w), el("p", { class: "ok", text: enabled ? "Enabled: its failures are forgotten and it is tried at once." : "Disabled: nothing is sent to it until it is enabled." }));
    focusAction(w, enabled ? "disable" : "enable");
  });
}

async function rotate(w) {
  if (!confirm(`Make a new signing secret for ${w.url}? It is shown once; the one before keeps signing beside it for a day, while your receiver changes over.`)) return;
  const r = await api("POST", `${base()}/${encodeURIComponent(w.id)}/rotate-secret`);
  if (r.status !== 200) { fill(result(w), el("p", { class: "sev-error", text: errorText(r) })); return; }
  await renderWebhooks(() => {
    const box = $(`webhook-${w.id}-secret`);
    fill(box, secretView(r.json.secret, `The previous secret also signs until ${when(r.json.previous_secret_until)}: requests carry a signature with each.`));
    box.querySelector("button")?.focus();
  });
}

async function remove(w) {
  if (!confirm(`Delete the endpoint ${w.url}? It hears nothing more, and what it has not received yet is not sent.`)) return;
  const r = await api("DELETE", `${base()}/${encodeURIComponent(w.id)}`);
  if (r.status !== 200) { fill(result(w), el("p", { class: "sev-error", text: errorText(r) })); return; }
  await renderWebhooks(() => $("webhooks-heading").focus());
}

/** A replay of a time range, the last hour by default (the inputs are in local time). */
function replayForm(w) {
  const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
  const now = new Date();
  const id = (part) => `webhook-${w.id}-${part}`;
  const form = el("form", { class: "row replay", "aria-label": `Replay events to ${w.description || w.url}`, novalidate: true },
    el("div", {}, el("label", { for: id("from"), text: "Replay from" }), el("input", { id: id("from"), type: "datetime-local", value: local(new Date(now - 3600000)) })),
    el("div", {}, el("label", { for: id("to"), text: "To" }), el("input", { id: id("to"), type: "datetime-local", value: local(now) })),
    el("div", { class: "end" }, el("button", { type: "submit", "data-action": "replay", text: "Replay" })));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const stamp = (v) => (v && !Number.isNaN(new Date(v).getTime()) ? new Date(v).toISOString() : undefined);
    const r = await api("POST", `${base()}/${encodeURIComponent(w.id)}/replay`, { from: stamp(field(id("from"))), to: stamp(field(id("to"))) });
    if (r.status !== 202) { fill(result(w), el("p", { class: "sev-error", text: errorText(r) })); return; }
    await renderWebhooks(() => {
      fill(result(w), el("p", { class: "ok webhook-replayed", text: `Replaying the events recorded from ${when(r.json.replay.from)} to ${when(r.json.replay.to)}, in order, after what is pending.` }));
      focusAction(w, "replay");
    });
  });
  return form;
}

/** A secret shown once, with a copy button: the server keeps it to sign with and never shows it again. */
function secretView(secret, note) {
  const said = el("span", { class: "note", role: "status" });
  const value = el("p", { class: "secret webhook-secret", text: secret });
  const copy = el("button", { type: "button", class: "quiet", "data-action": "copy", text: "Copy the secret", onclick: async () => {
    try { await navigator.clipboard.writeText(secret); said.textContent = "Copied."; }
    catch {
      // The browser may refuse (no focus, no permission): the secret is selected for the keyboard's copy instead.
      getSelection().selectAllChildren(value);
      said.textContent = "The browser did not let the page copy: the secret is selected, copy it with the keyboard.";
    }
  } });
  return el("div", { class: "secret-card", role: "group", "aria-label": "The signing secret" },
    el("p", {}, el("strong", { text: "The signing secret, shown once." }), " Keep it where your receiver verifies signatures: it is not shown again (rotate it to get a new one)."),
    value, el("div", { class: "actions" }, copy, said), note ? el("p", { class: "note", text: note }) : null);
}

// ---------------------------------------------------------------------------------------------------------------
// A new endpoint

/** Problems named as the API names them: beside their field (by its path) and listed with their rule. */
function markIssues(issues) {
  const form = $("webhook-form");
  for (const old of form.querySelectorAll(".field-issue")) old.remove();
  for (const input of form.querySelectorAll("[aria-invalid]")) { input.removeAttribute("aria-invalid"); input.removeAttribute("aria-describedby"); }
  issues.forEach((issue, i) => {
    const path = (issue.path || "").replace(/\[\d+\]$/, "");
    const target = path && form.querySelector(`[data-path="${path}"]`);
    if (!target) return;
    const id = `wh-issue-${i}`;
    if (target.tagName === "FIELDSET") target.append(el("p", { class: "field-issue", id, text: issue.message }));
    else { target.setAttribute("aria-invalid", "true"); target.insertAdjacentElement("afterend", el("p", { class: "field-issue", id, text: issue.message })); }
    target.setAttribute("aria-describedby", id);
  });
  fill($("wh-issues"), issues.map((i) => el("li", { class: "sev-error" }, `Error: ${i.path ? i.path + " — " : ""}${i.message}${i.rule ? " [" + i.rule + "]" : ""}`)));
}

export async function addWebhook() {
  const body = { url: field("wh-url"), events: [...document.querySelectorAll("#wh-events input:checked")].map((i) => i.value) };
  if (field("wh-description")) body.description = field("wh-description");
  if (field("wh-batch")) {
    const n = Number(field("wh-batch"));
    if (!Number.isInteger(n)) { markIssues([{ path: "batch_size", message: "batch_size is a whole number of events, 1 to 1000" }]); return; }
    body.batch_size = n;
  }
  fill($("wh-created"));
  const r = await api("POST", base(), body);
  if (r.status !== 201) {
    markIssues(r.json && r.json.error && r.json.error.issues ? r.json.error.issues : [{ path: "", message: errorText(r) }]);
    return;
  }
  markIssues([]);
  for (const id of ["wh-url", "wh-description", "wh-batch"]) $(id).value = "";
  fill($("wh-created"), el("p", { class: "ok", id: "wh-created-what", text: `Added ${r.json.url} (${r.json.id}).` }), secretView(r.json.secret));
  await renderWebhooks(() => $("wh-created").querySelector("button")?.focus());
}

/** Any move between views (signing out too) forgets the secrets shown: shown once means once. */
export function forgetShownSecrets() {
  fill($("wh-created"));
  for (const shown of document.querySelectorAll("#webhooks-list .secret-card")) shown.remove();
  markIssues([]);
}
