//! The `tls` tables (`control_plane.tls`, `mcp.tls`, `mcp.channels.NAME.tls`): which
//! files hold a private CA and a client certificate, as paths (egress's [`TlsFiles`]).
//!
//! Invariants of the result: a client certificate comes with its key (neither alone);
//! `ca_only = true` comes with a `ca_file`; no path is empty; only HTTP channels have a
//! `tls` table; a channel's table overrides `mcp.tls` key by key, and each path keeps the
//! dotted key it came from, so that a later error names it. The files themselves are
//! read by `egress::tls` (at startup, by `doctor`, and again whenever they change):
//! nothing here touches them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::error::ConfigError;
use super::raw::{RawChannel, RawTls};
use super::ChannelName;
use crate::egress::tls::{ClientIdentity, TlsFile, TlsFiles};

/// `control_plane.tls`.
pub(super) fn control_plane_tls(raw: Option<RawTls>) -> Result<TlsFiles, ConfigError> {
    let raw = raw.unwrap_or_default();
    files(&Scoped::all("control_plane.tls", &raw))
}

/// `harpoon.tls`.
pub(super) fn harpoon_tls(raw: Option<RawTls>) -> Result<TlsFiles, ConfigError> {
    let raw = raw.unwrap_or_default();
    files(&Scoped::all("harpoon.tls", &raw))
}

/// `coordination.etcd.tls`.
pub(super) fn coordination_tls(raw: Option<RawTls>) -> Result<TlsFiles, ConfigError> {
    let raw = raw.unwrap_or_default();
    files(&Scoped::all("coordination.etcd.tls", &raw))
}

/// `mcp.tls` and each HTTP channel's effective table, taken out of the raw channels (a
/// stdio channel's `tls` is an error). Channels without any TLS setting are left out.
pub(super) fn mcp_tls(
    mcp: Option<RawTls>,
    channels: &mut BTreeMap<String, RawChannel>,
) -> Result<(TlsFiles, BTreeMap<ChannelName, TlsFiles>), ConfigError> {
    let shared = mcp.unwrap_or_default();
    let shared_files = files(&Scoped::all("mcp.tls", &shared))?;
    let mut by_channel = BTreeMap::new();
    for (name, channel) in channels.iter_mut() {
        let own = channel.tls.take();
        let key = format!("mcp.channels.{name}.tls");
        if channel.command.is_some() {
            if own.is_some() {
                return Err(ConfigError::invalid(
                    key,
                    "only applies to HTTP channels (url = ...); a stdio child is not reached over TLS",
                ));
            }
            continue;
        }
        let scoped = Scoped::merged("mcp.tls", &shared, &key, own.as_ref());
        let effective = files(&scoped)?;
        if !effective.is_empty() {
            // An invalid name is reported by the channel rules, with their wording.
            if let Ok(name) = ChannelName::parse(name) {
                by_channel.insert(name, effective);
            }
        }
    }
    Ok((shared_files, by_channel))
}

/// Each key's value with the dotted key it came from.
struct Scoped {
    ca_file: Option<(String, String)>,
    client_cert: Option<(String, String)>,
    client_key: Option<(String, String)>,
    ca_only: Option<(String, bool)>,
    /// The table that errors spanning keys are reported on.
    table: String,
}

impl Scoped {
    fn all(table: &str, raw: &RawTls) -> Self {
        Self::merged(table, raw, table, None)
    }

    /// `own` (at `own_table`) over `base` (at `base_table`), key by key.
    fn merged(base_table: &str, base: &RawTls, own_table: &str, own: Option<&RawTls>) -> Self {
        fn pick<T: Clone>(
            own: Option<&RawTls>,
            base: &RawTls,
            get: fn(&RawTls) -> &Option<T>,
            own_table: &str,
            base_table: &str,
            name: &str,
        ) -> Option<(String, T)> {
            if let Some(v) = own.and_then(|o| get(o).clone()) {
                return Some((format!("{own_table}.{name}"), v));
            }
            get(base).clone().map(|v| (format!("{base_table}.{name}"), v))
        }
        Scoped {
            ca_file: pick(own, base, |r| &r.ca_file, own_table, base_table, "ca_file"),
            client_cert: pick(own, base, |r| &r.client_cert, own_table, base_table, "client_cert"),
            client_key: pick(own, base, |r| &r.client_key, own_table, base_table, "client_key"),
            ca_only: pick(own, base, |r| &r.ca_only, own_table, base_table, "ca_only"),
            table: own_table.to_owned(),
        }
    }
}

fn files(scoped: &Scoped) -> Result<TlsFiles, ConfigError> {
    let ca_file = scoped.ca_file.as_ref().map(file).transpose()?;
    let ca_only = scoped.ca_only.as_ref().is_some_and(|(_, v)| *v);
    if ca_only && ca_file.is_none() {
        let key = scoped.ca_only.as_ref().map_or(scoped.table.clone(), |(k, _)| k.clone());
        return Err(ConfigError::invalid(
            key,
            "is true but no ca_file is set: there would be nothing to trust; set ca_file, or remove ca_only",
        ));
    }
    let client = match (&scoped.client_cert, &scoped.client_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(ClientIdentity {
            cert: file(cert)?,
            key: file(key)?,
        }),
        (Some((key, _)), None) => {
            return Err(ConfigError::invalid(
                key.clone(),
                format!("is set without its key; set {}.client_key too", scoped.table),
            ))
        }
        (None, Some((key, _))) => {
            return Err(ConfigError::invalid(
                key.clone(),
                format!("is set without its certificate; set {}.client_cert too", scoped.table),
            ))
        }
    };
    Ok(TlsFiles {
        ca_file,
        ca_only,
        client,
    })
}

