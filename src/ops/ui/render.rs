//! The server render of the operator page from the `/status` document (as JSON, the same
//! value `/status` serves): complete without script. `app.js` builds the same parts, with
//! the same element ids, from each `/status` it polls.

use std::fmt::Write;

use serde_json::Value;

/// One labelled value of a section; its element id is `SECTION-KEY`.
struct Fact {
    key: String,
    label: String,
    value: String,
}

/// `s` with `&`, `<`, `>`, `"` and `'` replaced by entities: safe in text and in quoted
/// attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value as the page shows it (`app.js` `text` is the same): `none` for null.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "none".to_owned(),
        Value::String(s) => s.clone(),
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        other => other.to_string(),
    }
}

fn seconds(v: &Value) -> String {
    v.as_f64().map_or_else(|| "none".to_owned(), |s| format!("{s:.1} s"))
}

fn fact(key: &str, label: &str, value: String) -> Fact {
    Fact {
        key: key.to_owned(),
        label: label.to_owned(),
        value,
    }
}

/// The CLI commands the latch section shows, to copy.
pub(super) struct LatchCommands {
    pub(super) show: String,
    pub(super) clear: String,
}

/// The whole page: `doc` is the `/status` document, `events` the `/events` document.
pub(super) fn page(doc: &Value, events: &Value, commands: &LatchCommands) -> String {
    let state = text(&doc["state"]);
    let mut out = String::with_capacity(8 * 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>tunnelgate: {state}</title>\
         <link rel=\"stylesheet\" href=\"/ui/style.css\"><script src=\"/ui/app.js\" defer></script></head>\n\
         <body><header><h1>tunnelgate <span id=\"version\">{version}</span></h1>\
         <p id=\"summary\" class=\"state-{state}\"><span id=\"state\">{state}</span> \
         <span id=\"mode\">{mode}</span> mode</p><p id=\"reason\">{reason}</p></header>\n<main>",
        state = escape(&state),
        version = escape(&text(&doc["version"])),
        mode = escape(&text(&doc["mode"])),
        reason = escape(&reason(doc)),
    );
    latch_section(&mut out, doc, commands);
    section(&mut out, "fence", "Fence", &fence_facts(&doc["fence"]));
    section(&mut out, "control-plane", "Control plane", &control_plane_facts(doc));
    let coordination = coordination_facts(&doc["coordination"]);
    section_hidden(
        &mut out,
        "coordination",
        "Coordination",
        &coordination,
        coordination.is_empty(),
    );
    channels_section(&mut out, &doc["downstream"]);
    section(
        &mut out,
        "harpoon",
        "Private OAuth (channel harpoon)",
        &harpoon_facts(&doc["harpoon"]),
    );
    outcomes_section(&mut out, &doc["outcomes"]);
    receipts_section(&mut out, &doc["recent_receipts"]);
    events_section(&mut out, events);
    out.push_str(
        "</main>\n<footer><p id=\"refresh\">Rendered by the gateway; where script runs, this page \
         refreshes itself from <a href=\"/status\">/status</a> every second (otherwise reload it).</p>\
         <p>This page performs no actions.</p></footer></body></html>\n",
    );
    out
}

/// The line under the state: `ready`, or `not ready: REASON` as `/readyz` says it.
fn reason(doc: &Value) -> String {
    match doc["not_ready_reason"].as_str() {
        Some(r) => format!("not ready: {r}"),
        None => "ready".to_owned(),
    }
}

fn section(out: &mut String, id: &str, title: &str, facts: &[Fact]) {
    section_hidden(out, id, title, facts, false);
}

fn section_hidden(out: &mut String, id: &str, title: &str, facts: &[Fact], hidden: bool) {
    let hidden = if hidden { " hidden" } else { "" };
    let _ = write!(out, "<section id=\"{id}\"{hidden}><h2>{title}</h2>");
    dl(out, &format!("{id}-facts"), id, facts);
    out.push_str("</section>\n");
}

fn dl(out: &mut String, list_id: &str, prefix: &str, facts: &[Fact]) {
    let _ = write!(out, "<dl id=\"{list_id}\">");
    for f in facts {
        let _ = write!(
            out,
            "<div><dt>{}</dt><dd id=\"{prefix}-{}\">{}</dd></div>",
            escape(&f.label),
            escape(&f.key),
            escape(&f.value)
        );
    }
    out.push_str("</dl>");
}

fn fence_facts(fence: &Value) -> Vec<Fact> {
    let held = fence["held"].as_bool() == Some(true);
    vec![
        fact("held", "Fence", if held { "held" } else { "free" }.to_owned()),
        fact("request-id", "Request id", text(&fence["request_id"])),
        fact("channel", "Channel", text(&fence["channel"])),
        fact("leg", "Leg", text(&fence["leg"])),
        fact("held-for", "Held for", seconds(&fence["held_seconds"])),
    ]
}

