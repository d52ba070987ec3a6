//! Every crate README's quick start, as a new user meets it: a fresh crate outside the workspace
//! depends on the crate by path with exactly what the README's `cargo add` line asks for, takes the
//! README's first ```rust block verbatim as `src/main.rs`, builds it and runs it.
//!
//! The doctests compile the same blocks, but inside the crate, with hidden lines and the crate's
//! own dev-dependencies; this is what a user who pastes the block gets. A quick start that needs
//! DynamoDB (lease-dynamo's) is built always and run when `LEASE_DYNAMO_ENDPOINT` is set (`cargo
//! xtask test` sets it), with the AWS SDK pointed there by `AWS_ENDPOINT_URL`; otherwise its run
//! prints `SKIPPED`.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{crates, is_published, read, root};

/// The quick starts that talk to DynamoDB: run only when an endpoint is given.
const NEEDS_DYNAMO: &[&str] = &["lease-dynamo"];

/// One dependency of a `cargo add` line: the crate and the features asked for it.
#[derive(Debug, PartialEq, Eq)]
struct Dependency {
    name: String,
    features: Vec<String>,
}

/// The dependencies of the README's first `cargo add` line (`cargo add a b --features b/f`);
/// a feature without a `crate/` prefix belongs to the first crate, as with `cargo add`.
fn cargo_add(readme: &str) -> Option<Vec<Dependency>> {
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
fn first_rust_block(readme: &str) -> Option<(String, bool)> {
    let start = readme.find("```rust")?;
    let rest = &readme[start..];
    let (fence, body) = rest.split_once('\n')?;
    let end = body.find("\n```")?;
    Some((format!("{}\n", &body[..end]), fence.contains("no_run")))
}

/// The scratch crate's manifest: its own workspace (so the repository's does not claim it), a
/// path dependency for every workspace crate and the workspace's version for every other one.
fn scratch_manifest(package: &str, deps: &[Dependency], workspace: &str) -> String {
    let mut text = format!(
        "[package]\nname = \"{package}\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[workspace]\n\n[dependencies]\n"
    );
    for dep in deps {
        let source = match crates().into_iter().find(|(name, _)| *name == dep.name) {
            Some((_, dir)) => format!("path = \"{}\"", dir.display()),
            None => format!(
                "version = \"{}\"",
                workspace_version(workspace, &dep.name)
                    .unwrap_or_else(|| panic!("{} is not in [workspace.dependencies]", dep.name))
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
    text
}

/// The version requirement of `name` in the root manifest's `[workspace.dependencies]`.
fn workspace_version(workspace: &str, name: &str) -> Option<String> {
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

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| root().join("target"), |dir| root().join(dir))
}

/// Builds the quick start of `krate` in `scratch` and runs it unless it needs DynamoDB and none
/// is given; returns what went wrong.
fn build_and_run(krate: &str, dir: &Path, scratch: &Path) -> Result<String, String> {
    let readme = read(&dir.join("README.md"));
    let (code, _) = first_rust_block(&readme).ok_or("no ```rust block")?;
    let deps = cargo_add(&readme).ok_or("no `cargo add` line")?;
    if !deps.iter().any(|dep| dep.name == krate) {
        return Err(format!("its `cargo add` line does not add {krate}"));
    }
    let package = format!("quick-start-{krate}");
    let workspace = read(&root().join("Cargo.toml"));
    fs::create_dir_all(scratch.join("src")).map_err(|e| e.to_string())?;
    fs::write(
        scratch.join("Cargo.toml"),
        scratch_manifest(&package, &deps, &workspace),
    )
    .map_err(|e| e.to_string())?;
    fs::write(scratch.join("src/main.rs"), &code).map_err(|e| e.to_string())?;
    // The workspace's versions, so the quick start builds against what the workspace tested.
    fs::copy(root().join("Cargo.lock"), scratch.join("Cargo.lock")).map_err(|e| e.to_string())?;
    let target = target_dir();
    let built = Command::new(env!("CARGO"))
        .args(["build", "--quiet"])
        .current_dir(scratch)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .map_err(|e| e.to_string())?;
    if !built.success() {
        return Err(format!(
            "cargo build failed ({built}) in {}",
            scratch.display()
        ));
    }
    let mut run = Command::new(target.join("debug").join(&package));
    if NEEDS_DYNAMO.contains(&krate) {
        match std::env::var("LEASE_DYNAMO_ENDPOINT") {
            Ok(endpoint) if !endpoint.is_empty() => {
                run.env("AWS_ENDPOINT_URL", endpoint);
            }
            _ => {
                return Ok(format!(
                    "{krate}: built; run SKIPPED (no LEASE_DYNAMO_ENDPOINT)"
                ));
            }
        }
    }
    let ran = run.output().map_err(|e| e.to_string())?;
    if !ran.status.success() {
        return Err(format!(
            "the quick start exited with {}:\n{}{}",
            ran.status,
            String::from_utf8_lossy(&ran.stdout),
            String::from_utf8_lossy(&ran.stderr)
        ));
    }
    Ok(format!("{krate}: built and ran"))
}

#[test]
fn every_readme_quick_start_builds_and_runs_verbatim_outside_the_workspace() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for (krate, dir) in crates().into_iter().filter(|(_, dir)| is_published(dir)) {
        let readme = read(&dir.join("README.md"));
        if first_rust_block(&readme).is_none() {
            // lease-cli: a binary, whose README shows shell commands.
            assert!(
                !dir.join("src/lib.rs").exists(),
                "{krate} is a library without a Rust quick start in its README"
            );
            continue;
        }
        let scratch = target_dir().join("readme-quick-starts").join(&krate);
        let _ = fs::remove_dir_all(&scratch);
        match build_and_run(&krate, &dir, &scratch) {
            Ok(outcome) => eprintln!("{outcome}"),
            Err(problem) => problems.push(format!("{krate}/README.md: {problem}")),
        }
        checked += 1;
    }
    assert!(checked >= 4, "found only {checked} quick starts");
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_cargo_add_line_is_read_as_cargo_reads_it() {
    let readme = "```sh\ncargo add lease-dynamo tokio --features tokio/full\n```\n";
    assert_eq!(
        cargo_add(readme),
        Some(vec![
            Dependency {
                name: "lease-dynamo".into(),
                features: vec![]
            },
            Dependency {
                name: "tokio".into(),
                features: vec!["full".into()]
            },
        ])
    );
    assert_eq!(
        cargo_add("cargo add lease-core --features tokio,conformance")
            .map(|deps| deps[0].features.clone()),
        Some(vec!["tokio".to_owned(), "conformance".to_owned()])
    );
    assert_eq!(cargo_add("no such line"), None);
}

#[test]
fn the_first_rust_block_is_taken_verbatim() {
    let readme = "# x\n```sh\nls\n```\n```rust,no_run\nfn main() {}\n```\n```rust\nsecond\n```\n";
    assert_eq!(
        first_rust_block(readme),
        Some(("fn main() {}\n".to_owned(), true))
    );
    let workspace = "[workspace.dependencies]\ntokio = { version = \"1.54\", features = [\"rt\"] }\nuuid = \"1.29\"\n";
    assert_eq!(
        workspace_version(workspace, "tokio").as_deref(),
        Some("1.54")
    );
    assert_eq!(
        workspace_version(workspace, "uuid").as_deref(),
        Some("1.29")
    );
}
