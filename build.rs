//! Build facts the binary reports (`tunnelgate support-bundle`, `version.json`): the
//! name of the Cargo profile it was built with (`debug` for the dev and test profiles,
//! `release`, `dist`), which Cargo tells build scripts only through the output folder.

// The variable's name must not start with `TUNNELGATE_`: `cargo test` and `cargo run`
// also set it for the programs they run, and the configuration reads that prefix.
fn main() {
    // OUT_DIR is <target>/[<triple>/]<profile folder>/build/<package>-<hash>/out.
    let profile = std::env::var("OUT_DIR")
        .ok()
        .and_then(|out| {
            let folder = std::path::Path::new(&out).ancestors().nth(3)?.file_name()?;
            Some(folder.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned()));
    println!("cargo:rustc-env=BUILT_WITH_PROFILE={profile}");
    println!("cargo:rerun-if-changed=build.rs");
}
