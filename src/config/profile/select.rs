//! Which official profile to read, as upstream's `ResolveConfigSource` resolves it:
//! the flags first (`--profile NAME`, `--profile-file PATH`; `--profile-dir DIR` for a
//! name), then the variables `TUNNEL_CLIENT_CONFIG` (any path), `TUNNEL_CLIENT_PROFILE`
//! (a name) and `TUNNEL_CLIENT_PROFILE_FILE` (a `.yaml` path), pairwise exclusive; a
//! blank variable is unset, a blank flag an error. A name is `NAME.yaml` in
//! `--profile-dir`, `$TUNNEL_CLIENT_PROFILE_DIR`, `$XDG_CONFIG_HOME/tunnel-client` or
//! `$HOME/.config/tunnel-client`, the first that is set; `~` and `~/` at the start of a
//! path are `$HOME`.
//!
//! Reads no file: it only names one.

use std::path::{Component, Path, PathBuf};

use super::super::error::ConfigError;
use super::super::layers::EnvVars;
use super::ProfileFlags;

pub(super) const CONFIG_VAR: &str = "TUNNEL_CLIENT_CONFIG";
pub(super) const PROFILE_VAR: &str = "TUNNEL_CLIENT_PROFILE";
pub(super) const PROFILE_FILE_VAR: &str = "TUNNEL_CLIENT_PROFILE_FILE";
pub(super) const PROFILE_DIR_VAR: &str = "TUNNEL_CLIENT_PROFILE_DIR";

/// The profile chosen, and what chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Selected {
    pub(super) path: PathBuf,
    /// `--profile-file`, `TUNNEL_CLIENT_PROFILE`, ...
    pub(super) by: String,
    /// A named profile: the directory it must stay in (a symlink out of it is refused,
    /// as upstream reads names through `os.OpenRoot`).
    pub(super) confined_to: Option<PathBuf>,
}

/// The profile the flags or variables name, if any.
pub(super) fn select(flags: &ProfileFlags, env: &EnvVars) -> Result<Option<Selected>, ConfigError> {
    let dir_flag = match &flags.profile_dir {
        Some(dir) if dir.as_os_str().to_string_lossy().trim().is_empty() => {
            return Err(blank_flag("--profile-dir", "a directory"))
        }
        dir => dir.as_deref(),
    };
    match (&flags.profile, &flags.profile_file) {
        (Some(_), Some(_)) => {
            return Err(exclusive("--profile", "--profile-file"));
        }
        (Some(name), None) if name.trim().is_empty() => return Err(blank_flag("--profile", "a profile name")),
        (Some(name), None) => return named(name.trim(), "--profile", dir_flag, env).map(Some),
        (None, Some(path)) if path.as_os_str().to_string_lossy().trim().is_empty() => {
            return Err(blank_flag("--profile-file", "a file path"))
        }
        (None, Some(path)) => return file(&path.to_string_lossy(), "--profile-file", env).map(Some),
        (None, None) => {}
    }
    let set = |var: &'static str| env.get(var).map(str::trim).filter(|v| !v.is_empty()).map(|v| (var, v));
    let chosen: Vec<(&str, &str)> = [CONFIG_VAR, PROFILE_VAR, PROFILE_FILE_VAR]
        .into_iter()
        .filter_map(set)
        .collect();
    match chosen[..] {
        [] => Ok(None),
        [(CONFIG_VAR, path)] => Ok(Some(Selected {
            path: PathBuf::from(path),
            by: CONFIG_VAR.to_owned(),
            confined_to: None,
        })),
        [(PROFILE_VAR, name)] => named(name, PROFILE_VAR, dir_flag, env).map(Some),
        [(_, path)] => file(path, PROFILE_FILE_VAR, env).map(Some),
        [(a, _), (b, _), ..] => Err(exclusive(a, b)),
    }
}

/// The selectors set (flags and variables), for the warning when `--config` wins.
pub(super) fn named_selectors(flags: &ProfileFlags, env: &EnvVars) -> Vec<String> {
    let mut out = Vec::new();
    if flags.profile.is_some() {
        out.push("--profile".to_owned());
    }
    if flags.profile_file.is_some() {
        out.push("--profile-file".to_owned());
    }
    for var in [CONFIG_VAR, PROFILE_VAR, PROFILE_FILE_VAR] {
        if env.get(var).is_some_and(|v| !v.trim().is_empty()) {
            out.push(var.to_owned());
        }
    }
    out
}

