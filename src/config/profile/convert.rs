//! An official profile, key by key, as tunnelgate's TOML keys (the table of
//! docs/configuration.md, "Official profiles").
//!
//! Invariant: no setting of the profile is dropped in silence. Each one becomes a
//! tunnelgate key; or, when it has no equivalent, a note (a comment line of the output)
//! if its value is the official default and tunnelgate behaves the same; or a refusal,
//! naming the YAML key, why, and what to do. Every refusal is collected; a profile with
//! any is not converted. Secrets stay references (`env:`, `file:`) or the literal the
//! profile holds, never resolved here; values tunnelgate reads as plain text (URLs,
//! paths, commands) are resolved from `env:`/`file:` references, as upstream resolves
//! them when it loads the profile, and a note says where each came from.

mod harpoon;
mod mcp;
mod sections;

use toml::{Table, Value};

use super::super::layers::EnvVars;
use super::schema::Profile;
use super::{refs, Refusal};

/// How the converted table is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `tunnelgate profile convert`: a TOML file of its own.
    Print,
    /// Read directly as the file layer, below the official variables: a variable that
    /// upstream lets replace a whole map of the profile (`CONTROL_PLANE_EXTRA_HEADERS`,
    /// `MCP_EXTRA_HEADERS`, `MCP_DISCOVERY_EXTRA_HEADERS`) drops that map, as upstream.
    Layer,
}

/// The conversion of one profile.
#[derive(Debug, Default)]
pub(super) struct Output {
    pub(super) table: Table,
    /// Comment lines (without `# `), in the profile's key order.
    pub(super) notes: Vec<String>,
    pub(super) refusals: Vec<Refusal>,
}

/// What a conversion carries along.
pub(super) struct Conversion<'a> {
    env: &'a EnvVars,
    mode: Mode,
    /// `config_version: 2` (templates allowed).
    version_2: bool,
    out: Output,
}

/// The official control plane, and the one upstream switches to for a client certificate.
const OFFICIAL_BASE_URL: &str = "https://api.openai.com";
const OFFICIAL_MTLS_BASE_URL: &str = "https://mtls.api.openai.com";

pub(super) fn convert(profile: Profile, env: &EnvVars, mode: Mode) -> Output {
    let mut c = Conversion {
        env,
        mode,
        version_2: profile.config_version == Some(2),
        out: Output::default(),
    };
    let global_proxy = c.top_level(profile.ca_bundle, profile.http_proxy.as_deref());
    c.control_plane(profile.control_plane.unwrap_or_default());
    c.log(profile.log.unwrap_or_default());
    c.health(profile.health.unwrap_or_default());
    c.admin_ui(profile.admin_ui.unwrap_or_default());
    if let Some(pid_file) = profile.process.unwrap_or_default().pid_file {
        c.plain_path("process.pid_file", &pid_file, &["runtime", "pid_file"]);
    }
    c.cloudflared(profile.cloudflared.unwrap_or_default());
    c.mcp(profile.mcp.unwrap_or_default());
    c.harpoon(profile.harpoon.unwrap_or_default());
    c.proxy_check(profile.proxy.unwrap_or_default());
    if let Some(proxy) = global_proxy {
        for scope in ["control_plane", "mcp", "harpoon"] {
            if c.get(&[scope, "proxy"]).is_none() {
                c.set(&[scope, "proxy"], proxy.clone());
            }
        }
    }
    c.out
}

