//! `[coordination]`: whether strict replicas share one fence through etcd, and how etcd is
//! reached.
//!
//! Invariants of the result: `backend = "etcd"` comes with strict mode, at least one
//! endpoint, and a `lease_ttl` of at least [`MIN_LEASE_TTL`]; endpoints are http(s) URLs
//! with no path, query or credentials; the prefix starts with `/` and does not end with
//! one; a username comes with its password (both are secret references, resolved here
//! and never printed). Nothing here talks to etcd.

use std::time::Duration;

use super::duration::positive_duration;
use super::error::ConfigError;
use super::layers::EnvVars;
use super::raw::{RawCoordination, RawEtcd};
use super::{Secret, TunnelId};
use crate::egress::http_url::HttpUrl;
use crate::egress::tls::TlsFiles;

/// The shortest `coordination.lease_ttl`: a renewal every third of it must still fit a
/// round trip to etcd with room.
pub(crate) const MIN_LEASE_TTL: Duration = Duration::from_secs(2);

const DEFAULT_LEASE_TTL: &str = "10s";
const DEFAULT_STEP_DOWN_AFTER: &str = "10s";

/// The shortest `coordination.step_down_after`: a standby must have checked the control
/// plane at least once since the active's polls began failing.
pub(super) const MIN_STEP_DOWN_AFTER: Duration = Duration::from_secs(1);
const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:2379";

/// `[coordination]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordination {
    /// `coordination.lease_ttl`: how long the active's lease lives without a renewal.
    pub lease_ttl: Duration,
    /// `coordination.step_down_after`: how long every poll of the active may fail before
    /// it gives up its lease to a standby that reports the control plane reachable (and
    /// before `/readyz` reports it not ready).
    pub step_down_after: Duration,
    /// `None` for `backend = "none"`: the fence is this process's own.
    pub etcd: Option<EtcdConfig>,
}

/// `[coordination.etcd]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Tried in order; at least one.
    pub endpoints: Vec<HttpUrl>,
    /// Every key of this tunnel lives under it; `/tunnelgate/<tunnel_id>` by default.
    pub prefix: String,
    /// etcd's own authentication (`username` and `password` both, or neither).
    pub credentials: Option<(Secret, Secret)>,
    /// `coordination.etcd.tls`: a private CA and a client certificate.
    pub tls: TlsFiles,
}

impl Coordination {
    /// Whether replicas coordinate through etcd.
    pub fn is_etcd(&self) -> bool {
        self.etcd.is_some()
    }

    /// The backend's name, as configured (`none` or `etcd`).
    pub fn backend(&self) -> &'static str {
        if self.is_etcd() {
            "etcd"
        } else {
            "none"
        }
    }
}

pub(super) fn coordination(
    raw: RawCoordination,
    strict: bool,
    tunnel_id: &TunnelId,
    env: &EnvVars,
) -> Result<Coordination, ConfigError> {
    let lease_ttl = positive_duration("coordination.lease_ttl", raw.lease_ttl, DEFAULT_LEASE_TTL)?;
    if lease_ttl < MIN_LEASE_TTL {
        return Err(ConfigError::invalid(
            "coordination.lease_ttl",
            format!(
                "must be at least {}s (found {}ms): the active renews every third of it",
                MIN_LEASE_TTL.as_secs(),
                lease_ttl.as_millis()
            ),
        ));
    }
    let step_down_after = positive_duration(
        "coordination.step_down_after",
        raw.step_down_after,
        DEFAULT_STEP_DOWN_AFTER,
    )?;
    if step_down_after < MIN_STEP_DOWN_AFTER {
        return Err(ConfigError::invalid(
            "coordination.step_down_after",
            format!(
                "must be at least {}s (found {}ms): a standby checks the control plane at most every second",
                MIN_STEP_DOWN_AFTER.as_secs(),
                step_down_after.as_millis()
            ),
        ));
    }
    let etcd = match raw.backend.as_deref().unwrap_or("none") {
        "none" => None,
        "etcd" if !strict => {
            return Err(ConfigError::invalid(
                "coordination.backend",
                "is \"etcd\" but strict.enabled is false: coordination is strict mode's fence across replicas; \
                 default-mode replicas share a tunnel without it (docs/replicas.md, \"Several replicas\"). Set \
                 strict.enabled = true, or coordination.backend = \"none\"",
            ))
        }
        "etcd" => Some(etcd(raw.etcd.unwrap_or_default(), tunnel_id, env)?),
        other => {
            return Err(ConfigError::invalid(
                "coordination.backend",
                format!("{other:?} is not a backend; use \"none\" (one process's fence) or \"etcd\""),
            ))
        }
    };
    Ok(Coordination {
        lease_ttl,
        step_down_after,
        etcd,
    })
}

