// The operator page's refresh: polls /status every second and rebuilds the page's parts
// with the same element ids as the server render (src/ops/ui/render.rs). Every value is
// set with textContent; nothing from the server is ever parsed as markup.
"use strict";

const OUTCOME_GROUPS = [
  ["legs", "Downstream legs"],
  ["deliveries", "Terminal deliveries"],
  ["notifications", "Notification deliveries"],
  ["dropped", "Dropped commands"],
];

// The log events shown (src/ops/ui.rs EVENTS_SHOWN).
const EVENTS_SHOWN = 50;

const RECEIPT_COLUMNS = [
  "finished_at", "request_id", "channel", "method", "leg_outcome", "delivery_outcome", "fatal_category", "message",
];

function text(v) {
  if (v === null || v === undefined) return "none";
  if (v === true) return "yes";
  if (v === false) return "no";
  return String(v);
}

function seconds(v) {
  return typeof v === "number" ? v.toFixed(1) + " s" : "none";
}

function el(tag, props, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children || []) e.appendChild(c);
  return e;
}

function setText(id, value) {
  const e = document.getElementById(id);
  if (e) e.textContent = value;
}

// facts: [key, label, value]; the list's values get ids PREFIX-KEY.
function facts(listId, prefix, list) {
  const dl = document.getElementById(listId);
  if (!dl) return;
  dl.replaceChildren(...list.map(([key, label, value]) =>
    el("div", {}, [el("dt", { text: label }), el("dd", { id: prefix + "-" + key, text: value })])));
}

function fenceFacts(f) {
  return [
    ["held", "Fence", f.held ? "held" : "free"],
    ["request-id", "Request id", text(f.request_id)],
    ["channel", "Channel", text(f.channel)],
    ["leg", "Leg", text(f.leg)],
    ["held-for", "Held for", seconds(f.held_seconds)],
  ];
}

function latchFacts(doc) {
  const f = doc.fatal || {};
  const p = doc.persisted_cause || {};
  const c = (doc.coordination && doc.coordination.latch) || {};
  return [
    ["category", "Category", text(f.category)],
    ["exit-code", "Exit code", text(f.exit_code)],
    ["request-id", "Request id", text(f.request_id)],
    ["channel", "Channel", text(f.channel)],
    ["method", "Method", text(f.method)],
    ["latched-at", "Latched at", text(f.latched_at)],
    ["persisted", "Latch file written", text(f.persisted)],
    ["persisted-category", "Earlier run's cause", text(p.category)],
    ["persisted-exit-code", "Its exit code", text(p.exit_code)],
    ["persisted-request-id", "Its request id", text(p.request_id)],
    ["cluster", "Cluster-wide latch", text(c.category)],
    ["cluster-by", "Set by replica", text(c.latched_by)],
  ];
}

function controlPlaneFacts(doc) {
  const cp = doc.control_plane || {};
  const cmd = doc.commands || {};
  return [
    ["last-poll", "Last successful poll", text(cp.last_successful_poll_at)],
    ["poll-age", "Age of that poll", seconds(cp.last_successful_poll_age_seconds)],
    ["errors", "Consecutive poll errors", text(cp.consecutive_poll_errors)],
    ["last-error", "Last poll error", text(cp.last_poll_error_kind)],
    ["last-acked", "Last acknowledged delivery", text(cp.last_acked_at)],
    ["in-flight", "Commands in flight", text(cmd.in_flight)],
    ["queued", "Commands queued", text(cmd.queued)],
  ];
}

function coordinationFacts(c) {
  return [
    ["backend", "Backend", text(c.backend)],
    ["role", "Role", text(c.role)],
    ["holder", "Lease holder", text(c.holder)],
    ["lease-ttl", "Lease TTL", seconds(c.lease_ttl_seconds)],
    ["unsettled", "Unsettled intents", text(c.unsettled)],
    ["step-downs", "Step-downs", text(c.step_downs)],
    ["holding-off", "Holding off campaigning", seconds(c.holding_off_seconds)],
    ["cp-reachable", "Control plane reachable", text(c.control_plane_reachable)],
  ];
}

function harpoonFacts(h) {
  const targets = (h.targets || []).map((t) =>
    text(t.label) + " (" + text(t.origin) +
    (t.template ? ", template: " + (t.template.parameters || []).map(text).join(" ") : "") + ")");
  return [
    ["routable", "Routable", text(h.routable)],
    ["target-count", "Targets", text(targets.length)],
    ["targets", "Target labels", targets.length ? targets.join(", ") : "none"],
  ];
}