/// The latch's cause (this process's, or the cluster's), the command that clears it, and
/// the sentence that the page does not. Hidden while nothing is latched.
fn latch_section(out: &mut String, doc: &Value, commands: &LatchCommands) {
    let fatal = &doc["fatal"];
    let cluster = &doc["coordination"]["latch"];
    let facts = vec![
        fact("category", "Category", text(&fatal["category"])),
        fact("exit-code", "Exit code", text(&fatal["exit_code"])),
        fact("request-id", "Request id", text(&fatal["request_id"])),
        fact("channel", "Channel", text(&fatal["channel"])),
        fact("method", "Method", text(&fatal["method"])),
        fact("latched-at", "Latched at", text(&fatal["latched_at"])),
        fact("persisted", "Latch file written", text(&fatal["persisted"])),
        fact(
            "persisted-category",
            "Earlier run's cause",
            text(&doc["persisted_cause"]["category"]),
        ),
        fact(
            "persisted-exit-code",
            "Its exit code",
            text(&doc["persisted_cause"]["exit_code"]),
        ),
        fact(
            "persisted-request-id",
            "Its request id",
            text(&doc["persisted_cause"]["request_id"]),
        ),
        fact("cluster", "Cluster-wide latch", text(&cluster["category"])),
        fact("cluster-by", "Set by replica", text(&cluster["latched_by"])),
    ];
    let hidden = if fatal.is_null() && cluster.is_null() {
        " hidden"
    } else {
        ""
    };
    let _ = write!(out, "<section id=\"latch\"{hidden}><h2>Fatal latch</h2>");
    dl(out, "latch-facts", "latch", &facts);
    let _ = writeln!(
        out,
        "<p>This page performs no actions. Read the persisted cause on the host:</p>\
         <pre><code id=\"show-command\">{}</code></pre>\
         <p>Reconcile the command named there with the MCP server's records, then clear the \
         latch with the CLI (a latch is cleared only so):</p>\
         <pre><code id=\"clear-command\">{}</code></pre></section>",
        escape(&commands.show),
        escape(&commands.clear)
    );
}

