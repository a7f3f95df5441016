//! The official client's YAML profiles: read one (`schema`), convert it key by key into
//! tunnelgate's TOML keys (`convert`, with `refs` for upstream's value forms), and find the
//! one the official selectors name (`select`).
//!
//! Two uses: `tunnelgate profile convert FILE` prints the TOML ([`convert_profile`]); and a
//! load given no `--config` reads the profile the selectors name as its file layer
//! ([`file_layer`]), placed below the official variables as upstream places its profile
//! below its environment. Both go through the same TOML text, so what `convert` prints
//! is what a direct read loads.
//!
//! Invariants: every setting of the profile is a tunnelgate key, a comment line (an
//! official default tunnelgate matches), or a refusal; every refusal is reported, and a
//! profile with one is never loaded. A secret is never resolved here and never shown: it
//! stays the reference (or the literal) the profile holds. Reads the profile file and,
//! for the values upstream resolves when it loads a profile, their `file:` references.

mod convert;
mod refs;
mod schema;
mod select;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub(crate) use convert::Mode;

use super::error::{ConfigError, ErrorKind};
use super::layers::{read_text, EnvVars, FileLayer};

/// A profile larger than this is refused rather than read whole.
const MAX_PROFILE_FILE: u64 = 1024 * 1024;

/// The official client's selectors given as flags (`--profile`, `--profile-file`,
/// `--profile-dir`): they name a profile to read when no `--config` is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileFlags {
    pub profile: Option<String>,
    pub profile_file: Option<PathBuf>,
    pub profile_dir: Option<PathBuf>,
}

/// Where a load's file layer came from, for the run's log: the official profile read
/// (and the selector that named it), and the selectors a `--config` file outranked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigOrigin {
    pub profile: Option<(PathBuf, String)>,
    pub ignored_selectors: Vec<String>,
}

/// One setting of a profile tunnelgate cannot take: its YAML key path (`log.file`,
/// `mcp.server_urls[0].url`) and the problem with what to do, in words, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub key: String,
    pub problem: String,
}

/// Why a profile was not converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The file cannot be read, or is not a profile the official client reads (YAML, an
    /// unknown or repeated key, a value of the wrong type, the document rules).
    #[error("official profile {path}: {problem}")]
    Unreadable { path: String, problem: String },
    /// Read, but settings have no tunnelgate equivalent: every one of them.
    #[error("official profile {path}: {}", refused_words(.refusals))]
    Refused { path: String, refusals: Vec<Refusal> },
}

impl ProfileError {
    /// A stable label: `unreadable` or `refused`.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Unreadable { .. } => "unreadable",
            Self::Refused { .. } => "refused",
        }
    }

    fn into_config_error(self) -> ConfigError {
        match self {
            Self::Unreadable { path, problem } => ConfigError::new(ErrorKind::Profile, path, problem),
            Self::Refused { path, refusals } => ConfigError::new(ErrorKind::Profile, path, refused_words(&refusals)),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

fn refused_words(refusals: &[Refusal]) -> String {
    let list: Vec<String> = refusals.iter().map(|r| format!("{} ({})", r.key, r.problem)).collect();
    format!(
        "{} setting(s) refused (no tunnelgate equivalent, or a value that cannot be read): {}",
        refusals.len(),
        list.join("; ")
    )
}

/// `tunnelgate profile convert`: the profile at `path` as tunnelgate's TOML, with a
/// comment line for each setting kept only as a comment. `env` resolves the values
/// upstream resolves when it loads the profile.
pub fn convert_profile(path: &Path, env: &[(String, String)]) -> Result<String, ProfileError> {
    convert_path(path, &EnvVars::new(env), Mode::Print)
}

/// The file layer of a load: tunnelgate's own `--config` file when given (the official
/// selectors are then only noted), else the official profile the selectors name, else
/// none.
pub(super) fn file_layer(
    config: Option<&Path>,
    flags: &ProfileFlags,
    env: &EnvVars,
) -> Result<(Option<FileLayer>, ConfigOrigin), ConfigError> {
    if let Some(path) = config {
        let origin = ConfigOrigin {
            profile: None,
            ignored_selectors: select::named_selectors(flags, env),
        };
        return Ok((Some(FileLayer::read(path)?), origin));
    }
    let Some(selected) = select::select(flags, env)? else {
        return Ok((None, ConfigOrigin::default()));
    };
    if let Some(dir) = &selected.confined_to {
        confined(&selected.path, dir).map_err(|problem| ConfigError::invalid(selected.by.clone(), problem))?;
    }
    let toml = convert_path(&selected.path, env, Mode::Layer).map_err(ProfileError::into_config_error)?;
    let layer = FileLayer::profile(&selected.path.display().to_string(), &toml)?;
    let origin = ConfigOrigin {
        profile: Some((selected.path, selected.by)),
        ignored_selectors: Vec::new(),
    };
    Ok((Some(layer), origin))
}

fn convert_path(path: &Path, env: &EnvVars, mode: Mode) -> Result<String, ProfileError> {
    let shown = path.display().to_string();
    let unreadable = |problem: String| ProfileError::Unreadable {
        path: shown.clone(),
        problem,
    };
    let text = read_text(path, MAX_PROFILE_FILE)
        .map_err(|e| unreadable(format!("cannot read it: {}", super::error::io_words(&e))))?;
    let profile = schema::parse(&text).map_err(|e| unreadable(e.0))?;
    let version = profile.config_version.unwrap_or(1);
    let output = convert::convert(profile, env, mode);
    if !output.refusals.is_empty() {
        return Err(ProfileError::Refused {
            path: shown,
            refusals: output.refusals,
        });
    }
    Ok(render(&shown, version, &output))
}

/// The TOML text: a header, the notes as comments, then the keys.
fn render(shown: &str, version: i64, output: &convert::Output) -> String {
    let mut text = format!(
        "# tunnelgate configuration converted from the official client's profile {shown}\n\
         # (config_version {version}) by `tunnelgate profile convert`; docs/configuration.md,\n\
         # \"Official profiles\", has the table of keys.\n"
    );
    if !output.notes.is_empty() {
        text.push_str("#\n# Not keys here:\n");
        for note in &output.notes {
            text.push_str(&format!("# - {}\n", note.replace('\n', " ")));
        }
    }
    text.push('\n');
    text.push_str(&toml::to_string(&output.table).expect("the converted profile is plain tables and values"));
    text
}

/// `path` resolved stays inside `dir` resolved (upstream reads a named profile through
/// `os.OpenRoot(dir)`, which refuses a symlink out of it). A missing file is left to the
/// read, which names it.
fn confined(path: &Path, dir: &Path) -> Result<(), String> {
    let (Ok(file), Ok(root)) = (path.canonicalize(), dir.canonicalize()) else {
        return Ok(());
    };
    if file.starts_with(&root) {
        Ok(())
    } else {
        Err(format!(
            "{} leads out of the profile directory {} (a symlink?); the official client refuses it too",
            path.display(),
            dir.display()
        ))
    }
}
