//! Every crate README's quick start, and the repository README's, as a new user meets it: a fresh crate outside the workspace
//! depends on the crate by path with exactly what the README's `cargo add` line asks for, takes the
//! README's first ```rust block verbatim as `src/main.rs`, builds it and runs it.
//!
//! The doctests compile the same blocks, but inside the crate, with hidden lines and the crate's
//! own dev-dependencies; this is what a user who pastes the block gets. A quick start that needs
//! DynamoDB (lease-dynamo's) is built always and run when `LEASE_DYNAMO_ENDPOINT` is set (`cargo
//! xtask test` sets it), with the AWS SDK pointed there by `AWS_ENDPOINT_URL`; otherwise its run
//! prints `SKIPPED`; lease-postgres's reads `LEASE_POSTGRES_URL` and is run when that is set,
//! lease-redis's reads `LEASE_REDIS_URL` likewise.
//! `cargo xtask test` builds the quick starts in its build step with the same
//! code (xtask/src/quick_start.rs); this test builds them again, which cargo finds up to date
//! unless a README or a crate changed since, and runs them.

#[path = "../src/quick_start.rs"]
mod quick_start;
mod support;

use std::path::Path;
use std::process::Command;

use quick_start::{Dependency, cargo_add, first_rust_block, workspace_version};
use support::{crates, is_published, read, root};

/// The quick starts that talk to DynamoDB: run only when an endpoint is given.
const NEEDS_DYNAMO: &[&str] = &["lease-dynamo"];
/// The quick starts that talk to PostgreSQL: run only when `LEASE_POSTGRES_URL` names a server
/// (`cargo xtask test` sets it), which they read as a user's program would.
const NEEDS_POSTGRES: &[&str] = &["lease-postgres"];
/// The quick starts that talk to Redis: run only when `LEASE_REDIS_URL` names a server.
const NEEDS_REDIS: &[&str] = &["lease-redis"];

/// Builds the quick start of `krate` and runs it unless it needs DynamoDB and none is given;
/// returns what went wrong.
fn build_and_run(krate: &str, dir: &Path) -> Result<String, String> {
    let quick = quick_start::write(&root(), &crates(), krate, dir)?.ok_or("no ```rust block")?;
    let target = quick_start::target_dir(&root());
    let built = quick
        .build(env!("CARGO").as_ref(), &target)
        .status()
        .map_err(|e| e.to_string())?;
    if !built.success() {
        return Err(format!(
            "cargo build failed ({built}) in {}",
            quick.scratch.display()
        ));
    }
    let mut run = Command::new(quick.binary(&target));
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
    // lease-postgres's quick start reads the server from LEASE_POSTGRES_URL, as its users do.
    if NEEDS_POSTGRES.contains(&krate)
        && std::env::var("LEASE_POSTGRES_URL").map_or(true, |url| url.is_empty())
    {
        return Ok(format!(
            "{krate}: built; run SKIPPED (no LEASE_POSTGRES_URL)"
        ));
    }
    if NEEDS_REDIS.contains(&krate)
        && std::env::var("LEASE_REDIS_URL").map_or(true, |url| url.is_empty())
    {
        return Ok(format!("{krate}: built; run SKIPPED (no LEASE_REDIS_URL)"));
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
        match build_and_run(&krate, &dir) {
            Ok(outcome) => eprintln!("{outcome}"),
            Err(problem) => problems.push(format!("{krate}/README.md: {problem}")),
        }
        checked += 1;
    }
    // The repository's README: its quick start uses a real backend, through the same API.
    match build_and_run(quick_start::ROOT, &root()) {
        Ok(outcome) => eprintln!("{outcome}"),
        Err(problem) => problems.push(format!("README.md: {problem}")),
    }
    checked += 1;
    assert!(checked >= 5, "found only {checked} quick starts");
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
