//! Every crate README's quick start as a new user meets it: a fresh crate outside the workspace
//! that depends on the crate by path with exactly what the README's `cargo add` line asks for,
//! with the README's first ```rust block verbatim as `src/main.rs`.
//!
//! `cargo xtask test` writes and builds these crates in its build step (their dependencies
//! build with the features a user gets, apart from the workspace's); `xtask/tests/
//! readme_quick_starts.rs` (this file is its module too) writes them again, builds them (cargo
//! finds them up to date unless a README or a crate changed since) and runs them. Files are
//! written only when their text changes, so an unchanged quick start is not compiled twice.
#![allow(dead_code)] // the xtask binary builds, the test also parses and runs

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One dependency of a `cargo add` line: the crate and the features asked for it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Dependency {
    pub(crate) name: String,
    pub(crate) features: Vec<String>,
}

/// The dependencies of the README's first `cargo add` line (`cargo add a b --features b/f`);
/// a feature without a `crate/` prefix belongs to the first crate, as with `cargo add`.
pub(crate) fn cargo_add(readme: &str) -> Option<Vec<Dependency>> {
    let line = readme
        .lines()
        .find_map(|line| line.trim().strip_prefix("cargo add "))?;
    let mut deps: Vec<Dependency> = Vec::new();
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word == "--features" || word == "-F" {
            for feature in words.next().unwrap_or("").split(',') {
                match feature.split_once('/') {
                    Some((krate, feature)) => deps
                        .iter_mut()
                        .find(|dep| dep.name == krate)?
                        .features
                        .push(feature.to_owned()),
                    None => deps.first_mut()?.features.push(feature.to_owned()),
                }
            }
        } else if !word.starts_with('-') {
            deps.push(Dependency {
                name: word.to_owned(),
                features: Vec::new(),
            });
        }
    }
    Some(deps)
}

/// The body of the README's first ```rust block and whether its fence says `no_run`.
pub(crate) fn first_rust_block(readme: &str) -> Option<(String, bool)> {
    let start = readme.find("```rust")?;
    let rest = &readme[start..];
    let (fence, body) = rest.split_once('\n')?;
    let end = body.find("\n```")?;
    Some((format!("{}\n", &body[..end]), fence.contains("no_run")))
}

/// The scratch crate's manifest: its own workspace (so the repository's does not claim it), a
/// path dependency for every workspace crate (`crates`: name and folder) and the workspace's
/// version for every other one.
pub(crate) fn scratch_manifest(
    package: &str,
    deps: &[Dependency],
    workspace: &str,
    crates: &[(String, PathBuf)],
) -> Result<String, String> {
    let mut text = format!(
        "[package]\nname = \"{package}\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[workspace]\n\n[dependencies]\n"
    );
    for dep in deps {
        let source = match crates.iter().find(|(name, _)| *name == dep.name) {
            Some((_, dir)) => format!("path = \"{}\"", dir.display()),
            None => format!(
                "version = \"{}\"",
                workspace_version(workspace, &dep.name)
                    .ok_or_else(|| format!("{} is not in [workspace.dependencies]", dep.name))?
            ),
        };
        let features = dep
            .features
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect::<Vec<_>>()
            .join(", ");
        text.push_str(&format!(
            "{} = {{ {source}, features = [{features}] }}\n",
            dep.name
        ));
    }
    text.push_str(&profiles(workspace));
    Ok(text)
}