impl Conversion<'_> {
    /// `ca_bundle` (every scope `CA_BUNDLE` sets) and `http_proxy` (returned: it applies
    /// last, to each scope without a proxy of its own).
    fn top_level(&mut self, ca_bundle: Option<String>, http_proxy: Option<&str>) -> Option<String> {
        if let Some(raw) = ca_bundle {
            if let Some(path) = self.path("ca_bundle", &raw) {
                for scope in ["control_plane", "mcp", "harpoon"] {
                    self.set(&[scope, "tls", "ca_file"], path.clone());
                }
            }
        }
        http_proxy.and_then(|raw| self.proxy("http_proxy", raw))
    }

    fn set(&mut self, path: &[&str], value: impl Into<Value>) {
        let (last, tables) = path.split_last().expect("a key path has a key");
        let mut table = &mut self.out.table;
        for key in tables {
            let entry = table
                .entry((*key).to_owned())
                .or_insert_with(|| Value::Table(Table::new()));
            table = entry
                .as_table_mut()
                .expect("the conversion writes a table where it nests keys");
        }
        table.insert((*last).to_owned(), value.into());
    }

    fn get(&self, path: &[&str]) -> Option<&Value> {
        let (last, tables) = path.split_last()?;
        let mut table = &self.out.table;
        for key in tables {
            table = table.get(*key)?.as_table()?;
        }
        table.get(*last)
    }

    fn note(&mut self, line: String) {
        self.out.notes.push(line);
    }

    fn refuse(&mut self, key: &str, problem: impl Into<String>) {
        self.out.refusals.push(Refusal {
            key: key.to_owned(),
            problem: problem.into(),
        });
    }

    /// A setting with no tunnelgate key: a note when it is `default` (`same` says why
    /// nothing is lost), else a refusal (`instead` says what to do).
    fn default_only<T: PartialEq + std::fmt::Display>(
        &mut self,
        key: &str,
        value: Option<T>,
        default: &T,
        (same, instead): (&str, &str),
    ) {
        match value {
            None => {}
            Some(v) if v == *default => self.note(format!("{key} = {v}: the official default; {same}")),
            Some(v) => self.refuse(key, format!("{v} has no tunnelgate equivalent: {same}; {instead}")),
        }
    }

    /// A value reference resolved (see `refs::value`), or a refusal.
    fn value(&mut self, key: &str, raw: &str) -> Option<String> {
        match refs::value(raw, self.env) {
            Ok(resolved) => {
                if let Some(from) = resolved.from {
                    self.note(format!("{key}: read from {from} when the profile was read"));
                }
                Some(resolved.value)
            }
            Err(problem) => {
                self.refuse(key, problem);
                None
            }
        }
    }

    /// A path reference resolved (see `refs::path`); `None` when blank or refused.
    fn path(&mut self, key: &str, raw: &str) -> Option<String> {
        match refs::path(raw, self.env) {
            Ok(Some(resolved)) => {
                if let Some(from) = resolved.from {
                    self.note(format!("{key}: the path in {from} when the profile was read"));
                }
                Some(resolved.value)
            }
            Ok(None) => None,
            Err(problem) => {
                self.refuse(key, problem);
                None
            }
        }
    }

    /// A proxy as tunnelgate's value (`"http://..."` or `"env:NAME"`), or a refusal.
    fn proxy(&mut self, key: &str, raw: &str) -> Option<String> {
        refs::proxy(raw).map_err(|problem| self.refuse(key, problem)).ok()
    }

    /// A secret as tunnelgate's reference, or a refusal.
    fn secret(&mut self, key: &str, raw: &str) -> Option<String> {
        refs::secret(raw).map_err(|problem| self.refuse(key, problem)).ok()
    }

    /// A Go duration as tunnelgate's duration text, or a refusal.
    fn duration(&mut self, key: &str, raw: &str) -> Option<std::time::Duration> {
        refs::go_duration(raw).map_err(|problem| self.refuse(key, problem)).ok()
    }

    /// A plain path (no reference form upstream) at `to`; blank is unset.
    fn plain_path(&mut self, key: &str, raw: &str, to: &[&str]) {
        if raw.trim().is_empty() {
            self.note(format!("{key} is empty: unset, as upstream reads it"));
        } else {
            self.set(to, raw.to_owned());
        }
    }

    /// A header table (`Name: reference`) as tunnelgate's, or `None` when it is empty or
    /// one of its values is refused.
    fn headers(&mut self, key: &str, map: super::schema::UniqueMap<String>) -> Option<Table> {
        let mut table = Table::new();
        let mut refused = false;
        for (name, raw) in map.0 {
            match self.secret(&format!("{key}.{name}"), &raw) {
                Some(reference) => {
                    table.insert(name, Value::String(reference));
                }
                None => refused = true,
            }
        }
        (!refused && !table.is_empty()).then_some(table)
    }

    /// Whether an official variable replaces the profile's map (direct reading only).
    fn replaced_by(&mut self, key: &str, var: &str) -> bool {
        if self.mode == Mode::Layer && self.env.get(var).is_some() {
            self.note(format!(
                "{key}: not read, as {var} is set (it replaces the profile's, as upstream)"
            ));
            return true;
        }
        false
    }
}