fn file((key, path): &(String, String)) -> Result<TlsFile, ConfigError> {
    if path.trim().is_empty() {
        return Err(ConfigError::invalid(
            key.clone(),
            "is empty; give the path of a PEM file",
        ));
    }
    Ok(TlsFile {
        path: PathBuf::from(path),
        key: key.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(ca: Option<&str>, cert: Option<&str>, key: Option<&str>, ca_only: Option<bool>) -> RawTls {
        RawTls {
            ca_file: ca.map(str::to_owned),
            client_cert: cert.map(str::to_owned),
            client_key: key.map(str::to_owned),
            ca_only,
        }
    }

    #[test]
    fn a_channel_table_overrides_the_shared_one_key_by_key_and_keeps_each_key_name() {
        let shared = raw(Some("/ca.pem"), Some("/shared.crt"), Some("/shared.key"), None);
        let own = raw(None, Some("/own.crt"), Some("/own.key"), None);
        let merged = files(&Scoped::merged("mcp.tls", &shared, "mcp.channels.a.tls", Some(&own))).unwrap();
        let ca = merged.ca_file.unwrap();
        assert_eq!(
            (ca.path.to_str().unwrap(), ca.key.as_str()),
            ("/ca.pem", "mcp.tls.ca_file")
        );
        let client = merged.client.unwrap();
        assert_eq!(client.cert.key, "mcp.channels.a.tls.client_cert");
        assert_eq!(client.key.path.to_str().unwrap(), "/own.key");
    }

    #[test]
    fn a_certificate_without_its_key_and_ca_only_without_a_ca_are_errors_naming_the_key() {
        let e = files(&Scoped::all("control_plane.tls", &raw(None, Some("/c"), None, None))).unwrap_err();
        assert_eq!(e.key(), "control_plane.tls.client_cert");
        assert!(e.problem().contains("client_key"), "{}", e.problem());
        let e = files(&Scoped::all("mcp.tls", &raw(None, None, Some("/k"), None))).unwrap_err();
        assert_eq!(e.key(), "mcp.tls.client_key");
        let e = files(&Scoped::all("mcp.tls", &raw(None, None, None, Some(true)))).unwrap_err();
        assert_eq!(e.key(), "mcp.tls.ca_only");
        let e = files(&Scoped::all("mcp.tls", &raw(Some(" "), None, None, None))).unwrap_err();
        assert_eq!(e.key(), "mcp.tls.ca_file");
    }

    fn load(pairs: &[(&str, &str)], toml: Option<&str>) -> Result<crate::config::Config, ConfigError> {
        let mut env: Vec<(String, String)> = [
            ("CONTROL_PLANE_API_KEY", "k"),
            ("CONTROL_PLANE_TUNNEL_ID", "tunnel_t"),
            ("MCP_SERVER_URL", "https://127.0.0.1:1/mcp"),
        ]
        .iter()
        .chain(pairs)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        env.sort();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), toml.unwrap_or("")).unwrap();
        crate::config::Config::load_with_env(Some(file.path()), &Default::default(), &env)
    }

    #[test]
    fn the_official_clients_variables_set_both_scopes_ca_and_each_scopes_certificate() {
        let config = load(
            &[
                ("CA_BUNDLE", "/pki/ca.pem"),
                ("CONTROL_PLANE_CLIENT_CERT", "/pki/cp.crt"),
                ("CONTROL_PLANE_CLIENT_KEY", "/pki/cp.key"),
                ("MCP_CLIENT_CERT", "/pki/mcp.crt"),
                ("MCP_CLIENT_KEY", "/pki/mcp.key"),
            ],
            None,
        )
        .unwrap();
        let cp = &config.control_plane.tls;
        assert_eq!(cp.ca_file.as_ref().unwrap().path.to_str(), Some("/pki/ca.pem"));
        assert_eq!(cp.client.as_ref().unwrap().cert.path.to_str(), Some("/pki/cp.crt"));
        let main = config.mcp.tls_of("main");
        assert_eq!(main.ca_file.as_ref().unwrap().key, "mcp.tls.ca_file");
        assert_eq!(main.client.as_ref().unwrap().key.path.to_str(), Some("/pki/mcp.key"));
        // The file wins over the variables, key by key.
        let config = load(
            &[("CA_BUNDLE", "/pki/ca.pem")],
            Some("[control_plane.tls]\nca_file = \"/etc/own.pem\"\nca_only = true\n"),
        )
        .unwrap();
        assert_eq!(
            config.control_plane.tls.ca_file.as_ref().unwrap().path.to_str(),
            Some("/etc/own.pem")
        );
        assert!(config.control_plane.tls.ca_only);
        assert!(
            config.masked().contains("ca_file = \"/etc/own.pem\""),
            "{}",
            config.masked()
        );
    }

    #[test]
    fn a_certificate_variable_without_its_key_is_an_error_naming_the_variable() {
        let e = load(&[("MCP_CLIENT_CERT", "/pki/mcp.crt")], None).unwrap_err();
        assert_eq!(e.key(), "mcp.tls.client_cert");
        assert!(e.to_string().contains("MCP_CLIENT_CERT"), "{e}");
    }

    #[test]
    fn a_stdio_channel_cannot_have_a_tls_table() {
        let toml = "[mcp.channels.tools]\ncommand = [\"x\"]\n[mcp.channels.tools.tls]\nca_file = \"/c\"\n";
        let e = load(&[], Some(toml)).unwrap_err();
        assert_eq!(e.key(), "mcp.channels.tools.tls");
        assert!(e.problem().contains("only applies to HTTP channels"), "{e}");
    }

    #[test]
    fn nothing_set_is_empty() {
        assert!(files(&Scoped::all("mcp.tls", &RawTls::default())).unwrap().is_empty());
    }
}
