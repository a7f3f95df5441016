//! `tunnelgate support-bundle`: collect, scan, write (see [`crate::bundle`]), with one
//! progress line per part on stderr and a summary.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::bundle::{self, Canaries, Collected, Options, Part, Source};
use crate::config::OfflineConfig;

pub(super) const SUPPORT_BUNDLE_HELP: &str = "\
Writes one .tar.gz to hand over with a support request:
  config.toml        the effective configuration, secrets masked (as `check` prints it)
  status.json        GET /status    } from the running gateway's ops listener; absent,
  metrics.txt        GET /metrics   } with the reason in the manifest, when it does
  events.json        GET /events    } not answer
  doctor.json        `doctor --json`, run here (stdio servers are not started)
  latch.json         strict.latch_file, and intent.json its intent record, if present
  receipts.jsonl     the delivery receipts (and receipts.jsonl.1), if present
  version.json       version, build profile, OS, architecture and kernel
  MANIFEST.json      each part's size and source: ops listener URL, disk PATH, in
                     process, or absent with the reason

Before anything is written every part is searched for the secrets the configuration
resolves (API key, header values, proxy credentials, client key material, the etcd
password) and for PEM private keys and Bearer/Basic credentials. A hit refuses the
bundle, names the part and the kind of secret (never the secret), and writes nothing.

It needs no secret: a reference whose variable or file is not available here
(env:NAME unset, file:/path unreadable) is marked unresolved in config.toml and named
in the manifest, doctor.json says so as `doctor` would, and the scan has no value to
search for for it.

Examples:
  tunnelgate support-bundle --config /etc/tunnelgate/config.toml
  tunnelgate support-bundle --config config.toml --out /tmp/tg-support.tar.gz --force
  tunnelgate support-bundle --config config.toml --url http://127.0.0.1:9464

Exit codes: 0 written, 1 not written (--out exists without --force, or cannot be
written; a bad --url), 4 refused by the secret scan (nothing written), 78 invalid
configuration, 2 usage error.";

#[derive(Args, Debug)]
pub(crate) struct SupportBundleArgs {
    #[command(flatten)]
    pub config: super::ConfigArgs,
    /// The archive to write [default: tunnelgate-support-<UTC time>.tar.gz here].
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace --out when it exists.
    #[arg(long)]
    pub force: bool,
    /// Base URL of the gateway's ops listener [default: from ops.listen].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Bound of each request to the ops listener and of each doctor check.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// `tunnelgate support-bundle`: returns the exit code (the errors it can name itself are
/// printed here).
pub(crate) async fn support_bundle(args: &SupportBundleArgs, config: OfflineConfig) -> Result<u8, CliError> {
    let out = args.out.clone().unwrap_or_else(bundle::default_out);
    let ops_url = match &args.url {
        Some(url) => super::status_url(url)?.as_str().trim_end_matches("status").to_owned(),
        None => bundle::ops_url(config.ops().listen),
    };
    if let Err(e) = bundle::check_destination(&out, args.force) {
        return Ok(refused(&e));
    }
    let options = Options {
        ops_url,
        timeout: args.timeout,
        config_path: args.config.config.clone(),
    };
    let collected = bundle::collect(&config, &options, &mut progress).await;
    if let Some(why) = &collected.gateway_down {
        crate::stderr::line(format_args!(
            "support-bundle: the gateway is not reachable ({why}): its parts are absent; the files were read from disk"
        ));
    }
    let summary = Summary::of(&collected);
    // A secret unresolved here has no value to search for; the shapes are still found.
    let parts = match collected.scanned(&Canaries::of_config(config.partial())) {
        Ok(parts) => parts,
        Err(e) => return Ok(refused(&e)),
    };
    match bundle::write(&out, &parts, args.force) {
        Ok(size) => {
            crate::stderr::line(format_args!(
                "support-bundle: wrote {} ({size} bytes): {} parts: {summary}; every part scanned clean",
                out.display(),
                parts.len()
            ));
            println!("{}", out.display());
            Ok(0)
        }
        Err(e) => Ok(refused(&e)),
    }
}

fn refused(e: &bundle::BundleError) -> u8 {
    crate::stderr::line(format_args!("support-bundle: {e}"));
    e.exit_code()
}

fn progress(part: &Part) {
    let what = match &part.source {
        Source::Absent { reason } => format!("absent: {reason}"),
        source => format!("{} bytes from {}", part.body.len(), source.words()),
    };
    crate::stderr::line(format_args!("support-bundle: {:<16} {what}", part.name));
}

/// How many parts came from where (the manifest, made last, not counted).
struct Summary {
    ops: usize,
    disk: usize,
    process: usize,
    absent: usize,
}

impl Summary {
    fn of(collected: &Collected) -> Self {
        let mut s = Summary {
            ops: 0,
            disk: 0,
            process: 0,
            absent: 0,
        };
        for part in &collected.parts {
            match part.source {
                Source::Ops { .. } => s.ops += 1,
                Source::Disk { .. } => s.disk += 1,
                Source::InProcess { .. } => s.process += 1,
                Source::Absent { .. } => s.absent += 1,
            }
        }
        s
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} from the ops listener, {} from disk, {} made here, and MANIFEST.json ({} absent, named in it)",
            self.ops, self.disk, self.process, self.absent
        )
    }
}
