//! What crates.io and docs.rs will build, checked before anyone publishes: the documentation as
//! docs.rs renders it, and every published package's tests and benches built from its `.crate`.
//!
//! A package can differ from the workspace in ways no workspace build sees: cargo drops a path
//! dependency without a version (lessor-partition's self dev-dependency once vanished that way),
//! and only the files listed in the package are there. So [`packages`] unpacks each `.crate` into
//! a scratch workspace outside this one, points each published crate at its unpacked sibling with
//! `[patch.crates-io]`, and builds every test and bench target from there.

use std::fs;
use std::path::{Path, PathBuf};

use crate::quick_start::profiles;
use crate::step::{Steps, cargo, run_command};
use crate::{Result, project_root};

/// A page docs.rs renders for a feature-gated item; with `doc_cfg` it names the feature.
const BADGE_PAGE: &str = "lease_core/conformance/constant.CASES.html";
/// What that page must say: the badge of the `conformance` feature.
const BADGE_TEXT: &str = "crate feature <code>conformance</code>";

/// One step: `cargo doc --workspace --all-features --no-deps` as docs.rs runs it (`--cfg docsrs`,
/// so `doc_cfg` badges are on), with warnings denied, then a look at one feature-gated page for
/// its badge. docs.rs uses nightly; `RUSTC_BOOTSTRAP=1` lets the pinned stable toolchain accept
/// `#![feature(doc_cfg)]`, for this build only.
pub(crate) fn docs_rs(steps: &mut Steps) -> Result {
    let title = "rustdoc as docs.rs renders it (--all-features, --cfg docsrs, -D warnings)";
    let mut command = cargo(&["doc", "--workspace", "--all-features", "--no-deps"]);
    command
        .env("RUSTDOCFLAGS", "--cfg docsrs -D warnings")
        .env("RUSTC_BOOTSTRAP", "1");
    steps.run(title, &mut command)?;
    let page = target_dir().join("doc").join(BADGE_PAGE);
    let html = fs::read_to_string(&page)
        .map_err(|error| format!("{title}: cannot read {}: {error}", page.display()))?;
    if !html.contains(BADGE_TEXT) {
        return Err(format!(
            "{title}: {} shows no `{BADGE_TEXT}` badge: is \
             #![cfg_attr(docsrs, feature(doc_cfg))] still in lease-core's lib.rs?",
            page.display()
        )
        .into());
    }
    println!("    feature badges: {BADGE_PAGE} names its feature");
    Ok(())
}

/// One step: `cargo package` of every published crate, each `.crate` unpacked into
/// `target/package-check/`, and every test and bench target built there from the packages alone.
pub(crate) fn packages(steps: &mut Steps) -> Result {
    let title = "packages: cargo package, then build every package's tests and benches from it";
    let started = steps.announce(title);
    let published = published_crates()?;
    let mut package = cargo(&["package", "--no-verify", "--allow-dirty"]);
    for (name, _) in &published {
        package.args(["-p", name]);
    }
    run_command(title, package.current_dir(project_root()))?;

    let scratch = target_dir().join("package-check");
    if scratch.exists() {
        fs::remove_dir_all(&scratch)?;
    }
    fs::create_dir_all(&scratch)?;
    let mut members = Vec::new();
    for (name, version) in &published {
        let folder = format!("{name}-{version}");
        let archive = target_dir().join("package").join(format!("{folder}.crate"));
        run_command(
            title,
            std::process::Command::new("tar")
                .arg("-xzf")
                .arg(&archive)
                .arg("-C")
                .arg(&scratch),
        )?;
        for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
            if !scratch.join(&folder).join(licence).is_file() {
                return Err(format!("{title}: {folder}.crate carries no {licence}").into());
            }
        }
        members.push((name.clone(), folder));
    }
    let root_manifest = fs::read_to_string(project_root().join("Cargo.toml"))?;
    let manifest = scratch_manifest(&members) + &profiles(&root_manifest);
    fs::write(scratch.join("Cargo.toml"), manifest)?;
    // The workspace's lock file: the packages build against the versions the workspace tested.
    fs::copy(
        project_root().join("Cargo.lock"),
        scratch.join("Cargo.lock"),
    )?;
    // With lease-cli's `dynamo` feature, so that its DynamoDB test files (`required-features`)
    // are built from the package too.
    let mut build = cargo(&["build", "--workspace", "--tests", "--benches"]);
    build.args(crate::test::CLI_DYNAMO);
    // Shared, so that dependencies the workspace already built are not built again.
    build
        .env("CARGO_TARGET_DIR", target_dir())
        .current_dir(&scratch);
    run_command(title, &mut build)?;
    steps.finish(title, started);
    Ok(())
}

