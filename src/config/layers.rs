//! The configuration layers as figment providers, and their order.
//!
//! Lowest first: the anchor client's variables < the TOML file < `TUNNELGATE_`
//! variables < command-line overrides (defaults are applied later, in `validation`). An
//! official profile read in place of the TOML file (`profile`) sits below the anchor
//! client's variables instead, as the official client reads its environment over it.
//! The anchor's `MCP_SERVER_URL` / `MCP_COMMAND` become channel `main` only when no
//! other layer configures a channel: a channel is one unit, never half from each.
//!
//! Environment variables come from an [`EnvVars`] snapshot, never read here, so the
//! layering is testable without touching the process environment. The `TUNNELGATE_`
//! layer has figment `Env` semantics (prefix matched case-insensitively, `__` between
//! levels, keys lowercased, values parsed with figment's own `Value` parser), except
//! that the variable names under `mcp.channels.NAME.env` keep their case.
//!
//! Why not figment's `Env` provider itself: it reads `std::env::vars_os()` and nothing
//! else, while a load must see one snapshot for every layer and for `env:` secrets
//! (`Config::load_with_env`, the offline load, tests that run side by side); it
//! lowercases every segment or none; and its errors name `STRICT.SHUTDOWN_GRACE`, not
//! the variable `TUNNELGATE_STRICT__SHUTDOWN_GRACE`. What is left here of it is the key
//! mapping ([`prefixed_env_path`]) and [`insert`]. The anchor client's variables are no
//! `Env` at all: trimmed, blank as unset, read as plain strings (never typed), one
//! variable for two keys (`CA_BUNDLE`), one as the other's fallback
//! (`TUNNEL_CLIENT_HTTP_PROXY`), and values rewritten (`HEALTH_LISTEN_ADDR`,
//! `CONTROL_PLANE_POLL_CHANNELS`, `MCP_COMMAND`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use super::error::{io_words, ConfigError, ErrorKind};
use super::Overrides;

const FILE: &str = "config file";
const PROFILE: &str = "official profile";
const PREFIXED_ENV: &str = "TUNNELGATE_ environment variables";
const ANCHOR: &str = "anchor client variables";
const FLAGS: &str = "command-line overrides";

const PREFIX: &str = "TUNNELGATE_";

/// A snapshot of environment variables (the process's, or a test's), and what a secret
/// reference that it cannot resolve does to the load.
#[derive(Debug, Default)]
pub(super) struct EnvVars {
    vars: BTreeMap<String, String>,
    /// `Some` in an offline load: each such reference's error, noted instead of failing
    /// the load (the load is single-threaded; the cell is never borrowed across a call).
    unresolved: Option<RefCell<Vec<ConfigError>>>,
}

/// The parsed TOML file (or inline TOML), ready to be layered.
#[derive(Debug)]
pub(super) struct FileLayer(Layer);

/// One layer: a nested dictionary plus how to name the source of one of its keys.
#[derive(Debug)]
struct Layer {
    name: &'static str,
    dict: Dict,
    /// Names the variable or flag behind a key path; `None` for the file.
    source: Option<fn(&[&str]) -> String>,
}

/// Merges every layer in order. Fails only on an `MCP_COMMAND` that cannot be split,
/// when it is used.
pub(super) fn figment(file: Option<FileLayer>, overrides: &Overrides, env: &EnvVars) -> Result<Figment, ConfigError> {
    // An official profile sits below the official variables, as upstream reads its
    // environment over its profile; tunnelgate's own file sits above them.
    let (profile, file) = match file {
        Some(FileLayer(layer)) if layer.name == PROFILE => (Some(layer), None),
        other => (None, other.map(|FileLayer(layer)| layer)),
    };
    let mut figment = Figment::new();
    if let Some(profile) = profile {
        figment = figment.merge(profile);
    }
    figment = figment.merge(anchor_scalars(env));
    if let Some(file) = file {
        figment = figment.merge(file);
    }
    figment = figment.merge(prefixed_env(env)).merge(flags(overrides));
    if !has_channels(&figment) {
        figment = figment.join(anchor_channel(env)?);
    }
    Ok(figment)
}

