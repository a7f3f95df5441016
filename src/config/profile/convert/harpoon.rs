//! The profile's `harpoon` section: its targets (exact ones, and under
//! `config_version: 2` templates, in the TOML form of docs/private-oauth.md, "Target
//! templates"), its limits and host rules, and the settings tunnelgate has no key for.

use toml::{Table, Value};

use super::super::schema::{Harpoon, Parameter, Target, Template};
use super::Conversion;

impl Conversion<'_> {
    pub(super) fn harpoon(&mut self, mut harpoon: Harpoon) {
        if let Some(targets) = harpoon.targets.take() {
            let mut list = Vec::new();
            for (i, target) in targets.into_iter().enumerate() {
                if let Some(table) = self.target(&format!("harpoon.targets[{i}]"), target) {
                    list.push(Value::Table(table));
                }
            }
            self.set(&["harpoon", "targets"], list);
        }
        for (key, value) in [
            ("allow_plaintext_http", harpoon.allow_plaintext_http),
            ("hosts_include_loopback", harpoon.hosts_include_loopback),
            ("hosts_include_private", harpoon.hosts_include_private),
        ] {
            if let Some(value) = value {
                self.set(&["harpoon", key], value);
            }
        }
        for (key, value) in [
            ("max_response_bytes", harpoon.max_response_bytes),
            ("max_redirects", harpoon.max_redirects),
        ] {
            if let Some(value) = value {
                self.set(&["harpoon", key], value);
            }
        }
        if let Some(suffixes) = harpoon.hosts_include_suffix.take() {
            self.set(&["harpoon", "hosts_include_suffix"], suffixes);
        }
        if let Some(raw) = &harpoon.http_proxy {
            if let Some(proxy) = self.proxy("harpoon.http_proxy", raw) {
                self.set(&["harpoon", "proxy"], proxy);
            }
        }
        self.harpoon_defaults_only(harpoon);
    }

    /// The settings of `harpoon` with no tunnelgate key.
    fn harpoon_defaults_only(&mut self, harpoon: Harpoon) {
        let lists = [
            (
                "harpoon.additional_transports",
                harpoon.additional_transports,
                "tunnelgate serves channel harpoon through the tunnel only (no /harpoon/mcp listener): remove the key",
            ),
            (
                "harpoon.hosts_include_regex",
                harpoon.hosts_include_regex,
                "tunnelgate matches private hosts by suffix only: write them as harpoon.hosts_include_suffix",
            ),
        ];
        for (key, list, instead) in lists {
            match list {
                None => {}
                Some(list) if list.is_empty() => self.note(format!("{key} is empty: none, the official default")),
                Some(_) => self.refuse(key, format!("has no tunnelgate equivalent; {instead}")),
            }
        }
        self.default_only(
            "harpoon.capture_payloads",
            harpoon.capture_payloads,
            &false,
            (
                "tunnelgate never captures Harpoon payloads (the official runtime accepts only false)",
                "remove the key",
            ),
        );
    }

    /// One target: `label`, then `url` (v1 and v2) or `template` (v2 only), as upstream's
    /// `validateFileHarpoonTarget` requires.
    fn target(&mut self, key: &str, target: Target) -> Option<Table> {
        let mut table = Table::new();
        let label = target.label.trim();
        if label.is_empty() {
            self.refuse(&format!("{key}.label"), "is missing: each target needs a label");
            return None;
        }
        table.insert("label".to_owned(), label.into());
        if let Some(description) = target.description {
            table.insert("description".to_owned(), description.into());
        }
        if target.unix_socket.is_some() {
            self.refuse(
                &format!("{key}.unix_socket"),
                "tunnelgate reaches Harpoon targets over TCP only: give the target an https url instead",
            );
        }
        match (target.url, target.template) {
            (None, None) => self.refuse(key, "requires url or template"),
            (Some(url), None) if url.trim().is_empty() => {
                self.refuse(&format!("{key}.url"), "requires url or template")
            }
            (Some(url), None) => {
                let url = self.value(&format!("{key}.url"), &url)?;
                table.insert("url".to_owned(), url.into());
            }
            (url, Some(template)) => {
                let key = format!("{key}.template");
                if !self.version_2 {
                    self.refuse(
                        &key,
                        "template requires config_version: 2 (add it at the top of the profile)",
                    );
                } else if url.is_some() || target.unix_socket.is_some() {
                    self.refuse(&key, "template cannot be combined with url or unix_socket");
                } else if let Some(template) = self.template(&key, template) {
                    table.insert("template".to_owned(), template.into());
                }
            }
        }
        Some(table)
    }

    /// A template's keys, as tunnelgate's (its own checks then run at load, naming the
    /// TOML key); what tunnelgate's GET-only templates cannot take is refused here.
    fn template(&mut self, key: &str, template: Template) -> Option<Table> {
        let mut table = Table::new();
        match template.version {
            Some(1) => {
                table.insert("version".to_owned(), 1.into());
            }
            _ => {
                self.refuse(&format!("{key}.version"), "template version must be 1");
                return None;
            }
        }
        if let Some(method) = template.method {
            if method.eq_ignore_ascii_case("GET") {
                table.insert("method".to_owned(), "GET".into());
            } else {
                self.refuse(
                    &format!("{key}.method"),
                    format!("{method:?}: tunnelgate's templates are GET only; keep GET, or call the write through an exact target (call_target)"),
                );
            }
        }
        if template.body_policy.is_some() {
            self.refuse(
                &format!("{key}.body_policy"),
                "tunnelgate's templates are GET only and send no body: remove it (and use an exact target for writes)",
            );
        }
        for (field, value) in [("origin", template.origin), ("path_template", template.path_template)] {
            if let Some(value) = value {
                table.insert(field.to_owned(), value.into());
            }
        }
        if let Some(query) = template.query {
            table.insert(
                "query".to_owned(),
                Value::Table(query.0.into_iter().map(|(k, v)| (k, v.into())).collect()),
            );
        }
        if let Some(headers) = template.headers {
            let headers = self.headers(&format!("{key}.headers"), headers)?;
            table.insert("headers".to_owned(), headers.into());
        }
        if let Some(allowed) = template.allowed_headers {
            table.insert("allowed_headers".to_owned(), allowed.into());
        }
        if let Some(follow) = template.follow_redirects {
            table.insert("follow_redirects".to_owned(), follow.into());
        }
        if let Some(parameters) = template.parameters {
            let parameters = parameters
                .0
                .into_iter()
                .map(|(name, p)| (name, parameter(p).into()))
                .collect();
            table.insert("parameters".to_owned(), Value::Table(parameters));
        }
        Some(table)
    }
}

/// A template parameter's keys, as written.
fn parameter(p: Parameter) -> Table {
    let mut table = Table::new();
    let mut text = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            table.insert(key.to_owned(), value.into());
        }
    };
    text("type", p.kind);
    text("description", p.description);
    text("pattern", p.pattern);
    if let Some(required) = p.required {
        table.insert("required".to_owned(), required.into());
    }
    for (key, list) in [
        ("enum", p.one_of),
        ("examples", p.examples),
        ("reserved_values", p.reserved_values),
    ] {
        if let Some(list) = list {
            table.insert(key.to_owned(), list.into());
        }
    }
    for (key, n) in [("min_length", p.min_length), ("max_length", p.max_length)] {
        if let Some(n) = n {
            table.insert(key.to_owned(), n.into());
        }
    }
    table
}
