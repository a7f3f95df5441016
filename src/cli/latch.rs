//! `tunnelgate latch show` and `latch clear`: the latch file and its write-ahead intent
//! record, and, when `coordination.backend = "etcd"` is configured, the cluster-wide
//! latch and the unsettled intents under `coordination.etcd.prefix`. They need no secret
//! but etcd's own credentials, and those only to reach etcd: without them the files are
//! shown, nothing is cleared, and the command exits 78 naming the credential.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use super::CliError;
use crate::config::{ConfigError, EtcdConfig, OfflineConfig};
use crate::coord::etcd::{Etcd, KeyValue};
use crate::coord::{clear_cluster, read_cluster, ClusterRecord, Keys};
use crate::strict::latch_file;
use crate::strict::Intent;

/// Each etcd request's bound in these commands.
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);

/// Exit code when the cluster-wide latch cannot be read for want of its credentials.
const UNRESOLVED_EXIT: u8 = 78;

/// The cluster-wide latch these commands read beside the latch file.
#[derive(Debug)]
pub(crate) enum Cluster {
    /// `coordination.backend = "none"`, or no configuration was read.
    None,
    Etcd(Box<EtcdConfig>),
    /// On etcd, but its credentials did not resolve here: it cannot be read.
    Unresolved {
        prefix: String,
        error: ConfigError,
    },
}

impl Cluster {
    /// What `config` says about the cluster-wide latch.
    pub(crate) fn of(config: &OfflineConfig) -> Cluster {
        match config.etcd() {
            Ok(None) => Cluster::None,
            Ok(Some(etcd)) => Cluster::Etcd(Box::new(etcd.clone())),
            Err(error) => Cluster::Unresolved {
                prefix: config
                    .partial()
                    .coordination
                    .etcd
                    .as_ref()
                    .map(|e| e.prefix.clone())
                    .unwrap_or_default(),
                error: error.clone(),
            },
        }
    }

    fn etcd(&self) -> Option<&EtcdConfig> {
        match self {
            Cluster::Etcd(config) => Some(config),
            Cluster::None | Cluster::Unresolved { .. } => None,
        }
    }
}

/// Says why the cluster-wide latch is not read, and returns the exit code.
fn unresolved(prefix: &str, error: &ConfigError, outcome: &str) -> u8 {
    crate::stderr::line(format_args!(
        "the cluster-wide latch on etcd (prefix {prefix}) cannot be read without its credentials: {error}; {outcome}"
    ));
    UNRESOLVED_EXIT
}

/// `tunnelgate latch show`.
pub(crate) async fn latch_show(path: &Path, cluster: &Cluster) -> Result<u8, CliError> {
    match latch_file::read(path)? {
        None => println!("no latch at {}", path.display()),
        Some(f) => {
            println!("{}", f.one_line());
            println!("{}", serde_json::to_string_pretty(&f).expect("latch causes serialize"));
        }
    }
    if let Some(intent) = unsettled_intent(path) {
        println!("{intent}");
    }
    if let Cluster::Unresolved { prefix, error } = cluster {
        return Ok(unresolved(prefix, error, "the files above are all that was read"));
    }
    if let Some(config) = cluster.etcd() {
        let (record, intents) = read(config).await?;
        for line in cluster_lines(config, record.as_ref(), &intents) {
            println!("{line}");
        }
        if let Some(record) = record {
            println!("{}", serde_json::to_string_pretty(&record).expect("records serialize"));
        }
    }
    Ok(0)
}