/// `error`, naming which variable or flag set its key when it was not the config file.
pub(super) fn with_source(error: ConfigError, figment: &Figment) -> ConfigError {
    match source_of(figment, error.key()) {
        Some(source) => error.set_by(&source),
        None => error,
    }
}

/// The variable or flag that set `key`, if it was not the config file. A list entry's
/// key (`control_plane.poll_channels[1]`) is set by whatever set its list.
fn source_of(figment: &Figment, key: &str) -> Option<String> {
    let key = key.split_once('[').map_or(key, |(list, _)| list);
    let metadata = figment.find_metadata(key)?;
    if metadata.name == FILE {
        return None;
    }
    let keys: Vec<&str> = key.split('.').collect();
    Some(metadata.interpolate(&Profile::Default, &keys))
}

impl EnvVars {
    pub(super) fn new(pairs: &[(String, String)]) -> Self {
        EnvVars {
            vars: pairs.iter().cloned().collect(),
            unresolved: None,
        }
    }

    /// For an offline load: a secret reference with no value here is kept unresolved.
    pub(super) fn offline(pairs: &[(String, String)]) -> Self {
        EnvVars {
            unresolved: Some(RefCell::default()),
            ..EnvVars::new(pairs)
        }
    }

    /// In an offline load, notes `error` (a reference with no value here) and returns
    /// true; otherwise false, and the error fails the load.
    pub(super) fn keeps_unresolved(&self, error: &ConfigError) -> bool {
        match &self.unresolved {
            Some(noted) => {
                noted.borrow_mut().push(error.clone());
                true
            }
            None => false,
        }
    }

    /// The errors [`EnvVars::keeps_unresolved`] noted, in the order of the load.
    pub(super) fn take_unresolved(&self) -> Vec<ConfigError> {
        self.unresolved.as_ref().map(RefCell::take).unwrap_or_default()
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The trimmed value, if set and not blank (how the anchor client read them).
    fn non_blank(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }
}

/// A config file larger than this is refused rather than read whole.
const MAX_CONFIG_FILE: u64 = 1024 * 1024;

/// Reads a UTF-8 regular file of at most `max` bytes (a symlink to one is followed).
///
/// Anything else (a FIFO, a directory, a device, a socket) is refused at once, before a
/// byte is read: opening a FIFO for reading waits for a writer, and a device may never
/// end. The file is opened non-blocking, so the open itself cannot wait, and its type is
/// read from the open descriptor, so it cannot be swapped after the check.
pub(super) fn read_text(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        // A socket cannot be opened at all: say what it is rather than "no such device".
        Err(e) => {
            return Err(match std::fs::metadata(path) {
                Ok(m) if !m.is_file() => not_regular(&m.file_type()),
                _ => e,
            })
        }
    };
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(&file_type));
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {max} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// "it is a FIFO (named pipe), not a regular file", for any type but a regular file.
fn not_regular(file_type: &std::fs::FileType) -> std::io::Error {
    use std::os::unix::fs::FileTypeExt;
    let what = if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "something else"
    };
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    )
}

impl FileLayer {
    /// Reads and parses the TOML file at `path`.
    pub(super) fn read(path: &Path) -> Result<FileLayer, ConfigError> {
        let shown = path.display().to_string();
        let contents = read_text(path, MAX_CONFIG_FILE).map_err(|e| {
            let problem = format!("cannot read config file: {}", io_words(&e));
            ConfigError::new(ErrorKind::UnreadableFile, &shown, problem)
        })?;
        FileLayer::parse(&shown, &contents)
    }

    /// Parses TOML given as a string.
    pub(super) fn inline(toml: &str) -> Result<FileLayer, ConfigError> {
        FileLayer::parse("configuration", toml)
    }