function channelCells(ch) {
  const up = ch.up ? "up" : "down";
  const state = ch.session ? up + " (session " + ch.session + ")" : up;
  let server = "none";
  if (ch.server && ch.server.name !== null && ch.server.name !== undefined) {
    server = ch.server.version === null || ch.server.version === undefined
      ? text(ch.server.name) : text(ch.server.name) + " " + text(ch.server.version);
  }
  return [
    ["c-channel", text(ch.channel)],
    ["c-transport", text(ch.transport)],
    ["c-state", state],
    ["c-generation", text(ch.generation)],
    ["c-server", server],
    ["c-last-command", text(ch.last_command_at)],
    ["c-last-success", text(ch.last_success_at)],
  ];
}

function channels(list) {
  const body = document.getElementById("channel-rows");
  body.replaceChildren(...(list || []).map((ch) =>
    el("tr", { class: "channel-" + (ch.up ? "up" : "down") },
      channelCells(ch).map(([cls, value]) => el("td", { class: cls, text: value })))));
}

function receipts(list) {
  document.getElementById("receipt-rows").replaceChildren(...(list || []).map((r) =>
    el("tr", {}, RECEIPT_COLUMNS.map((key) => el("td", { class: "r-" + key, text: text(r[key]) })))));
}

function outcomes(o) {
  setText("outcomes-received", text(o.received));
  for (const [group] of OUTCOME_GROUPS) {
    const counts = Object.entries(o[group] || {}).map(([k, v]) => [k, k, text(v)]);
    facts("outcomes-" + group, "outcomes-" + group, counts);
  }
}

function show(doc) {
  const state = text(doc.state);
  document.title = "tunnelgate: " + state;
  setText("version", text(doc.version));
  setText("state", state);
  setText("mode", text(doc.mode));
  document.getElementById("summary").className = "state-" + state;
  setText("reason", doc.not_ready_reason ? "not ready: " + doc.not_ready_reason : "ready");
  const latched = doc.fatal || (doc.coordination && doc.coordination.latch);
  document.getElementById("latch").hidden = !latched;
  facts("latch-facts", "latch", latchFacts(doc));
  facts("fence-facts", "fence", fenceFacts(doc.fence || {}));
  channels(doc.downstream);
  facts("harpoon-facts", "harpoon", harpoonFacts(doc.harpoon || {}));
  facts("control-plane-facts", "control-plane", controlPlaneFacts(doc));
  outcomes(doc.outcomes || {});
  receipts(doc.recent_receipts);
  const coord = document.getElementById("coordination");
  coord.hidden = !doc.coordination;
  if (doc.coordination) facts("coordination-facts", "coordination", coordinationFacts(doc.coordination));
}

function eventCells(e) {
  const fields = (e.fields || []).map((f) => text(f.name) + "=" + text(f.value)).join(" ");
  return [
    ["e-time", text(e.time)],
    ["e-level", text(e.level)],
    ["e-target", text(e.target)],
    ["e-message", text(e.message)],
    ["e-fields", fields],
  ];
}

function events(doc) {
  setText("events-held", text(doc.held));
  setText("events-capacity", text(doc.capacity));
  setText("events-dropped", text(doc.dropped));
  const newestFirst = (doc.events || []).slice().reverse();
  document.getElementById("event-rows").replaceChildren(...newestFirst.map((e) =>
    el("tr", {}, eventCells(e).map(([cls, value]) => el("td", { class: cls, text: value })))));
}

async function fetchJson(path) {
  const r = await fetch(path, { cache: "no-store", credentials: "omit" });
  if (!r.ok) throw new Error(path + " answered " + r.status);
  return r.json();
}

async function refresh() {
  try {
    show(await fetchJson("/status"));
    events(await fetchJson("/events?limit=" + EVENTS_SHOWN));
    setText("refresh", "Live: refreshed from /status at " + new Date().toISOString() + ".");
  } catch (e) {
    setText("refresh", "The gateway does not answer (" + e.message + "); retrying every second.");
  }
}

async function loop() {
  document.documentElement.dataset.live = "yes";
  for (;;) {
    await refresh();
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

loop();