/// `tunnelgate latch clear`.
pub(crate) async fn latch_clear(path: &Path, cluster: &Cluster, yes: bool) -> Result<u8, CliError> {
    // The cluster first, as below: what cannot be read there leaves everything as it is.
    if let Cluster::Unresolved { prefix, error } = cluster {
        return Ok(unresolved(prefix, error, "nothing was cleared"));
    }
    let cluster = cluster.etcd();
    let mut causes = Vec::new();
    match latch_file::read(path) {
        Ok(None) => {}
        Ok(Some(f)) => causes.push(f.one_line()),
        Err(e) => causes.push(format!("unreadable latch ({e})")),
    }
    causes.extend(unsettled_intent(path));
    let cluster_state = match cluster {
        Some(config) => {
            let (record, intents) = read(config).await?;
            if record.is_some() || !intents.is_empty() {
                causes.extend(cluster_lines(config, record.as_ref(), &intents));
            }
            Some((config, record.is_some() || !intents.is_empty()))
        }
        None => None,
    };
    if causes.is_empty() {
        let on = cluster.map_or(String::new(), |c| format!(" or on etcd (prefix {})", c.prefix));
        println!("no latch at {}{on}; nothing to clear", path.display());
        return Ok(0);
    }
    if !yes && !confirmed(path, &causes.join("\n"))? {
        println!("not cleared");
        return Ok(1);
    }
    // The cluster first: when etcd cannot be reached nothing is cleared, and the command
    // can simply be run again.
    if let Some((config, true)) = cluster_state {
        let (latch, intents) = clear_cluster(&client(config)?, &Keys::under(&config.prefix))
            .await
            .map_err(|source| cluster_error(config, source))?;
        println!(
            "cleared the cluster-wide latch on etcd (prefix {}): latch {}, {intents} unsettled intent(s) removed; every replica campaigns again",
            config.prefix,
            if latch { "removed" } else { "was not set" }
        );
    }
    latch_file::clear(path)?;
    // The operator has reconciled the command: its intent record goes with the latch.
    crate::strict::FileIntents::beside(path)
        .clear()
        .map_err(CliError::Intent)?;
    println!("cleared {}", path.display());
    Ok(0)
}

fn confirmed(path: &Path, cause: &str) -> Result<bool, CliError> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::ClearNotConfirmed { path: path.to_owned() });
    }
    print!("{cause}\nClear this latch and allow the strict gateway to run again? Type 'yes': ");
    std::io::stdout().flush().map_err(CliError::Terminal)?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(CliError::Terminal)?;
    Ok(answer.trim() == "yes")
}

fn client(config: &EtcdConfig) -> Result<Etcd, CliError> {
    crate::coord::client(config, ETCD_TIMEOUT).map_err(|source| cluster_error(config, source))
}

fn cluster_error(config: &EtcdConfig, source: crate::coord::etcd::EtcdError) -> CliError {
    CliError::Cluster {
        prefix: config.prefix.clone(),
        source,
    }
}

async fn read(config: &EtcdConfig) -> Result<(Option<ClusterRecord>, Vec<KeyValue>), CliError> {
    read_cluster(&client(config)?, &Keys::under(&config.prefix))
        .await
        .map_err(|source| cluster_error(config, source))
}

/// The cluster latch and the unsettled intents, in words.
fn cluster_lines(config: &EtcdConfig, record: Option<&ClusterRecord>, intents: &[KeyValue]) -> Vec<String> {
    let mut lines = vec![match record {
        None => format!("no cluster-wide latch on etcd (prefix {})", config.prefix),
        Some(r) => format!(
            "cluster-wide latch on etcd (prefix {}), set by instance {}: {}",
            config.prefix,
            r.latched_by,
            r.fatal.one_line()
        ),
    }];
    for kv in intents {
        let what = match serde_json::from_slice::<Intent>(&kv.value) {
            Ok(i) => describe(&i),
            Err(_) => format!("unreadable record at {}", kv.key),
        };
        lines.push(format!(
            "unsettled write-ahead intent on etcd: {what}; the next active latches interrupted_before_ack on it"
        ));
    }
    lines
}

/// A write-ahead intent an earlier strict run left unsettled, in words; `None` if none.
fn unsettled_intent(latch: &Path) -> Option<String> {
    let intents = crate::strict::FileIntents::beside(latch);
    let what = match intents.read() {
        crate::strict::Unsettled::None => return None,
        crate::strict::Unsettled::Intent(i) => describe(&i),
        crate::strict::Unsettled::Unreadable(e) => format!("unreadable ({e})"),
    };
    Some(format!(
        "unsettled write-ahead intent at {}: {what}; the next strict start latches interrupted_before_ack on it",
        intents.path().display()
    ))
}

/// One intent record in words: who, where and when, never a payload.
fn describe(i: &Intent) -> String {
    format!(
        "request_id={} channel={} method={} written_at={} instance_id={}",
        i.request_id,
        i.channel,
        i.method.as_deref().unwrap_or("-"),
        i.written_at,
        i.instance_id
    )
}