    /// The TOML an official profile converts to: layered below the official variables,
    /// its keys said to be set by the profile.
    pub(super) fn profile(shown: &str, toml: &str) -> Result<FileLayer, ConfigError> {
        let FileLayer(layer) = FileLayer::parse(shown, toml)?;
        Ok(FileLayer(Layer {
            name: PROFILE,
            source: Some(|_| "the official profile".to_owned()),
            ..layer
        }))
    }

    fn parse(shown: &str, contents: &str) -> Result<FileLayer, ConfigError> {
        let dict: Dict = toml::from_str(contents).map_err(|e| syntax_error(shown, contents, &e))?;
        Ok(FileLayer(Layer {
            name: FILE,
            dict,
            source: None,
        }))
    }
}

/// A TOML syntax error with its position; no excerpt, as the line may hold a secret.
fn syntax_error(shown: &str, contents: &str, error: &toml::de::Error) -> ConfigError {
    let message = error.message().trim().replace('\n', "; ");
    let problem = match error.span() {
        Some(span) => {
            let before = &contents[..span.start.min(contents.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("not valid TOML at line {line}, column {column}: {message}")
        }
        None => format!("not valid TOML: {message}"),
    };
    ConfigError::new(ErrorKind::Syntax, shown, problem)
}

/// `TUNNELGATE_A__B=v` -> `a.b = v`, as figment's `Env::prefixed(..).split("__")`.
fn prefixed_env(env: &EnvVars) -> Layer {
    let mut dict = Dict::new();
    for (name, value) in &env.vars {
        if let Some(path) = prefixed_env_path(name) {
            let value: Value = value.parse().expect("parsing an environment value is infallible");
            insert(&mut dict, &path, value);
        }
    }
    Layer {
        name: PREFIXED_ENV,
        dict,
        source: Some(prefixed_env_var),
    }
}

/// The key path for a `TUNNELGATE_` variable, or `None` if it is not one.
fn prefixed_env_path(name: &str) -> Option<Vec<String>> {
    let name = name.trim();
    let head = name.get(..PREFIX.len())?;
    if !head.eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let rest = name[PREFIX.len()..].trim().replace("__", ".");
    let segments: Vec<&str> = rest.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    let mut path: Vec<String> = segments.iter().map(|s| s.to_ascii_lowercase()).collect();
    if let ["mcp", "channels", _, "env", _] = path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        path[4] = segments[4].to_owned(); // a child's variable name keeps its case
    }
    Some(path)
}

fn prefixed_env_var(keys: &[&str]) -> String {
    let upper: Vec<String> = keys.iter().map(|k| k.to_ascii_uppercase()).collect();
    format!("{PREFIX}{}", upper.join("__"))
}

/// `CONTROL_PLANE_TUNNEL_ID`, `CONTROL_PLANE_BASE_URL`, `CONTROL_PLANE_ORGANIZATION_ID`,
/// `CONTROL_PLANE_POLL_CHANNELS` (a comma-separated list, as the official client reads it),
/// `HEALTH_LISTEN_ADDR` and the official client's proxy variables, taken as plain strings
/// (`HEALTH_LISTEN_ADDR` in the official client's forms too: see [`health_listen`]).
fn anchor_scalars(env: &EnvVars) -> Layer {
    let mut dict = Dict::new();
    for (var, key) in [
        ("CONTROL_PLANE_TUNNEL_ID", "tunnel_id"),
        ("CONTROL_PLANE_BASE_URL", "base_url"),
        ("CONTROL_PLANE_ORGANIZATION_ID", "organization_id"),
        ("CONTROL_PLANE_INITIAL_POLL_TIMEOUT", "initial_poll_timeout"),
    ] {
        if let Some(value) = env.non_blank(var) {
            insert(&mut dict, &path(&["control_plane", key]), value.into());
        }
    }
    if let Some(value) = env.non_blank("CONTROL_PLANE_POLL_CHANNELS") {
        let names = super::poll_channels::split_env(value);
        insert(&mut dict, &path(&["control_plane", "poll_channels"]), names.into());
    }
    if let Some(value) = env.non_blank("MCP_OAUTH_TRUSTED_ORIGINS") {
        let origins = super::oauth_origins::split_env(value);
        insert(&mut dict, &path(&["mcp", "oauth_trusted_origins"]), origins.into());
    }
    if let Some(value) = env.non_blank("HEALTH_SHOW_DETAILS") {
        let typed = match value.to_ascii_lowercase().as_str() {
            "true" | "1" => Value::from(true),
            "false" | "0" => Value::from(false),
            _ => Value::from(value),
        };
        insert(&mut dict, &path(&["ops", "health_show_details"]), typed);
    }
    if let Some(value) = env.non_blank("HEALTH_LISTEN_ADDR") {
        insert(&mut dict, &path(&["ops", "listen"]), health_listen(value).into());
    }
    for (var, keys) in [
        ("HEALTH_URL_FILE", ["ops", "url_file"]),
        ("PID_FILE", ["runtime", "pid_file"]),
    ] {
        if let Some(value) = env.non_blank(var) {
            insert(&mut dict, &path(&keys), value.into());
        }
    }
    // The official client's proxies: explicit settings (never environment proxies); the
    // global one applies to each scope that has none of its own.
    let global = env.non_blank("TUNNEL_CLIENT_HTTP_PROXY");
    for (var, section) in [("CONTROL_PLANE_HTTP_PROXY", "control_plane"), ("MCP_HTTP_PROXY", "mcp")] {
        if let Some(value) = env.non_blank(var).or(global) {
            insert(&mut dict, &path(&[section, "proxy"]), value.into());
        }
    }
    harpoon_vars(env, &mut dict);
    for (var, keys) in ANCHOR_TLS {
        if let Some(value) = env.non_blank(var) {
            insert(&mut dict, &path(keys), value.into());
        }
    }
    anchor_layer(dict)
}

/// The official client's `HARPOON_*` variables under `[harpoon]`: booleans and numbers
/// typed when they read as such (else left as text, which the key's type then refuses,
/// naming the variable); `HARPOON_TARGETS` as text, parsed with upstream's grammar;
/// `HARPOON_HOSTS_INCLUDE_SUFFIX` split on `;` and newlines; `CA_BUNDLE` also trusted by
/// the channel, as upstream adds it to Harpoon's trust.
fn harpoon_vars(env: &EnvVars, dict: &mut Dict) {
    for (var, key) in [
        ("HARPOON_ALLOW_PLAINTEXT_HTTP", "allow_plaintext_http"),
        ("HARPOON_HOSTS_INCLUDE_LOOPBACK", "hosts_include_loopback"),
        ("HARPOON_HOSTS_INCLUDE_PRIVATE", "hosts_include_private"),
    ] {
        if let Some(value) = env.non_blank(var) {
            let typed = match value.to_ascii_lowercase().as_str() {
                "true" | "1" => Value::from(true),
                "false" | "0" => Value::from(false),
                _ => Value::from(value),
            };
            insert(dict, &path(&["harpoon", key]), typed);
        }
    }
    for (var, key) in [
        ("HARPOON_MAX_RESPONSE_BYTES", "max_response_bytes"),
        ("HARPOON_MAX_REDIRECTS", "max_redirects"),
    ] {
        if let Some(value) = env.non_blank(var) {
            let typed = value.parse::<u64>().map_or_else(|_| Value::from(value), Value::from);
            insert(dict, &path(&["harpoon", key]), typed);
        }
    }
    if let Some(value) = env.non_blank("HARPOON_TARGETS") {
        insert(dict, &path(&["harpoon", "targets"]), value.into());
    }
    if let Some(value) = env.non_blank("HARPOON_HOSTS_INCLUDE_SUFFIX") {
        let list: Vec<String> = value
            .split([';', '\n'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        insert(dict, &path(&["harpoon", "hosts_include_suffix"]), list.into());
    }
    if let Some(value) = env
        .non_blank("HARPOON_HTTP_PROXY")
        .or(env.non_blank("TUNNEL_CLIENT_HTTP_PROXY"))
    {
        insert(dict, &path(&["harpoon", "proxy"]), value.into());
    }
    if let Some(value) = env.non_blank("CA_BUNDLE") {
        insert(dict, &path(&["harpoon", "tls", "ca_file"]), value.into());
    }
}

/// The official client's TLS variables: `CA_BUNDLE` serves both scopes, as upstream.
const ANCHOR_TLS: [(&str, &[&str]); 6] = [
    ("CA_BUNDLE", &["control_plane", "tls", "ca_file"]),
    ("CA_BUNDLE", &["mcp", "tls", "ca_file"]),
    ("CONTROL_PLANE_CLIENT_CERT", &["control_plane", "tls", "client_cert"]),
    ("CONTROL_PLANE_CLIENT_KEY", &["control_plane", "tls", "client_key"]),
    ("MCP_CLIENT_CERT", &["mcp", "tls", "client_cert"]),
    ("MCP_CLIENT_KEY", &["mcp", "tls", "client_key"]),
];

/// `HEALTH_LISTEN_ADDR` as `ops.listen`: the official client (Go) also takes
/// `localhost:PORT` (here `127.0.0.1:PORT`) and `:PORT`, every interface (here
/// `0.0.0.0:PORT`, which needs `ops.allow_remote = true` like any non-loopback address).
fn health_listen(value: &str) -> String {
    if let Some(port) = value.strip_prefix("localhost:") {
        format!("127.0.0.1:{port}")
    } else if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_owned()
    }
}

/// `MCP_SERVER_URL` and `MCP_COMMAND` (split with a shell's quoting rules:
/// [`command_line`](super::command_line)) as channel `main`.
fn anchor_channel(env: &EnvVars) -> Result<Layer, ConfigError> {
    let mut dict = Dict::new();
    if let Some(url) = env.non_blank("MCP_SERVER_URL") {
        insert(&mut dict, &path(&["mcp", "channels", "main", "url"]), url.into());
    }
    if let Some(command) = env.non_blank("MCP_COMMAND") {
        let argv = super::command_line::split(command).map_err(|e| {
            ConfigError::invalid("mcp.channels.main.command", format!("cannot be split: {}", e.words()))
                .set_by("MCP_COMMAND")
        })?;
        insert(&mut dict, &path(&["mcp", "channels", "main", "command"]), argv.into());
    }
    Ok(anchor_layer(dict))
}

fn anchor_layer(dict: Dict) -> Layer {
    Layer {
        name: ANCHOR,
        dict,
        source: Some(anchor_var),
    }
}

fn anchor_var(keys: &[&str]) -> String {
    let var = match keys {
        ["control_plane", "tunnel_id"] => "CONTROL_PLANE_TUNNEL_ID",
        ["control_plane", "base_url"] => "CONTROL_PLANE_BASE_URL",
        ["control_plane", "organization_id"] => "CONTROL_PLANE_ORGANIZATION_ID",
        ["control_plane", "initial_poll_timeout"] => "CONTROL_PLANE_INITIAL_POLL_TIMEOUT",
        ["control_plane", "poll_channels", ..] => "CONTROL_PLANE_POLL_CHANNELS",
        ["ops", "listen"] => "HEALTH_LISTEN_ADDR",
        ["ops", "health_show_details"] => "HEALTH_SHOW_DETAILS",
        ["ops", "url_file"] => "HEALTH_URL_FILE",
        ["runtime", "pid_file"] => "PID_FILE",
        ["mcp", "oauth_trusted_origins", ..] => "MCP_OAUTH_TRUSTED_ORIGINS",
        ["control_plane", "proxy"] => "CONTROL_PLANE_HTTP_PROXY or TUNNEL_CLIENT_HTTP_PROXY",
        ["mcp", "proxy"] => "MCP_HTTP_PROXY or TUNNEL_CLIENT_HTTP_PROXY",
        ["mcp", "channels", "main", "url"] => "MCP_SERVER_URL",
        ["mcp", "channels", "main", "command", ..] => "MCP_COMMAND",
        [_, "tls", "ca_file"] => "CA_BUNDLE",
        ["control_plane", "tls", "client_cert"] => "CONTROL_PLANE_CLIENT_CERT",
        ["control_plane", "tls", "client_key"] => "CONTROL_PLANE_CLIENT_KEY",
        ["mcp", "tls", "client_cert"] => "MCP_CLIENT_CERT",
        ["mcp", "tls", "client_key"] => "MCP_CLIENT_KEY",
        ["harpoon", "targets", ..] => "HARPOON_TARGETS",
        ["harpoon", "allow_plaintext_http"] => "HARPOON_ALLOW_PLAINTEXT_HTTP",
        ["harpoon", "hosts_include_loopback"] => "HARPOON_HOSTS_INCLUDE_LOOPBACK",
        ["harpoon", "hosts_include_private"] => "HARPOON_HOSTS_INCLUDE_PRIVATE",
        ["harpoon", "hosts_include_suffix", ..] => "HARPOON_HOSTS_INCLUDE_SUFFIX",
        ["harpoon", "max_response_bytes"] => "HARPOON_MAX_RESPONSE_BYTES",
        ["harpoon", "max_redirects"] => "HARPOON_MAX_REDIRECTS",
        ["harpoon", "proxy"] => "HARPOON_HTTP_PROXY or TUNNEL_CLIENT_HTTP_PROXY",
        _ => "MCP_SERVER_URL and MCP_COMMAND",
    };
    var.to_owned()
}

fn flags(overrides: &Overrides) -> Layer {
    let mut dict = Dict::new();
    let mut set = |keys: &[&str], value: Option<Value>| {
        if let Some(value) = value {
            insert(&mut dict, &path(keys), value);
        }
    };
    set(&["strict", "enabled"], overrides.strict.map(Value::from));
    set(
        &["strict", "latch_file"],
        overrides
            .latch_file
            .as_ref()
            .map(|p| Value::from(p.to_string_lossy().into_owned())),
    );
    set(&["ops", "listen"], overrides.ops_listen.as_deref().map(Value::from));
    set(
        &["telemetry", "log_level"],
        overrides.log_level.as_deref().map(Value::from),
    );
    set(
        &["telemetry", "log_format"],
        overrides.log_format.as_deref().map(Value::from),
    );
    Layer {
        name: FLAGS,
        dict,
        source: Some(|_| "a command-line flag".to_owned()),
    }
}

/// Whether any layer so far configures a channel (or sets `mcp.channels` at all).
fn has_channels(figment: &Figment) -> bool {
    match figment.find_value("mcp.channels") {
        Ok(Value::Dict(_, channels)) => !channels.is_empty(),
        Ok(_) => true,
        Err(_) => false,
    }
}

fn path(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

/// Sets `path` in `dict`, creating (or replacing scalars with) tables on the way.
fn insert(dict: &mut Dict, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            dict.insert(last.clone(), value);
        }
        [first, rest @ ..] => match dict.entry(first.clone()).or_insert_with(|| Dict::new().into()) {
            Value::Dict(_, inner) => insert(inner, rest, value),
            scalar => {
                let mut inner = Dict::new();
                insert(&mut inner, rest, value);
                *scalar = inner.into();
            }
        },
    }
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        let metadata = Metadata::named(self.name);
        match self.source {
            Some(source) => metadata.interpolater(move |_: &Profile, keys: &[&str]| source(keys)),
            None => metadata,
        }
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}
