//! lease-core built on its stated `rust-version`, as someone who vendors it into an older
//! workspace builds it: the crate `xtask/msrv` depends on it by path with every feature and has
//! a lock of its own, resolved for that version (see its `Cargo.toml`), built with that
//! toolchain (installed with rustup when missing) into its own target dir, `target/msrv`.

use std::path::Path;
use std::process::Command;

use crate::step::{Kind, Steps, run_command};
use crate::{Result, parse_flags, project_root, quick_start};

/// The crate that builds lease-core on its rust-version.
const CONSUMER: &str = "xtask/msrv";

/// `cargo xtask msrv`: the last step of `cargo xtask test` alone.
pub(crate) fn msrv(flags: &[&str]) -> Result {
    parse_flags("msrv", flags, &[])?;
    let mut steps = Steps::new("msrv", 1);
    lease_core(&mut steps)?;
    steps.summary();
    Ok(())
}

/// One step: the rustup toolchain of lease-core's `rust-version`, then `cargo +<it> build` of
/// `xtask/msrv`, after checking that `xtask/msrv` asks for that version and every feature.
pub(crate) fn lease_core(steps: &mut Steps) -> Result {
    let root = project_root();
    let core_manifest = read(&root.join("crates/lease-core/Cargo.toml"))?;
    let consumer_manifest = read(&root.join(CONSUMER).join("Cargo.toml"))?;
    let version = package_value(&core_manifest, "rust-version")
        .ok_or("crates/lease-core/Cargo.toml states no rust-version")?;
    if package_value(&consumer_manifest, "rust-version").as_deref() != Some(version.as_str()) {
        return Err(format!(
            "{CONSUMER}/Cargo.toml's rust-version is not lease-core's ({version}): set it, then \
             run `cargo update` in {CONSUMER}"
        )
        .into());
    }
    let features = features(&core_manifest);
    let built = built_features(&consumer_manifest);
    if features != built {
        return Err(format!(
            "{CONSUMER}/Cargo.toml builds lease-core with the features {built:?}, and lease-core \
             has {features:?}: every feature a user can turn on builds on its rust-version"
        )
        .into());
    }
    let toolchain = toolchain(&version);
    let title = format!("lease-core on its rust-version: Rust {toolchain}, every feature");
    let started = steps.announce(&title);
    if !installed(&toolchain)? {
        run_command(
            &title,
            Command::new("rustup").args([
                "toolchain",
                "install",
                &toolchain,
                "--profile",
                "minimal",
            ]),
        )?;
    }
    run_command(
        &title,
        Command::new("cargo")
            .arg(format!("+{toolchain}"))
            .args(["build", "--target-dir"])
            .arg(quick_start::target_dir(&root).join("msrv"))
            .current_dir(root.join(CONSUMER)),
    )?;
    steps.finish_as(Kind::Build, &title, started);
    Ok(())
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()).into())
}

/// The toolchain rustup knows a rust-version by: `1.85` is `1.85.0`.
fn toolchain(rust_version: &str) -> String {
    if rust_version.matches('.').count() == 1 {
        format!("{rust_version}.0")
    } else {
        rust_version.to_owned()
    }
}

/// Whether rustup has `toolchain` (`rustup toolchain list` names it `<toolchain>-<host>`).
fn installed(toolchain: &str) -> Result<bool> {
    let output = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .map_err(|e| format!("this step needs rustup, to install Rust {toolchain}: {e}"))?;
    let prefix = format!("{toolchain}-");
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .any(|line| line.starts_with(&prefix)))
}

/// The value of `key = "value"` in the manifest's `[package]` table.
fn package_value(manifest: &str, key: &str) -> Option<String> {
    table(manifest, "package")
        .find_map(|line| line.strip_prefix(key)?.trim_start().strip_prefix('='))
        .and_then(|value| value.split('"').nth(1))
        .map(str::to_owned)
}

/// The features of the manifest's `[features]` table but `default`, sorted.
fn features(manifest: &str) -> Vec<String> {
    let mut names: Vec<String> = table(manifest, "features")
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| name != "default")
        .collect();
    names.sort();
    names
}

/// The features the consumer's `lease-core = { ..., features = [...] }` line asks for, sorted.
fn built_features(manifest: &str) -> Vec<String> {
    let mut names: Vec<String> = table(manifest, "dependencies")
        .find(|line| line.starts_with("lease-core"))
        .and_then(|line| line.split("features").nth(1))
        .and_then(|list| list.split_once('[').map(|(_, list)| list))
        .and_then(|list| list.split_once(']').map(|(list, _)| list))
        .map(|list| {
            list.split(',')
                .map(|name| name.trim().trim_matches('"').to_owned())
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The lines of the TOML table `[name]`, comments and blank lines left out.
fn table<'a>(manifest: &'a str, name: &str) -> impl Iterator<Item = &'a str> {
    let header = format!("[{name}]");
    manifest
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .skip_while(move |line| *line != header)
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter(|line| !line.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifests_are_read_for_the_version_and_the_features() {
        let core = "[package]\nname = \"lease-core\"\nrust-version = \"1.85\" # vendored\n\n\
                    [features]\ndefault = []\n# comment = [\"x\"]\ntokio = [\"dep:tokio\"]\n\
                    conformance = [\"dep:proptest\"]\n\n[dependencies]\nx = \"1\"\n";
        assert_eq!(package_value(core, "rust-version").as_deref(), Some("1.85"));
        assert_eq!(package_value(core, "name").as_deref(), Some("lease-core"));
        assert_eq!(features(core), ["conformance", "tokio"]);
        let consumer = "[package]\nrust-version = \"1.85\"\n\n[workspace]\n\n[dependencies]\n\
                        lease-core = { path = \"../../crates/lease-core\", features = \
                        [\"tokio\", \"conformance\"] }\n";
        assert_eq!(built_features(consumer), ["conformance", "tokio"]);
        assert_eq!(toolchain("1.85"), "1.85.0");
        assert_eq!(toolchain("1.94.1"), "1.94.1");
    }

    #[test]
    fn the_consumer_builds_every_feature_of_lease_core_on_its_rust_version() {
        let root = project_root();
        let core = read(&root.join("crates/lease-core/Cargo.toml")).expect("lease-core manifest");
        let consumer = read(&root.join(CONSUMER).join("Cargo.toml")).expect("consumer manifest");
        assert_eq!(features(&core), built_features(&consumer));
        assert_eq!(
            package_value(&core, "rust-version"),
            package_value(&consumer, "rust-version")
        );
    }
}