/// The scratch workspace: every unpacked package a member, and every published crate patched to
/// its unpacked sibling, so that no dependency comes from this repository's folders.
fn scratch_manifest(members: &[(String, String)]) -> String {
    let mut text = String::from(
        "# Written by `cargo xtask test` (xtask/src/package.rs): the published packages, unpacked.\n\
         [workspace]\nresolver = \"3\"\nmembers = [\n",
    );
    for (_, folder) in members {
        text.push_str(&format!("    \"{folder}\",\n"));
    }
    text.push_str("]\n\n[patch.crates-io]\n");
    for (name, folder) in members {
        text.push_str(&format!("{name} = {{ path = \"{folder}\" }}\n"));
    }
    text
}

/// Every crate under `crates/` whose manifest does not say `publish = false`, with its version
/// (the workspace's, which every published crate either inherits or spells out the same).
pub(crate) fn published_crates() -> Result<Vec<(String, String)>> {
    let root = project_root();
    let workspace_version =
        manifest_value(&fs::read_to_string(root.join("Cargo.toml"))?, "version")
            .ok_or("the workspace Cargo.toml has no [workspace.package] version")?;
    let mut out = Vec::new();
    for entry in fs::read_dir(root.join("crates"))? {
        let manifest = entry?.path().join("Cargo.toml");
        let Ok(text) = fs::read_to_string(&manifest) else {
            continue;
        };
        if text
            .lines()
            .any(|line| line.replace(' ', "") == "publish=false")
        {
            continue;
        }
        let name = manifest_value(&text, "name")
            .ok_or_else(|| format!("{} has no package name", manifest.display()))?;
        let version = manifest_value(&text, "version").unwrap_or_else(|| workspace_version.clone());
        out.push((name, version));
    }
    out.sort();
    Ok(out)
}

/// The quoted value of the first `key = "value"` line of a manifest.
fn manifest_value(manifest: &str, key: &str) -> Option<String> {
    manifest.lines().find_map(|line| {
        let (name, value) = line.split_once('=')?;
        let value = value.trim();
        (name.trim() == key && value.starts_with('"')).then(|| value.trim_matches('"').to_owned())
    })
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else `<root>/target`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| project_root().join("target"), |dir| absolute(&dir))
}

/// `dir` made absolute against the workspace root (cargo reads a relative one from the cwd).
fn absolute(dir: &Path) -> PathBuf {
    if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        project_root().join(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::{manifest_value, profiles, scratch_manifest};

    #[test]
    fn the_scratch_workspace_takes_the_workspace_profiles_only() {
        let root = "[workspace]\nmembers = []\n\n[profile.bench]\ndebug = false\n\n\
                    [workspace.lints.rust]\nunsafe_code = \"forbid\"\n[profile.test]\nopt-level = 1\n";
        assert_eq!(
            profiles(root),
            "\n[profile.bench]\ndebug = false\n\n\n[profile.test]\nopt-level = 1\n"
        );
    }

    #[test]
    fn the_scratch_workspace_patches_every_package_to_its_unpacked_sibling() {
        let members = [
            ("lease-core".to_owned(), "lease-core-0.1.0".to_owned()),
            ("lease-file".to_owned(), "lease-file-0.1.0".to_owned()),
        ];
        let text = scratch_manifest(&members);
        assert!(
            text.contains("members = [\n    \"lease-core-0.1.0\",\n    \"lease-file-0.1.0\",\n]")
        );
        assert!(text.contains("[patch.crates-io]\nlease-core = { path = \"lease-core-0.1.0\" }\n"));
        assert!(text.contains("lease-file = { path = \"lease-file-0.1.0\" }\n"));
    }

    #[test]
    fn manifest_values_are_read_from_quoted_lines_only() {
        let manifest = "[package]\nname = \"lease-core\"\nversion.workspace = true\n";
        assert_eq!(
            manifest_value(manifest, "name").as_deref(),
            Some("lease-core")
        );
        assert_eq!(manifest_value(manifest, "version"), None);
    }
}
