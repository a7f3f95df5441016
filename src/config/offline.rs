//! `OfflineConfig`: the configuration as the commands that read only local files load it
//! (`latch show|clear`, `receipts`, `support-bundle`), so that they work in a shell that
//! holds none of the gateway's secrets.
//!
//! Invariants: every key is validated exactly as [`Config::load`](super::Config::load)
//! validates it; only a secret reference whose variable or file gives no value here is
//! kept unresolved (empty, masked as `"env:NAME (unresolved)"`), and
//! [`OfflineConfig::unresolved`] names each one with the error a full load would give.
//! The whole [`Config`] leaves this type only through [`OfflineConfig::complete`], when
//! nothing is unresolved, or, inside the crate, through [`OfflineConfig::partial`] for
//! reading what it does hold (the secret scan, the etcd prefix); outside the crate no
//! code can get a `Config` with an unresolved secret, and inside it nothing that sends
//! one may be given `partial()`. The etcd credentials, which `latch` does send, come only
//! through [`OfflineConfig::etcd`], which refuses them unresolved.

use super::{Config, ConfigError, EtcdConfig, Ops, Receipts, Strict};

/// A configuration loaded by [`Config::load_offline`](super::Config::load_offline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfflineConfig {
    config: Config,
    /// Each reference kept unresolved, in the order of the load.
    unresolved: Vec<ConfigError>,
}

impl OfflineConfig {
    pub(super) fn new(config: Config, unresolved: Vec<ConfigError>) -> Self {
        OfflineConfig { config, unresolved }
    }

    /// `[strict]`: the latch file's path.
    pub fn strict(&self) -> &Strict {
        &self.config.strict
    }

    /// `[receipts]`: the journal's path.
    pub fn receipts(&self) -> &Receipts {
        &self.config.receipts
    }

    /// `[ops]`: where the running gateway's ops listener is.
    pub fn ops(&self) -> &Ops {
        &self.config.ops
    }

    /// The secret references kept unresolved, each the error a full load gives for it
    /// (key and problem); empty when every secret resolved.
    pub fn unresolved(&self) -> &[ConfigError] {
        &self.unresolved
    }

    /// The whole configuration when every secret resolved; otherwise the first
    /// reference that did not (what `check` would report).
    pub fn complete(&self) -> Result<&Config, &ConfigError> {
        match self.unresolved.first() {
            None => Ok(&self.config),
            Some(error) => Err(error),
        }
    }

    /// `coordination.etcd`, when configured, if its credentials resolved (they are sent
    /// to etcd); otherwise the error naming the credential that did not.
    pub fn etcd(&self) -> Result<Option<&EtcdConfig>, &ConfigError> {
        let Some(etcd) = &self.config.coordination.etcd else {
            return Ok(None);
        };
        let unresolved = etcd
            .credentials
            .iter()
            .flat_map(|(user, password)| [user, password])
            .find_map(|secret| secret.unresolved());
        match unresolved {
            None => Ok(Some(etcd)),
            Some(error) => Err(error),
        }
    }

    /// The effective configuration as TOML, as `check` prints it; an unresolved secret
    /// shows as `"env:NAME (unresolved)"`.
    pub fn masked(&self) -> String {
        self.config.masked()
    }

    /// The configuration with its unresolved secrets empty: for reading the values it
    /// does hold (the secret scan), never for sending anything.
    pub fn partial(&self) -> &Config {
        &self.config
    }
}
