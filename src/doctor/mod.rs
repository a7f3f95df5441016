//! `tunnelgate doctor`: preflight every endpoint the runtime will use, one verdict per
//! check, without running the gateway.
//!
//! Checks, in order: `config` (it loads and validates), `control_plane` (reachable,
//! credentials accepted, through the tunnel metadata request: never a poll),
//! `channel.NAME` per MCP channel (HTTP: `initialize`, then the session closed; stdio:
//! the program resolves, and with `--spawn-stdio` it starts and answers `initialize`),
//! `latch_dir` (strict: a file can be written beside `strict.latch_file`), `ops_listen`
//! (`ops.listen` can be bound) and `latch_file` (no persisted latch). After `config`, one
//! check per configured TLS file, named by its key (readable, parsed, key matching its
//! certificate, within its validity; a warning 14 days before the end). The network checks
//! run concurrently, each bounded by `--timeout`.
//!
//! Owns: the checks and their words ([`report`] aggregates and renders them). Uses the
//! runtime's own control-plane client and MCP transports so that a check sends what the
//! gateway would; MCP probes are admitted by a private, non-strict fence of this
//! process. Must not: poll, call a tool, write or clear the latch, start a stdio server
//! unless asked, or print a secret, a header value or a URL (details name config keys).

mod channel;
mod control;
mod coordination;
mod harpoon;
mod local;
pub(crate) mod report;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::app::{build_control, gateway_metrics};
use crate::config::{ChannelConfig, Config, ConfigError};
use crate::strict::Fence;
#[cfg(test)]
pub(crate) use report::Verdict;
pub(crate) use report::{Check, Report};

/// How the checks run.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Bound of each network check (the session `DELETE` after `initialize` gets its own).
    pub timeout: Duration,
    /// Start stdio servers and send them `initialize` (otherwise they are only resolved).
    pub spawn_stdio: bool,
}

/// Slack on top of a check's own bounds before it is given up as stuck.
const GUARD_SLACK: Duration = Duration::from_secs(3);

/// Runs every check against a valid configuration.
pub(crate) async fn run(config: &Config, options: &Options) -> Report {
    let metrics = Arc::new(gateway_metrics(config));
    let fence = Fence::new(false, config.mcp.channels.len());
    let probe = channel::Probe {
        fence: &fence,
        metrics: &metrics,
        options,
        connect_timeout: config.mcp.connect_timeout,
        config,
    };
    // A check's own bounds: the request, plus the session DELETE or the child's reaping.
    let guard = options.timeout.saturating_mul(2) + GUARD_SLACK;
    let control_plane = guarded("control_plane".to_owned(), guard, async {
        match build_control(config, &metrics, &crate::protocol::random_hex(16)) {
            Ok(client) => control::check(config, &client, options.timeout).await,
            Err(e) => Check::fail("control_plane", e.to_string()),
        }
    });
    let channels =
        join_all(
            config.mcp.channels.iter().map(|(name, channel)| {
                guarded(format!("channel.{name}"), guard, channel::check(name, channel, &probe))
            }),
        );
    let coordination = coordination::check(config, options.timeout);
    let harpoon = harpoon::checks(config, &metrics, options.timeout);
    let (((control_plane, channels), coordination), harpoon) = futures_util::future::join(
        futures_util::future::join(futures_util::future::join(control_plane, channels), coordination),
        harpoon,
    )
    .await;

    let mut checks = vec![config_check(config)];
    checks.extend(tls::checks(config, std::time::SystemTime::now()));
    checks.push(control_plane);
    checks.extend(channels);
    checks.extend(coordination);
    checks.extend(harpoon);
    checks.push(local::latch_dir(config));
    checks.push(local::ops_listen(config).await);
    checks.push(local::latch_file(config));
    Report { checks }
}

/// The report of a configuration that does not load: its one failed check.
pub(crate) fn invalid_config(error: &ConfigError) -> Report {
    Report {
        checks: vec![Check::fail("config", error.to_string())],
    }
}

fn config_check(config: &Config) -> Check {
    let mode = if config.strict.enabled { "strict" } else { "default" };
    let channels: Vec<String> = config
        .mcp
        .channels
        .iter()
        .map(|(name, channel)| {
            let transport = match channel {
                ChannelConfig::Http { .. } => "http",
                ChannelConfig::Stdio { .. } => "stdio",
            };
            format!("{name}: {transport}")
        })
        .collect();
    let count = channels.len();
    let noun = if count == 1 { "channel" } else { "channels" };
    Check::ok(
        "config",
        format!("valid: {mode} mode, {count} {noun} ({})", channels.join(", ")),
    )
}

/// `check`, or a failed check named `name` if it outlives `bound`.
async fn guarded(name: String, bound: Duration, check: impl std::future::Future<Output = Check>) -> Check {
    match tokio::time::timeout(bound, check).await {
        Ok(check) => check,
        Err(_) => Check::fail(
            name,
            format!("the check did not finish within {}", humantime::format_duration(bound)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_line_names_the_mode_and_each_channel_transport() {
        let config = Config::from_toml_str(
            r#"
            [control_plane]
            tunnel_id = "tunnel_x"
            api_key = "k"
            [mcp.channels.main]
            url = "http://127.0.0.1:3000/mcp?token=abc"
            [mcp.channels.tools]
            command = ["srv"]
            "#,
        )
        .unwrap();
        let check = config_check(&config);
        assert_eq!(check.verdict, Verdict::Ok);
        assert_eq!(
            check.detail,
            "valid: default mode, 2 channels (main: http, tools: stdio)"
        );
    }

    #[test]
    fn an_invalid_configuration_is_one_failed_check_naming_the_key() {
        let error = Config::from_toml_str("[control_plane]\napi_key = \"k\"\n").unwrap_err();
        let report = invalid_config(&error);
        assert_eq!(report.checks.len(), 1);
        assert_eq!(report.checks[0].name, "config");
        assert!(
            report.checks[0].detail.contains(error.key()),
            "{}",
            report.checks[0].detail
        );
        assert_eq!(report.exit_code(), 1, "the binary maps it to 78, as for check");
    }
}