/// The last delivery receipts, newest first (`app.js` `RECEIPT_COLUMNS` is the same).
fn receipts_section(out: &mut String, receipts: &Value) {
    out.push_str(
        "<section id=\"receipts\"><h2>Latest delivery receipts</h2><p>Commands that did not end \
         cleanly, newest first (all of them: <code>tunnelgate receipts</code>).</p><table><thead><tr>",
    );
    for (_, title) in RECEIPT_COLUMNS {
        let _ = write!(out, "<th>{title}</th>");
    }
    out.push_str("</tr></thead><tbody id=\"receipt-rows\">");
    for receipt in receipts.as_array().into_iter().flatten() {
        out.push_str("<tr>");
        for (key, _) in RECEIPT_COLUMNS {
            let _ = write!(out, "<td class=\"r-{key}\">{}</td>", escape(&text(&receipt[key])));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></section>\n");
}

/// The log ring's newest events, newest first, with the ring's counts (`app.js`
/// `events` is the same).
fn events_section(out: &mut String, events: &Value) {
    let _ = write!(
        out,
        "<section id=\"events\"><h2>Recent events</h2><p>The log's last events, newest first \
         (<a href=\"/events\">/events</a>): <span id=\"events-held\">{}</span> held of \
         <span id=\"events-capacity\">{}</span>, <span id=\"events-dropped\">{}</span> overwritten \
         since start.</p><table><thead><tr><th>Time</th><th>Level</th><th>Target</th><th>Message</th>\
         <th>Fields</th></tr></thead><tbody id=\"event-rows\">",
        escape(&text(&events["held"])),
        escape(&text(&events["capacity"])),
        escape(&text(&events["dropped"])),
    );
    for event in events["events"].as_array().into_iter().flatten().rev() {
        out.push_str("<tr>");
        for (class, value) in event_cells(event) {
            let _ = write!(out, "<td class=\"{class}\">{}</td>", escape(&value));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></section>\n");
}

/// One event row's cells: (class, text); fields as `name=value`, space-separated.
fn event_cells(event: &Value) -> Vec<(&'static str, String)> {
    let fields: Vec<String> = event["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| format!("{}={}", text(&f["name"]), text(&f["value"])))
        .collect();
    vec![
        ("e-time", text(&event["time"])),
        ("e-level", text(&event["level"])),
        ("e-target", text(&event["target"])),
        ("e-message", text(&event["message"])),
        ("e-fields", fields.join(" ")),
    ]
}

/// The receipt fields the page shows, in order, and their titles.
const RECEIPT_COLUMNS: [(&str, &str); 8] = [
    ("finished_at", "Finished"),
    ("request_id", "Request id"),
    ("channel", "Channel"),
    ("method", "Method"),
    ("leg_outcome", "Leg"),
    ("delivery_outcome", "Delivery"),
    ("fatal_category", "Latched"),
    ("message", "Caller was told"),
];

fn channels_section(out: &mut String, channels: &Value) {
    out.push_str(
        "<section id=\"channels\"><h2>Channels</h2><table><thead><tr><th>Channel</th><th>Transport</th>\
         <th>State</th><th>Generation</th><th>Server</th><th>Last command</th><th>Last success</th>\
         </tr></thead><tbody id=\"channel-rows\">",
    );
    for ch in channels.as_array().into_iter().flatten() {
        let cells = channel_cells(ch);
        let up = if ch["up"].as_bool() == Some(true) { "up" } else { "down" };
        let _ = write!(out, "<tr class=\"channel-{up}\">");
        for (class, value) in cells {
            let _ = write!(out, "<td class=\"{class}\">{}</td>", escape(&value));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></section>\n");
}

/// One channel row's cells: (class, text). `app.js` `channelCells` is the same.
fn channel_cells(ch: &Value) -> Vec<(&'static str, String)> {
    let up = if ch["up"].as_bool() == Some(true) { "up" } else { "down" };
    let state = match ch["session"].as_str() {
        Some(session) => format!("{up} (session {session})"),
        None => up.to_owned(),
    };
    let server = match (&ch["server"]["name"], &ch["server"]["version"]) {
        (Value::Null, _) => "none".to_owned(),
        (name, Value::Null) => text(name),
        (name, version) => format!("{} {}", text(name), text(version)),
    };
    vec![
        ("c-channel", text(&ch["channel"])),
        ("c-transport", text(&ch["transport"])),
        ("c-state", state),
        ("c-generation", text(&ch["generation"])),
        ("c-server", server),
        ("c-last-command", text(&ch["last_command_at"])),
        ("c-last-success", text(&ch["last_success_at"])),
    ]
}

fn control_plane_facts(doc: &Value) -> Vec<Fact> {
    let cp = &doc["control_plane"];
    vec![
        fact(
            "last-poll",
            "Last successful poll",
            text(&cp["last_successful_poll_at"]),
        ),
        fact(
            "poll-age",
            "Age of that poll",
            seconds(&cp["last_successful_poll_age_seconds"]),
        ),
        fact(
            "errors",
            "Consecutive poll errors",
            text(&cp["consecutive_poll_errors"]),
        ),
        fact("last-error", "Last poll error", text(&cp["last_poll_error_kind"])),
        fact("last-acked", "Last acknowledged delivery", text(&cp["last_acked_at"])),
        fact("in-flight", "Commands in flight", text(&doc["commands"]["in_flight"])),
        fact("queued", "Commands queued", text(&doc["commands"]["queued"])),
    ]
}

/// Every outcome group of `/status` `outcomes`, one list each.
fn outcomes_section(out: &mut String, outcomes: &Value) {
    out.push_str("<section id=\"outcomes\"><h2>Outcomes since start</h2>");
    let _ = write!(
        out,
        "<p>Commands received: <span id=\"outcomes-received\">{}</span></p><div class=\"groups\">",
        escape(&text(&outcomes["received"]))
    );
    for (group, title) in OUTCOME_GROUPS {
        let facts: Vec<Fact> = outcomes[group]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| fact(k, k, text(v)))
            .collect();
        let _ = write!(out, "<div><h3>{title}</h3>");
        dl(out, &format!("outcomes-{group}"), &format!("outcomes-{group}"), &facts);
        out.push_str("</div>");
    }
    out.push_str("</div></section>\n");
}

/// `/status` `outcomes` groups and their titles (`app.js` has the same list).
const OUTCOME_GROUPS: [(&str, &str); 4] = [
    ("legs", "Downstream legs"),
    ("deliveries", "Terminal deliveries"),
    ("notifications", "Notification deliveries"),
    ("dropped", "Dropped commands"),
];

/// Channel `harpoon`: routable or not, and its targets as `label (origin)`, a template
/// as `label (origin, template: its parameters)`.
fn harpoon_facts(h: &Value) -> Vec<Fact> {
    let targets: Vec<String> = h["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| match t["template"]["parameters"].as_array() {
            Some(params) => {
                let names: Vec<String> = params.iter().map(text).collect();
                format!(
                    "{} ({}, template: {})",
                    text(&t["label"]),
                    text(&t["origin"]),
                    names.join(" ")
                )
            }
            None => format!("{} ({})", text(&t["label"]), text(&t["origin"])),
        })
        .collect();
    vec![
        fact("routable", "Routable", text(&h["routable"])),
        fact("target-count", "Targets", targets.len().to_string()),
        fact(
            "targets",
            "Target labels",
            if targets.is_empty() {
                "none".to_owned()
            } else {
                targets.join(", ")
            },
        ),
    ]
}

/// Present only with coordination (`coordination.backend = "etcd"`).
fn coordination_facts(c: &Value) -> Vec<Fact> {
    if c.is_null() {
        return Vec::new();
    }
    vec![
        fact("backend", "Backend", text(&c["backend"])),
        fact("role", "Role", text(&c["role"])),
        fact("holder", "Lease holder", text(&c["holder"])),
        fact("lease-ttl", "Lease TTL", seconds(&c["lease_ttl_seconds"])),
        fact("unsettled", "Unsettled intents", text(&c["unsettled"])),
        fact("step-downs", "Step-downs", text(&c["step_downs"])),
        fact(
            "holding-off",
            "Holding off campaigning",
            seconds(&c["holding_off_seconds"]),
        ),
        fact(
            "cp-reachable",
            "Control plane reachable",
            text(&c["control_plane_reachable"]),
        ),
    ]
}
