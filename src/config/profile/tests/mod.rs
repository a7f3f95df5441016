//! Tests of the official profiles: reading (the document rules, unknown and repeated
//! keys), every key of both versions converted, each refusal, the value forms, the
//! selectors, and a profile read directly as the file layer.

mod direct;
mod reading;
mod refs;
mod refusals;
mod select;
mod v1;
mod v2;

use super::super::layers::EnvVars;
use super::convert::{convert, Mode, Output};
use super::schema::parse;
use super::Refusal;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The conversion of `yaml` (which must be readable) with `pairs` as the environment.
fn output(yaml: &str, pairs: &[(&str, &str)], mode: Mode) -> Output {
    let profile = parse(yaml).unwrap_or_else(|e| panic!("the profile is readable: {}", e.0));
    convert(profile, &EnvVars::new(&env(pairs)), mode)
}

/// The TOML table of `yaml`, which must convert without a refusal.
fn converted(yaml: &str, pairs: &[(&str, &str)]) -> toml::Table {
    let out = output(yaml, pairs, Mode::Print);
    assert!(out.refusals.is_empty(), "unexpected refusals: {:?}", out.refusals);
    out.table
}

/// The refusals of `yaml`, which must have some.
fn refused(yaml: &str, pairs: &[(&str, &str)]) -> Vec<Refusal> {
    let out = output(yaml, pairs, Mode::Print);
    assert!(
        !out.refusals.is_empty(),
        "expected refusals, converted to {:?}",
        out.table
    );
    out.refusals
}

/// Why `yaml` cannot be read at all.
fn unreadable(yaml: &str) -> String {
    match parse(yaml) {
        Ok(profile) => panic!("expected an unreadable profile, read {profile:?}"),
        Err(e) => e.0,
    }
}

fn toml(text: &str) -> toml::Table {
    text.parse().expect("the expected TOML parses")
}
