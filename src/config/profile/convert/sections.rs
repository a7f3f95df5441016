//! The profile's `control_plane`, `log`, `health`, `admin_ui`, `cloudflared` and `proxy`
//! sections.

use std::net::SocketAddr;
use std::time::Duration;

use super::super::schema::{AdminUi, Cloudflared, ControlPlane, Health, Log, ProxyCheck};
use super::{Conversion, OFFICIAL_BASE_URL, OFFICIAL_MTLS_BASE_URL};

/// Upstream's defaults for the settings tunnelgate has no key for.
const POLL_DEADLINE_GUARDRAIL: Duration = Duration::from_secs(5);
const PROXY_CHECK_INTERVAL: Duration = Duration::from_secs(60);

impl Conversion<'_> {
    pub(super) fn control_plane(&mut self, cp: ControlPlane) {
        self.control_plane_identity(&cp);
        if let Some(raw) = &cp.http_proxy {
            if let Some(proxy) = self.proxy("control_plane.http_proxy", raw) {
                self.set(&["control_plane", "proxy"], proxy);
            }
        }
        if let Some(n) = cp.max_inflight_requests {
            self.set(&["control_plane", "max_inflight"], n);
        }
        if let Some(raw) = &cp.poll_timeout {
            if let Some(d) = self.duration("control_plane.poll_timeout", raw) {
                self.set(&["control_plane", "poll_timeout"], super::refs::duration_text(d));
            }
        }
        if let Some(raw) = &cp.poll_deadline_guardrail {
            let guardrail = self.duration("control_plane.poll_deadline_guardrail", raw);
            self.default_only(
                "control_plane.poll_deadline_guardrail",
                guardrail.map(Shown),
                &Shown(POLL_DEADLINE_GUARDRAIL),
                (
                    "tunnelgate gives a poll 10 s past its wait before it gives up on it (a fixed margin)",
                    "remove the key",
                ),
            );
        }
        if let Some(channels) = cp.poll_channels {
            let names: Vec<String> = channels.iter().map(|c| canonical_channel(c)).collect();
            self.set(&["control_plane", "poll_channels"], names);
        }
        if let Some(map) = cp.extra_headers {
            if !self.replaced_by("control_plane.extra_headers", "CONTROL_PLANE_EXTRA_HEADERS") {
                if let Some(table) = self.headers("control_plane.extra_headers", map) {
                    self.set(&["control_plane", "headers"], table);
                }
            }
        }
    }

    /// Where the control plane is and who this client is: the URL, the tunnel, the key,
    /// the client certificate (and upstream's switch to the mTLS host for it).
    fn control_plane_identity(&mut self, cp: &ControlPlane) {
        let base_url = match &cp.base_url {
            Some(raw) => self.value("control_plane.base_url", raw),
            None => None,
        };
        if let Some(raw) = &cp.url_path {
            if let Some(path) = self.value("control_plane.url_path", raw) {
                self.set(&["control_plane", "url_path"], path);
            }
        }
        if let Some(id) = &cp.tunnel_id {
            self.set(&["control_plane", "tunnel_id"], id.trim().to_owned());
        }
        if let Some(org) = &cp.organization_id {
            self.set(&["control_plane", "organization_id"], org.clone());
        }
        if let Some(raw) = &cp.api_key {
            if let Some(reference) = self.secret("control_plane.api_key", raw) {
                self.set(&["control_plane", "api_key"], reference);
            }
        }
        let mut certificate = false;
        for (key, raw, to) in [
            ("control_plane.client_cert", &cp.client_cert, "client_cert"),
            ("control_plane.client_key", &cp.client_key, "client_key"),
        ] {
            if let Some(path) = raw.as_deref().and_then(|raw| self.path(key, raw)) {
                certificate |= to == "client_cert";
                self.set(&["control_plane", "tls", to], path);
            }
        }
        let official = base_url
            .as_deref()
            .is_none_or(|url| url.trim_end_matches('/') == OFFICIAL_BASE_URL);
        if certificate && official {
            self.note(format!(
                "control_plane.base_url: {OFFICIAL_MTLS_BASE_URL}, as upstream uses with a client certificate"
            ));
            self.set(&["control_plane", "base_url"], OFFICIAL_MTLS_BASE_URL);
        } else if let Some(url) = base_url {
            self.set(&["control_plane", "base_url"], url);
        }
    }

    pub(super) fn log(&mut self, log: Log) {
        if let Some(level) = log.level {
            match level.trim().to_ascii_lowercase().as_str() {
                word @ ("debug" | "info" | "warn" | "error") => self.set(&["telemetry", "log_level"], word),
                _ => self.refuse(
                    "log.level",
                    format!("{level:?} is not a level tunnelgate reads: use debug, info, warn or error"),
                ),
            }
        }
        match log.format.as_deref().map(str::trim) {
            None => {}
            Some("") => self.note("log.format is empty: unset, as upstream reads it".to_owned()),
            Some("struct-text") => self.set(&["telemetry", "log_format"], "text"),
            Some("json") => self.set(&["telemetry", "log_format"], "json"),
            Some(other) => self.refuse(
                "log.format",
                format!("{other:?} is not a log format: use struct-text (tunnelgate's \"text\") or json"),
            ),
        }
        match log.file.as_deref().map(str::trim) {
            None => {}
            Some("") => self.note("log.file is empty: unset (upstream then logs to stdout)".to_owned()),
            Some(_) => self.refuse(
                "log.file",
                "tunnelgate writes its log to stderr only, never to a file: remove the key and redirect \
                 stderr with the service manager (systemd's StandardError=file:PATH, or `2>>PATH`)",
            ),
        }
        self.default_only(
            "log.http_raw_unsafe",
            log.http_raw_unsafe,
            &false,
            (
                "tunnelgate never logs raw HTTP requests or responses",
                "remove the key (payloads appear only at trace level, never in spans)",
            ),
        );
    }

    pub(super) fn health(&mut self, health: Health) {
        if let Some(raw) = &health.listen_addr {
            if let Some(addr) = self.value("health.listen_addr", raw) {
                self.listen(&addr);
            }
        }
        if health.unix_socket.is_some() {
            self.refuse(
                "health.unix_socket",
                "tunnelgate's ops listener is TCP only: remove the key and set health.listen_addr \
                 (tunnelgate's ops.listen), e.g. 127.0.0.1:8080",
            );
        }
        if let Some(path) = &health.url_file {
            self.plain_path("health.url_file", path, &["ops", "url_file"]);
        }
        if let Some(show) = health.show_details {
            self.set(&["ops", "health_show_details"], show);
        }
    }

    /// `health.listen_addr` as `ops.listen`, in Go's forms (`localhost:P`, `:P`); an address
    /// that is not loopback also sets `ops.allow_remote`, as upstream listens there freely.
    fn listen(&mut self, addr: &str) {
        let written = if let Some(port) = addr.strip_prefix("localhost:") {
            format!("127.0.0.1:{port}")
        } else if addr.starts_with(':') {
            format!("0.0.0.0{addr}")
        } else {
            addr.to_owned()
        };
        let Ok(parsed) = written.parse::<SocketAddr>() else {
            return self.refuse(
                "health.listen_addr",
                format!(
                    "{addr:?}: tunnelgate listens on an IP address and port (or localhost:PORT, :PORT); write the IP"
                ),
            );
        };
        self.set(&["ops", "listen"], parsed.to_string());
        if !parsed.ip().is_loopback() {
            self.note(format!(
                "ops.allow_remote = true: {parsed} is not loopback, and the official client listens there without a switch"
            ));
            self.set(&["ops", "allow_remote"], true);
        }
    }

    pub(super) fn admin_ui(&mut self, ui: AdminUi) {
        let instead = "the official runtime refuses it too; tunnelgate's page is /ui on ops.listen \
                       (ops.allow_remote lets remote clients in): remove the key";
        self.default_only(
            "admin_ui.allow_remote",
            ui.allow_remote,
            &false,
            ("tunnelgate has no separate admin UI", instead),
        );
        self.default_only(
            "admin_ui.open_browser",
            ui.open_browser,
            &false,
            ("tunnelgate never opens a browser", instead),
        );
        if let Some(events) = ui.log_buffer_events {
            self.set(&["ops", "log_buffer_events"], events);
        }
    }

    pub(super) fn cloudflared(&mut self, cf: Cloudflared) {
        let present = [
            ("cloudflared.token", cf.token.is_some()),
            ("cloudflared.managed", cf.managed.is_some()),
            ("cloudflared.path", cf.path.is_some()),
            ("cloudflared.ready_timeout", cf.ready_timeout.is_some()),
        ];
        for (key, _) in present.iter().filter(|(_, set)| *set) {
            self.refuse(
                key,
                "tunnelgate does not run cloudflared (the official runtime refuses the section too): \
                 remove the section and run cloudflared beside the gateway under the service manager",
            );
        }
    }

    pub(super) fn proxy_check(&mut self, proxy: ProxyCheck) {
        if let Some(raw) = &proxy.check_interval {
            let interval = self.duration("proxy.check_interval", raw);
            self.default_only(
                "proxy.check_interval",
                interval.map(Shown),
                &Shown(PROXY_CHECK_INTERVAL),
                (
                    "tunnelgate runs no periodic proxy check (the official runtime accepts only the default)",
                    "remove the key; `tunnelgate doctor` checks the proxies' reach on demand",
                ),
            );
        }
    }
}

/// A channel's name as upstream compares it: trimmed, lowercase, `main` when empty.
pub(super) fn canonical_channel(name: &str) -> String {
    match name.trim().to_ascii_lowercase() {
        empty if empty.is_empty() => "main".to_owned(),
        name => name,
    }
}

/// A duration shown in tunnelgate's text (for notes and refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shown(pub(super) Duration);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&super::refs::duration_text(self.0))
    }
}