fn etcd(raw: RawEtcd, tunnel_id: &TunnelId, env: &EnvVars) -> Result<EtcdConfig, ConfigError> {
    let written = raw.endpoints.unwrap_or_else(|| vec![DEFAULT_ENDPOINT.to_owned()]);
    if written.is_empty() {
        return Err(ConfigError::invalid(
            "coordination.etcd.endpoints",
            "is empty; give at least one client URL, e.g. [\"https://etcd-0.etcd:2379\"]",
        ));
    }
    let endpoints = written
        .iter()
        .enumerate()
        .map(|(i, e)| endpoint(&format!("coordination.etcd.endpoints[{i}]"), e))
        .collect::<Result<Vec<_>, _>>()?;
    let prefix = prefix(raw.prefix, tunnel_id)?;
    let credentials = match (raw.username, raw.password) {
        (None, None) => None,
        (Some(user), Some(password)) => Some((
            Secret::resolve("coordination.etcd.username", &user, env)?,
            Secret::resolve("coordination.etcd.password", &password, env)?,
        )),
        (Some(_), None) => {
            return Err(ConfigError::invalid(
                "coordination.etcd.username",
                "is set without coordination.etcd.password; set both, or neither",
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::invalid(
                "coordination.etcd.password",
                "is set without coordination.etcd.username; set both, or neither",
            ))
        }
    };
    Ok(EtcdConfig {
        endpoints,
        prefix,
        credentials,
        tls: super::tls::coordination_tls(raw.tls)?,
    })
}

/// A client URL: scheme, host and port only (the gateway adds `/v3/...`).
fn endpoint(key: &str, value: &str) -> Result<HttpUrl, ConfigError> {
    let url = HttpUrl::base(key, value)?;
    let after_scheme = url.split_once("://").map_or("", |(_, rest)| rest);
    if after_scheme.contains('/') {
        return Err(ConfigError::invalid(
            key,
            "has a path; give only scheme, host and port, e.g. \"https://etcd-0.etcd:2379\"",
        ));
    }
    Ok(url)
}

fn prefix(raw: Option<String>, tunnel_id: &TunnelId) -> Result<String, ConfigError> {
    const KEY: &str = "coordination.etcd.prefix";
    let Some(prefix) = raw else {
        return Ok(format!("/tunnelgate/{}", tunnel_id.as_str()));
    };
    if !prefix.starts_with('/') || prefix.len() < 2 {
        return Err(ConfigError::invalid(
            KEY,
            format!("{prefix:?} must start with \"/\" and name a key, e.g. \"/tunnelgate/prod\""),
        ));
    }
    if prefix.ends_with('/') {
        return Err(ConfigError::invalid(
            KEY,
            format!(
                "{prefix:?} ends with \"/\"; give it without, e.g. {:?}",
                prefix.trim_end_matches('/')
            ),
        ));
    }
    if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ConfigError::invalid(KEY, "contains whitespace or control characters"));
    }
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tunnel() -> TunnelId {
        TunnelId::parse(Some("tunnel_1".to_owned())).unwrap()
    }

    fn with(
        backend: Option<&str>,
        ttl: Option<&str>,
        etcd: RawEtcd,
        strict: bool,
    ) -> Result<Coordination, ConfigError> {
        let raw = RawCoordination {
            backend: backend.map(str::to_owned),
            lease_ttl: ttl.map(str::to_owned),
            step_down_after: None,
            etcd: Some(etcd),
        };
        coordination(raw, strict, &tunnel(), &EnvVars::new(&[]))
    }

    #[test]
    fn the_default_is_no_backend_and_a_ten_second_lease() {
        let c = with(None, None, RawEtcd::default(), true).unwrap();
        assert_eq!(c.backend(), "none");
        assert_eq!(c.lease_ttl, Duration::from_secs(10));
        assert_eq!(c.step_down_after, Duration::from_secs(10));
    }

    #[test]
    fn step_down_after_is_at_least_a_second_and_a_duration() {
        for (value, expected) in [("500ms", "at least 1s"), ("soon", "soon")] {
            let raw = RawCoordination {
                step_down_after: Some(value.to_owned()),
                ..RawCoordination::default()
            };
            let e = coordination(raw, true, &tunnel(), &EnvVars::new(&[])).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("coordination.step_down_after"), "{text}");
            assert!(text.contains(expected), "{value}: {text}");
        }
        let raw = RawCoordination {
            step_down_after: Some("3s".to_owned()),
            ..RawCoordination::default()
        };
        let c = coordination(raw, true, &tunnel(), &EnvVars::new(&[])).unwrap();
        assert_eq!(c.step_down_after, Duration::from_secs(3));
    }

    #[test]
    fn etcd_defaults_to_loopback_and_the_tunnels_own_prefix() {
        let c = with(Some("etcd"), None, RawEtcd::default(), true).unwrap();
        let etcd = c.etcd.unwrap();
        assert_eq!(etcd.endpoints[0].as_str(), "http://127.0.0.1:2379");
        assert_eq!(etcd.prefix, "/tunnelgate/tunnel_1");
        assert!(etcd.credentials.is_none());
    }

    #[test]
    fn each_bad_value_names_its_key() {
        /// backend, lease_ttl, the etcd table, strict, the key the error names.
        type Case<'a> = (Option<&'a str>, Option<&'a str>, RawEtcd, bool, &'a str);
        let cases: Vec<Case> = vec![
            (
                Some("zookeeper"),
                None,
                RawEtcd::default(),
                true,
                "coordination.backend",
            ),
            (Some("etcd"), None, RawEtcd::default(), false, "coordination.backend"),
            (None, Some("1500ms"), RawEtcd::default(), true, "coordination.lease_ttl"),
            (None, Some("soon"), RawEtcd::default(), true, "coordination.lease_ttl"),
            (
                Some("etcd"),
                None,
                RawEtcd {
                    endpoints: Some(vec![]),
                    ..RawEtcd::default()
                },
                true,
                "coordination.etcd.endpoints",
            ),
            (
                Some("etcd"),
                None,
                RawEtcd {
                    endpoints: Some(vec!["http://a:2379".into(), "http://b:2379/v3".into()]),
                    ..RawEtcd::default()
                },
                true,
                "coordination.etcd.endpoints[1]",
            ),
            (
                Some("etcd"),
                None,
                RawEtcd {
                    endpoints: Some(vec!["etcd:2379".into()]),
                    ..RawEtcd::default()
                },
                true,
                "coordination.etcd.endpoints[0]",
            ),
            (
                Some("etcd"),
                None,
                RawEtcd {
                    prefix: Some("tunnelgate".into()),
                    ..RawEtcd::default()
                },
                true,
                "coordination.etcd.prefix",
            ),
            (
                Some("etcd"),
                None,
                RawEtcd {
                    prefix: Some("/tunnelgate/".into()),
                    ..RawEtcd::default()
                },
                true,
                "coordination.etcd.prefix",
            ),
            (
                Some("etcd"),
                None,
                RawEtcd {
                    username: Some("gateway".into()),
                    ..RawEtcd::default()
                },
                true,
                "coordination.etcd.username",
            ),
            (
                Some("etcd"),
                None,
                RawEtcd {
                    password: Some("env:ETCD_PASSWORD_UNSET_HERE".into()),
                    ..RawEtcd::default()
                },
                true,
                "coordination.etcd.password",
            ),
        ];
        for (backend, ttl, etcd, strict, key) in cases {
            let err = with(backend, ttl, etcd, strict).unwrap_err();
            assert_eq!(err.key(), key, "{err}");
        }
    }

    #[test]
    fn credentials_are_resolved_and_never_printed() {
        let env = EnvVars::new(&[("ETCD_PW".to_owned(), "s3cret-pw".to_owned())]);
        let raw = RawCoordination {
            backend: Some("etcd".into()),
            lease_ttl: None,
            step_down_after: None,
            etcd: Some(RawEtcd {
                username: Some("gateway".into()),
                password: Some("env:ETCD_PW".into()),
                ..RawEtcd::default()
            }),
        };
        let c = coordination(raw, true, &tunnel(), &env).unwrap();
        let (user, password) = c.etcd.as_ref().unwrap().credentials.clone().unwrap();
        assert_eq!(user.expose(), "gateway");
        assert_eq!(password.expose(), "s3cret-pw");
        assert!(!format!("{c:?}").contains("s3cret-pw"));
    }
}
