//! `tunnelgate profile convert FILE`: the official client's YAML profile as tunnelgate's
//! TOML on stdout (exit 0), or every setting it cannot take on stderr, one per line, and
//! no TOML (exit 78). The conversion itself is `config`'s (docs/configuration.md,
//! "Official profiles").

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::config::{convert_profile, ProfileError};

/// What `tunnelgate profile --help` adds after the options.
pub(super) const PROFILE_HELP: &str = "\
`convert` reads one profile (config_version absent, 1 or 2) as the official client does:
an unknown or repeated key, a value of the wrong type, or a second YAML document under
config_version 2 is refused. Each setting becomes a tunnelgate key; one with no
equivalent becomes a comment line when it holds the official default (tunnelgate
behaves the same), and is refused otherwise. Secrets stay references (env:NAME,
file:/path) or the literal the profile holds; URLs, paths and commands given as env: or
file: references are read now, as the official client reads them at start.

Without --config, `run`, `check`, `doctor` and `support-bundle` read a profile directly:
--profile-file PATH, --profile NAME [--profile-dir DIR], or the official variables
TUNNEL_CLIENT_CONFIG, TUNNEL_CLIENT_PROFILE_FILE, TUNNEL_CLIENT_PROFILE.

Examples:
  tunnelgate profile convert ~/.config/tunnel-client/prod.yaml > /etc/tunnelgate/config.toml
  tunnelgate profile convert prod.yaml > config.toml && tunnelgate check --config config.toml
  TUNNEL_CLIENT_PROFILE_FILE=prod.yaml tunnelgate check

Exit codes: 0 converted (the TOML on stdout), 78 the profile cannot be read or has
settings without a tunnelgate equivalent (each on stderr), 2 usage error.";

#[derive(Args, Debug)]
pub(crate) struct ProfileArgs {
    #[command(subcommand)]
    pub action: ProfileAction,
}

#[derive(Subcommand, Debug)]
pub(crate) enum ProfileAction {
    /// Print the official profile FILE as tunnelgate's TOML configuration.
    Convert {
        /// The profile (YAML).
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

/// `tunnelgate profile ...`; returns the exit code.
pub(crate) fn profile(args: &ProfileArgs) -> u8 {
    let ProfileAction::Convert { file } = &args.action;
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    match convert_profile(file, &env) {
        Ok(toml) => {
            print!("{toml}");
            0
        }
        Err(ProfileError::Refused { path, refusals }) => {
            crate::stderr::line(format_args!(
                "the official profile {path} was not converted: {} setting(s) refused",
                refusals.len()
            ));
            for refusal in &refusals {
                crate::stderr::line(format_args!("refused {refusal}"));
            }
            78
        }
        Err(e @ ProfileError::Unreadable { .. }) => {
            crate::stderr::line(format_args!("{e}"));
            78
        }
    }
}
