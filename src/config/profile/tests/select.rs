//! Which profile the official selectors name, as upstream resolves them.

use std::path::{Path, PathBuf};

use super::super::select::select;
use super::super::ProfileFlags;
use super::*;

fn selected(flags: &ProfileFlags, pairs: &[(&str, &str)]) -> Option<(PathBuf, String)> {
    select(flags, &EnvVars::new(&env(pairs)))
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|s| (s.path, s.by))
}

fn refused_selection(flags: &ProfileFlags, pairs: &[(&str, &str)]) -> String {
    select(flags, &EnvVars::new(&env(pairs)))
        .expect_err("the selection is refused")
        .to_string()
}

fn by_name(name: &str) -> ProfileFlags {
    ProfileFlags {
        profile: Some(name.to_owned()),
        ..ProfileFlags::default()
    }
}

#[test]
fn each_variable_names_its_file_and_a_blank_one_is_unset() {
    let none = ProfileFlags::default();
    assert_eq!(selected(&none, &[]), None);
    assert_eq!(selected(&none, &[("TUNNEL_CLIENT_CONFIG", "  ")]), None);
    assert_eq!(
        selected(&none, &[("TUNNEL_CLIENT_CONFIG", "/etc/tc/any.conf")]),
        Some((PathBuf::from("/etc/tc/any.conf"), "TUNNEL_CLIENT_CONFIG".to_owned()))
    );
    assert_eq!(
        selected(&none, &[("TUNNEL_CLIENT_PROFILE_FILE", "/etc/tc/./prod.yaml")]),
        Some((
            PathBuf::from("/etc/tc/prod.yaml"),
            "TUNNEL_CLIENT_PROFILE_FILE".to_owned()
        ))
    );
    assert_eq!(
        selected(
            &none,
            &[("TUNNEL_CLIENT_PROFILE_FILE", "~/p/prod.yaml"), ("HOME", "/home/op")]
        ),
        Some((
            PathBuf::from("/home/op/p/prod.yaml"),
            "TUNNEL_CLIENT_PROFILE_FILE".to_owned()
        ))
    );
    assert_eq!(
        selected(
            &none,
            &[
                ("TUNNEL_CLIENT_PROFILE", "prod"),
                ("TUNNEL_CLIENT_PROFILE_DIR", "/srv/profiles")
            ]
        ),
        Some((
            PathBuf::from("/srv/profiles/prod.yaml"),
            "TUNNEL_CLIENT_PROFILE".to_owned()
        ))
    );
}

#[test]
fn the_profile_directory_is_the_flag_the_variable_xdg_then_home() {
    let home = [("HOME", "/home/op")];
    let xdg = [("HOME", "/home/op"), ("XDG_CONFIG_HOME", "/xdg")];
    let var = [
        ("HOME", "/home/op"),
        ("XDG_CONFIG_HOME", "/xdg"),
        ("TUNNEL_CLIENT_PROFILE_DIR", "/var"),
    ];
    let path = |flags: &ProfileFlags, pairs: &[(&str, &str)]| selected(flags, pairs).unwrap().0;
    assert_eq!(
        path(&by_name("p"), &home),
        Path::new("/home/op/.config/tunnel-client/p.yaml")
    );
    assert_eq!(path(&by_name("p"), &xdg), Path::new("/xdg/tunnel-client/p.yaml"));
    assert_eq!(path(&by_name("p"), &var), Path::new("/var/p.yaml"));
    let flags = ProfileFlags {
        profile_dir: Some(PathBuf::from("/flag")),
        ..by_name("p")
    };
    assert_eq!(path(&flags, &var), Path::new("/flag/p.yaml"));
    let dir_only = ProfileFlags {
        profile_dir: Some(PathBuf::from("/flag")),
        ..ProfileFlags::default()
    };
    assert_eq!(
        path(&dir_only, &[("TUNNEL_CLIENT_PROFILE", "q")]),
        Path::new("/flag/q.yaml")
    );
}

#[test]
fn a_flag_wins_over_every_variable_and_two_variables_are_an_error_naming_both() {
    let vars = [("TUNNEL_CLIENT_CONFIG", "/a.yaml"), ("TUNNEL_CLIENT_PROFILE", "b")];
    let flags = ProfileFlags {
        profile_file: Some(PathBuf::from("/c/flag.yaml")),
        ..ProfileFlags::default()
    };
    assert_eq!(selected(&flags, &vars).unwrap().1, "--profile-file");
    for pair in [
        [("TUNNEL_CLIENT_CONFIG", "/a.yaml"), ("TUNNEL_CLIENT_PROFILE", "b")],
        [
            ("TUNNEL_CLIENT_CONFIG", "/a.yaml"),
            ("TUNNEL_CLIENT_PROFILE_FILE", "/b.yaml"),
        ],
        [
            ("TUNNEL_CLIENT_PROFILE", "a"),
            ("TUNNEL_CLIENT_PROFILE_FILE", "/b.yaml"),
        ],
    ] {
        let error = refused_selection(&ProfileFlags::default(), &pair);
        assert!(error.contains(pair[0].0) && error.contains(pair[1].0), "{error}");
        assert!(error.contains("mutually exclusive"), "{error}");
    }
}

#[test]
fn names_and_file_names_follow_upstreams_rules() {
    let none = ProfileFlags::default();
    for bad in ["../x", ".", "..", "a/b", "-lead", "x y", &"n".repeat(129)] {
        let error = refused_selection(&by_name(bad), &[("HOME", "/h")]);
        assert!(
            error.contains("not a profile name") || error.contains("mutually"),
            "{bad}: {error}"
        );
    }
    let error = refused_selection(&none, &[("TUNNEL_CLIENT_PROFILE_FILE", "/etc/prod.yml")]);
    assert!(error.contains("must end with .yaml"), "{error}");
    let error = refused_selection(&none, &[("TUNNEL_CLIENT_PROFILE_FILE", "/etc/bad name.yaml")]);
    assert!(error.contains("not a profile name"), "{error}");
    let error = refused_selection(&by_name(" "), &[]);
    assert!(error.contains("--profile") && error.contains("empty"), "{error}");
    let error = refused_selection(&none, &[("TUNNEL_CLIENT_PROFILE_FILE", "~/p.yaml")]);
    assert!(error.contains("HOME is not set"), "{error}");
}
