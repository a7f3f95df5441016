//! `control_plane.poll_channels` and the official client's `CONTROL_PLANE_POLL_CHANNELS`.

use super::*;

const TWO_CHANNELS: &[(&str, &str)] = &[("mcp.channels.tools.url", "\"http://127.0.0.1:3002/mcp\"")];

fn with(edits: &[(&str, &str)], pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut all = TWO_CHANNELS.to_vec();
    all.extend_from_slice(edits);
    load(&toml_with(&all), &Overrides::default(), pairs)
}

fn names(config: &Config) -> Vec<&str> {
    config.control_plane.poll_channels.iter().map(|n| n.as_str()).collect()
}

#[test]
fn poll_channels_are_sorted_and_deduplicated_and_absent_by_default() {
    assert!(names(&accepted(MINIMAL)).is_empty());
    assert!(!accepted(MINIMAL).masked().contains("poll_channels"));
    let empty = with(&[("control_plane.poll_channels", "[]")], &[]).unwrap();
    assert!(names(&empty).is_empty(), "an empty list is not configured");
    let config = with(&[("control_plane.poll_channels", r#"["tools", "main", "tools"]"#)], &[]).unwrap();
    assert_eq!(names(&config), ["main", "tools"]);
    assert!(
        config.masked().contains("poll_channels = [\"main\", \"tools\"]"),
        "{}",
        config.masked()
    );
}

#[test]
fn a_bad_or_unconfigured_poll_channel_names_its_entry() {
    let blank = with(&[("control_plane.poll_channels", r#"["main", " "]"#)], &[]).unwrap_err();
    assert_error(
        &blank,
        "control_plane.poll_channels[1]",
        "is empty; name a channel of mcp.channels, e.g. \"main\"",
    );
    let invalid = with(&[("control_plane.poll_channels", r#"["ma in"]"#)], &[]).unwrap_err();
    assert_eq!(invalid.key(), "control_plane.poll_channels[0]");
    assert!(
        invalid.problem().contains("channel name \"ma in\" is not allowed"),
        "{invalid}"
    );
    let unknown = with(&[("control_plane.poll_channels", r#"["main", "billing"]"#)], &[]).unwrap_err();
    assert_eq!(unknown.key(), "control_plane.poll_channels[1]");
    assert!(
        unknown
            .problem()
            .starts_with("\"billing\" is not a configured channel (mcp.channels has main, tools)"),
        "{unknown}"
    );
    // The gateway serves `harpoon` itself: it may be polled for without a channel entry.
    let harpoon = with(&[("control_plane.poll_channels", r#"["main", "harpoon"]"#)], &[]).unwrap();
    assert_eq!(harpoon.control_plane.poll_channels.len(), 2);
    let wrong_type = with(&[("control_plane.poll_channels", "\"main\"")], &[]).unwrap_err();
    assert_eq!(wrong_type.key(), "control_plane.poll_channels");
}

#[test]
fn the_official_clients_variable_is_a_comma_separated_list_below_the_file() {
    let from_var = with(&[], &[("CONTROL_PLANE_POLL_CHANNELS", "tools, main")]).unwrap();
    assert_eq!(names(&from_var), ["main", "tools"]);
    let file_wins = with(
        &[("control_plane.poll_channels", r#"["tools"]"#)],
        &[("CONTROL_PLANE_POLL_CHANNELS", "main")],
    )
    .unwrap();
    assert_eq!(names(&file_wins), ["tools"]);
    let prefixed = with(
        &[],
        &[
            ("CONTROL_PLANE_POLL_CHANNELS", "main"),
            ("TUNNELGATE_CONTROL_PLANE__POLL_CHANNELS", r#"["tools"]"#),
        ],
    )
    .unwrap();
    assert_eq!(names(&prefixed), ["tools"]);
    let blank = with(&[], &[("CONTROL_PLANE_POLL_CHANNELS", "main,")]).unwrap_err();
    assert_error(
        &blank,
        "control_plane.poll_channels[1]",
        "is empty; name a channel of mcp.channels, e.g. \"main\" (set by CONTROL_PLANE_POLL_CHANNELS)",
    );
    let unset = with(&[], &[("CONTROL_PLANE_POLL_CHANNELS", "  ")]).unwrap();
    assert!(
        names(&unset).is_empty(),
        "a blank variable is unset, as the official client reads it"
    );
}