/// The `[profile.*]` tables of the workspace manifest, so that a scratch workspace (a quick start,
/// the unpacked packages) builds with the same settings and reuses what the workspace's own
/// builds left in the shared target dir; without them a quick start built every dependency
/// again with full debug info (its DynamoDB binary alone weighed 198 MB).
pub(crate) fn profiles(root_manifest: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in root_manifest.lines() {
        if line.starts_with('[') {
            inside = line.starts_with("[profile.");
            if inside {
                out.push('\n');
            }
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The version requirement of `name` in the root manifest's `[workspace.dependencies]`.
pub(crate) fn workspace_version(workspace: &str, name: &str) -> Option<String> {
    let line = workspace
        .lines()
        .find(|line| line.split('=').next().is_some_and(|key| key.trim() == name))?;
    let value = line.split_once('=')?.1.trim();
    let quoted = if value.starts_with('{') {
        value.split("version").nth(1)?.split_once('=')?.1.trim()
    } else {
        value
    };
    Some(quoted.split('"').nth(1)?.to_owned())
}

/// Where the quick starts build: the workspace's target dir (`$CARGO_TARGET_DIR`, relative to
/// `root`, or `<root>/target`), so that a dependency built once serves every later run.
pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| root.join("target"), |dir| root.join(dir))
}

/// A quick start written out as a crate.
#[derive(Debug)]
pub(crate) struct QuickStart {
    /// The scratch crate's package name, which is also its binary's.
    pub(crate) package: String,
    /// The scratch crate's folder.
    pub(crate) scratch: PathBuf,
}

impl QuickStart {
    /// `cargo build` of the scratch crate into `target`.
    pub(crate) fn build(&self, cargo: &std::ffi::OsStr, target: &Path) -> Command {
        let mut command = Command::new(cargo);
        command
            .args(["build", "--quiet"])
            .current_dir(&self.scratch)
            .env("CARGO_TARGET_DIR", target);
        command
    }

    /// The built binary in `target`.
    pub(crate) fn binary(&self, target: &Path) -> PathBuf {
        target.join("debug").join(&self.package)
    }
}

/// The name under which the repository's own README (at the root, `dir` = the root) is written:
/// its quick start may add any crates, and is checked like a crate's.
pub(crate) const ROOT: &str = "root";

/// Writes the quick start of `krate` (its folder `dir`) as a crate in
/// `<target>/readme-quick-starts/<krate>`; `Ok(None)` when its README has no ```rust block.
/// `root` is the workspace's root and `crates` its crates (name and folder).
pub(crate) fn write(
    root: &Path,
    crates: &[(String, PathBuf)],
    krate: &str,
    dir: &Path,
) -> Result<Option<QuickStart>, String> {
    let readme_path = dir.join("README.md");
    let readme = fs::read_to_string(&readme_path)
        .map_err(|e| format!("read {}: {e}", readme_path.display()))?;
    let Some((code, _)) = first_rust_block(&readme) else {
        return Ok(None);
    };
    let deps = cargo_add(&readme).ok_or("no `cargo add` line")?;
    if krate != ROOT && !deps.iter().any(|dep| dep.name == krate) {
        return Err(format!("its `cargo add` line does not add {krate}"));
    }
    let package = format!("quick-start-{krate}");
    let workspace = fs::read_to_string(root.join("Cargo.toml"))
        .map_err(|e| format!("read the root Cargo.toml: {e}"))?;
    let scratch = target_dir(root).join("readme-quick-starts").join(krate);
    fs::create_dir_all(scratch.join("src")).map_err(|e| e.to_string())?;
    write_if_changed(
        &scratch.join("Cargo.toml"),
        &scratch_manifest(&package, &deps, &workspace, crates)?,
    )?;
    write_if_changed(&scratch.join("src/main.rs"), &code)?;
    // The workspace's versions, so the quick start builds against what the workspace tested
    // (cargo then drops the entries it does not use, and the next run copies them back).
    let lock = fs::read_to_string(root.join("Cargo.lock")).map_err(|e| e.to_string())?;
    write_if_changed(&scratch.join("Cargo.lock"), &lock)?;
    Ok(Some(QuickStart { package, scratch }))
}

/// Writes `text` to `path` unless the file holds it already (cargo judges freshness by mtime).
fn write_if_changed(path: &Path, text: &str) -> Result<(), String> {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}