/// `NAME.yaml` in the profile directory.
fn named(name: &str, by: &str, dir_flag: Option<&Path>, env: &EnvVars) -> Result<Selected, ConfigError> {
    check_name(name, by)?;
    let dir = profile_dir(dir_flag, env)?;
    Ok(Selected {
        path: dir.join(format!("{name}.yaml")),
        by: by.to_owned(),
        confined_to: Some(dir),
    })
}

/// A profile file: a `.yaml` path whose name (without it) is a valid profile name.
fn file(path: &str, by: &str, env: &EnvVars) -> Result<Selected, ConfigError> {
    let path = clean(&expand_home(path.trim(), by, env)?);
    if path.extension().is_none_or(|ext| ext != "yaml") {
        return Err(ConfigError::invalid(
            by,
            format!("{} must end with .yaml (the official client's rule)", path.display()),
        ));
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    check_name(&stem, by)?;
    Ok(Selected {
        path,
        by: by.to_owned(),
        confined_to: None,
    })
}

/// `--profile-dir`, `$TUNNEL_CLIENT_PROFILE_DIR`, `$XDG_CONFIG_HOME/tunnel-client`,
/// `$HOME/.config/tunnel-client`: the first that is given.
fn profile_dir(dir_flag: Option<&Path>, env: &EnvVars) -> Result<PathBuf, ConfigError> {
    let set = |var: &str| env.get(var).map(str::trim).filter(|v| !v.is_empty());
    if let Some(dir) = dir_flag {
        return Ok(clean(&expand_home(dir.to_string_lossy().trim(), "--profile-dir", env)?));
    }
    if let Some(dir) = set(PROFILE_DIR_VAR) {
        return Ok(clean(&expand_home(dir, PROFILE_DIR_VAR, env)?));
    }
    if let Some(xdg) = set("XDG_CONFIG_HOME") {
        return Ok(clean(&expand_home(xdg, "XDG_CONFIG_HOME", env)?).join("tunnel-client"));
    }
    if let Some(home) = set("HOME") {
        return Ok(clean(Path::new(home)).join(".config").join("tunnel-client"));
    }
    Err(ConfigError::invalid(
        PROFILE_DIR_VAR,
        "no profile directory: set TUNNEL_CLIENT_PROFILE_DIR (or --profile-dir, XDG_CONFIG_HOME, HOME)",
    ))
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, and never `.` or `..`.
fn check_name(name: &str, by: &str) -> Result<(), ConfigError> {
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid && name != "." && name != ".." {
        return Ok(());
    }
    Err(ConfigError::invalid(
        by,
        format!("{name:?} is not a profile name: use letters, digits, '.', '_' or '-' (at most 128, starting with a letter or digit)"),
    ))
}

/// `~` and `~/...` with `$HOME`, as upstream.
fn expand_home(path: &str, by: &str, env: &EnvVars) -> Result<PathBuf, ConfigError> {
    if path != "~" && !path.starts_with("~/") {
        return Ok(PathBuf::from(path));
    }
    let Some(home) = env.get("HOME").map(str::trim).filter(|h| !h.is_empty()) else {
        return Err(ConfigError::invalid(
            by,
            format!("cannot expand {path:?}: HOME is not set"),
        ));
    };
    Ok(Path::new(home).join(path.trim_start_matches('~').trim_start_matches('/')))
}

/// The path with `.` removed and `..` applied where it can be (Go's `filepath.Clean`).
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            Component::ParentDir if out.has_root() => {}
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

fn blank_flag(flag: &str, what: &str) -> ConfigError {
    ConfigError::invalid(flag, format!("is empty; give {what}"))
}

fn exclusive(a: &str, b: &str) -> ConfigError {
    ConfigError::invalid(
        a,
        format!("{a} and {b} are both set, and they are mutually exclusive (as in the official client): unset one"),
    )
}
