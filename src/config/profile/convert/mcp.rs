//! The profile's `mcp` section: `server_urls` and `commands` as `mcp.channels.NAME`
//! (one channel per name, as upstream allows one binding per channel), the shared
//! proxy, certificate and headers, and the settings tunnelgate has no key for.

use std::time::Duration;

use toml::{Table, Value};

use super::super::super::command_line;
use super::super::schema::{Mcp, McpCommand, ServerUrl};
use super::sections::{canonical_channel, Shown};
use super::Conversion;

/// Upstream's defaults for the settings tunnelgate has no key for.
const CONNECTION_MAX_TTL: Duration = Duration::from_secs(600);
const STARTUP_WAIT_TIMEOUT: Duration = Duration::ZERO;

impl Conversion<'_> {
    pub(super) fn mcp(&mut self, mut mcp: Mcp) {
        let mut channels = Table::new();
        let mut http = Vec::new();
        for (i, entry) in mcp.server_urls.take().unwrap_or_default().into_iter().enumerate() {
            let key = format!("mcp.server_urls[{i}]");
            if let Some((name, table)) = self.server_url(&key, entry) {
                self.add_channel(&mut channels, &key, name.clone(), table);
                http.push(name);
            }
        }
        for (i, entry) in mcp.commands.take().unwrap_or_default().into_iter().enumerate() {
            let key = format!("mcp.commands[{i}]");
            if let Some((name, table)) = self.command(&key, entry) {
                self.add_channel(&mut channels, &key, name, table);
            }
        }
        if let Some(map) = mcp.extra_headers.take() {
            if !self.replaced_by("mcp.extra_headers", "MCP_EXTRA_HEADERS") {
                self.extra_headers(map, &mut channels, &http);
            }
        }
        if !channels.is_empty() {
            self.set(&["mcp", "channels"], channels);
        }
        self.mcp_shared(&mcp);
        self.mcp_defaults_only(mcp);
    }

    /// `mcp.http_proxy`, the client certificate, the concurrency, the trusted origins.
    fn mcp_shared(&mut self, mcp: &Mcp) {
        if let Some(raw) = &mcp.http_proxy {
            if let Some(proxy) = self.proxy("mcp.http_proxy", raw) {
                self.set(&["mcp", "proxy"], proxy);
            }
        }
        for (key, raw, to) in [
            ("mcp.client_cert", &mcp.client_cert, "client_cert"),
            ("mcp.client_key", &mcp.client_key, "client_key"),
        ] {
            if let Some(path) = raw.as_deref().and_then(|raw| self.path(key, raw)) {
                self.set(&["mcp", "tls", to], path);
            }
        }
        if let Some(n) = mcp.max_concurrent_requests {
            self.set(&["mcp", "max_concurrent"], n);
        }
        if let Some(origins) = &mcp.oauth_trusted_origins {
            self.set(&["mcp", "oauth_trusted_origins"], origins.clone());
        }
    }

    /// The settings of `mcp` with no tunnelgate key.
    fn mcp_defaults_only(&mut self, mcp: Mcp) {
        if let Some(map) = mcp.discovery_extra_headers {
            if map.0.is_empty() {
                self.note("mcp.discovery_extra_headers is empty: none, the official default".to_owned());
            } else if !self.replaced_by("mcp.discovery_extra_headers", "MCP_DISCOVERY_EXTRA_HEADERS") {
                self.refuse(
                    "mcp.discovery_extra_headers",
                    "tunnelgate has no headers for OAuth discovery alone: move them to mcp.extra_headers \
                     (a channel's headers also go on its discovery requests to the server's own origin), \
                     or remove the key",
                );
            }
        }
        if let Some(raw) = &mcp.startup_wait_timeout {
            let wait = self.duration("mcp.startup_wait_timeout", raw);
            self.default_only(
                "mcp.startup_wait_timeout",
                wait.map(Shown),
                &Shown(STARTUP_WAIT_TIMEOUT),
                (
                    "tunnelgate does not wait for an MCP server before its first poll",
                    "remove the key; /readyz tells when the gateway polls",
                ),
            );
        }
        if let Some(send) = mcp.stdio_send_initialized_notification {
            self.note(format!(
                "mcp.stdio_send_initialized_notification = {send}: tunnelgate opens each stdio session itself \
                 and sends notifications/initialized there (mcp.channels.NAME.session = \"owned\", the default)"
            ));
        }
        if let Some(raw) = &mcp.connection_max_ttl {
            let ttl = self.duration("mcp.connection_max_ttl", raw);
            self.default_only(
                "mcp.connection_max_ttl",
                ttl.map(Shown),
                &Shown(CONNECTION_MAX_TTL),
                (
                    "tunnelgate bounds each downstream call by the command's response_timeout, else \
                     mcp.request_timeout",
                    "remove the key, and set mcp.request_timeout if a call needs a bound of its own",
                ),
            );
        }
    }

    /// One `mcp.server_urls` entry as an HTTP channel.
    fn server_url(&mut self, key: &str, entry: ServerUrl) -> Option<(String, Table)> {
        let name = canonical_channel(entry.channel.as_deref().unwrap_or(""));
        if entry.url.trim().is_empty() {
            self.refuse(&format!("{key}.url"), "is missing: each entry needs a url");
            return None;
        }
        let mut table = Table::new();
        table.insert("url".to_owned(), self.value(&format!("{key}.url"), &entry.url)?.into());
        if let Some(socket) = entry.unix_socket.as_deref().filter(|s| !s.is_empty()) {
            if let Some(path) = self.path(&format!("{key}.unix_socket"), socket) {
                table.insert("socket".to_owned(), path.into());
            }
        }
        if let Some(raw) = entry.http_proxy.as_deref().filter(|s| !s.is_empty()) {
            if let Some(proxy) = self.proxy(&format!("{key}.http_proxy"), raw) {
                table.insert("proxy".to_owned(), proxy.into());
            }
        }
        let mut tls = Table::new();
        for (field, raw) in [("client_cert", &entry.client_cert), ("client_key", &entry.client_key)] {
            let raw = raw.as_deref().filter(|s| !s.is_empty());
            if let Some(path) = raw.and_then(|raw| self.path(&format!("{key}.{field}"), raw)) {
                tls.insert(field.to_owned(), path.into());
            }
        }
        if !tls.is_empty() {
            table.insert("tls".to_owned(), tls.into());
        }
        Some((name, table))
    }

    /// One `mcp.commands` entry as a stdio channel: the command line split as a shell
    /// splits words (tunnelgate starts the program without a shell, as upstream).
    fn command(&mut self, key: &str, entry: McpCommand) -> Option<(String, Table)> {
        let name = canonical_channel(entry.channel.as_deref().unwrap_or(""));
        if entry.command.trim().is_empty() {
            self.refuse(&format!("{key}.command"), "is missing: each entry needs a command");
            return None;
        }
        let line = self.value(&format!("{key}.command"), &entry.command)?;
        match command_line::split(&line) {
            Ok(argv) => {
                let mut table = Table::new();
                table.insert("command".to_owned(), argv.into());
                Some((name, table))
            }
            Err(e) => {
                self.refuse(&format!("{key}.command"), format!("cannot be split: {}", e.words()));
                None
            }
        }
    }

    fn add_channel(&mut self, channels: &mut Table, key: &str, name: String, table: Table) {
        if channels.contains_key(&name) {
            self.refuse(
                &format!("{key}.channel"),
                format!("channel {name:?} is configured twice: one entry per channel, as upstream"),
            );
            return;
        }
        channels.insert(name, Value::Table(table));
    }

    /// `mcp.extra_headers` go to every HTTP channel's server (each channel's `headers`).
    fn extra_headers(&mut self, map: super::super::schema::UniqueMap<String>, channels: &mut Table, http: &[String]) {
        let Some(headers) = self.headers("mcp.extra_headers", map) else {
            return;
        };
        if http.is_empty() {
            self.note("mcp.extra_headers: no HTTP channel to send them to (stdio channels take none)".to_owned());
        }
        for name in http {
            if let Some(Value::Table(channel)) = channels.get_mut(name) {
                channel.insert("headers".to_owned(), Value::Table(headers.clone()));
            }
        }
    }
}
