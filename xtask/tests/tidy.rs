//! Repository rules that can be checked, checked as code (rust-analyzer's "tidy" tests).
//!
//! lease-core is what people vendor into their own workspaces: it must build without an async
//! runtime, without AWS crates and without its workspace. The other crates share the
//! workspace's lints; lease-core carries its own copy so that it builds alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

mod support;

use support::{code_only, library_lines, read, root};

/// Crates that lease-core must never depend on: they all sit above it.
const WORKSPACE_CRATES_ABOVE_CORE: [&str; 4] = [
    "lease-dynamo",
    "lease-file",
    "lessor-partition",
    "lease-cli",
];

#[test]
fn lease_core_default_build_has_no_runtime_no_aws_and_no_workspace_crate() {
    let tree = cargo_stdout(&[
        "tree",
        "-p",
        "lease-core",
        "-e",
        "normal",
        "--prefix",
        "none",
    ]);
    let mut offenders: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| {
            name.starts_with("tokio")
                || name.starts_with("aws-")
                || WORKSPACE_CRATES_ABOVE_CORE.contains(name)
        })
        .collect();
    offenders.sort_unstable();
    offenders.dedup();
    assert!(
        offenders.is_empty(),
        "lease-core (default features) must not depend on {offenders:?}; full tree:\n{tree}"
    );
}

/// The most packages the README's first command, `cargo run -p lease-cli -- demo`, may compile
/// (issue 33: it compiled 195, the AWS SDK and the aws-lc-sys C library among them, for a demo
/// that uses only files).
const FIRST_COMMAND_BUDGET: usize = 80;

/// The packages `cargo build -p lease-cli` compiles with `features`: its normal and build
/// dependencies (proc macros and what build scripts use included), each `name version` once, as
/// cargo prints one `Compiling` line for each.
fn cli_build_packages(features: &[&str]) -> Vec<String> {
    let mut args = vec![
        "tree",
        "-p",
        "lease-cli",
        "-e",
        "normal,build",
        "--prefix",
        "none",
    ];
    args.extend_from_slice(features);
    let mut packages: Vec<String> = cargo_stdout(&args)
        .lines()
        .map(|line| {
            line.split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|package| !package.is_empty())
        .collect();
    packages.sort_unstable();
    packages.dedup();
    packages
}

#[test]
fn the_readmes_first_command_builds_no_aws_crate_no_c_library_and_at_most_80_packages() {
    let packages = cli_build_packages(&[]);
    let offenders: Vec<&String> = packages
        .iter()
        .filter(|package| {
            let name = package.split(' ').next().unwrap_or_default();
            name.starts_with("aws-")
                || name == "lease-dynamo"
                || name.ends_with("-sys")
                // What builds C code, and the Rust crypto crates that embed C or assembly.
                || ["cc", "cmake", "ring", "openssl"].contains(&name)
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "lease-cli's default build (the README's first command) must compile no AWS crate and no \
         C library, yet compiles {offenders:?}: put them behind the `dynamo` feature"
    );
    assert!(
        packages.len() <= FIRST_COMMAND_BUDGET,
        "lease-cli's default build (the README's first command) compiles {} packages, over the \
         budget of {FIRST_COMMAND_BUDGET}:\n{}",
        packages.len(),
        packages.join("\n")
    );
    // The store the feature is for is still there with it.
    let with_dynamo = cli_build_packages(&["--features", "dynamo"]);
    assert!(
        with_dynamo.iter().any(|p| p.starts_with("lease-dynamo ")),
        "lease-cli --features dynamo does not build lease-dynamo"
    );
}

#[test]
fn lease_core_folder_alone_builds_outside_the_workspace() {
    let scratch = Scratch::new("lease-core-standalone");
    let copy = scratch.path().join("lease-core");
    copy_dir(&root().join("crates").join("lease-core"), &copy);
    // The workspace's lock file pins the same versions, so `--offline` finds them all.
    fs::copy(root().join("Cargo.lock"), copy.join("Cargo.lock")).expect("copy Cargo.lock");
    let output = Command::new(cargo())
        .args(["build", "--offline", "--quiet"])
        .current_dir(&copy)
        .env("CARGO_TARGET_DIR", scratch.path().join("target"))
        .output()
        .expect("run cargo build");
    assert!(
        output.status.success(),
        "a copy of crates/lease-core alone does not build (are its package fields inherited?):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn lease_core_manifest_inherits_nothing_from_the_workspace() {
    let manifest = read(&root().join("crates/lease-core/Cargo.toml"));
    let inheriting: Vec<&str> = manifest
        .lines()
        .filter(|line| without_comment(line).contains("workspace"))
        .collect();
    assert!(
        inheriting.is_empty(),
        "crates/lease-core/Cargo.toml must spell every field out (it is vendored alone), found:\n{}",
        inheriting.join("\n")
    );
}

#[test]
fn every_crate_but_lease_core_uses_the_workspace_lints() {
    for manifest in crate_manifests() {
        let text = read(&manifest);
        let uses_workspace_lints = section(&text, "lints")
            .iter()
            .any(|line| is_workspace_true(line));
        let folder = manifest.parent().and_then(Path::file_name);
        if folder.is_some_and(|name| name == "lease-core") {
            assert!(
                !uses_workspace_lints,
                "lease-core must carry its own [lints.*] (it builds outside the workspace)"
            );
        } else if folder.is_some_and(|name| name == "lease-forktest") {
            // Test support holding the workspace's only `unsafe` blocks (`fork` without `exec`):
            // the workspace's lints with `unsafe_code` at `deny` instead of `forbid`, and never
            // published.
            let rust = section(&text, "lints.rust");
            assert!(
                rust.iter().any(|line| line == "unsafe_code = \"deny\""),
                "lease-forktest must deny unsafe code outside its one allowed block"
            );
            assert!(
                text.lines().any(|l| l.replace(' ', "") == "publish=false"),
                "lease-forktest must be `publish = false`"
            );
        } else {
            assert!(
                uses_workspace_lints,
                "{} lacks `[lints] workspace = true`",
                manifest.display()
            );
        }
    }
}

#[test]
fn lease_core_lints_are_at_least_the_workspace_lints() {
    let workspace = read(&root().join("Cargo.toml"));
    let core = read(&root().join("crates/lease-core/Cargo.toml"));
    for tool in ["rust", "clippy"] {
        let own = section(&core, &format!("lints.{tool}"));
        assert!(
            !own.is_empty(),
            "crates/lease-core/Cargo.toml has no [lints.{tool}]"
        );
        for lint in section(&workspace, &format!("workspace.lints.{tool}")) {
            assert!(
                own.contains(&lint),
                "lease-core's [lints.{tool}] drifted from the workspace: it lacks `{lint}`"
            );
        }
    }
}

/// The longest a function of library code may be, in lines from its `fn` line to its closing
/// brace (comments and blank lines count: a long function is long to read).
const MAX_FUNCTION_LINES: usize = 80;

#[test]
fn no_function_in_library_code_is_longer_than_80_lines() {
    let mut files = Vec::new();
    for manifest in crate_manifests() {
        rust_files(&manifest.with_file_name("src"), &mut files);
    }
    assert!(files.len() > 20, "found the library sources: {files:?}");
    let mut long = Vec::new();
    for file in files {
        for (name, line, lines) in long_functions(&read(&file), MAX_FUNCTION_LINES) {
            long.push(format!(
                "{}:{line} fn {name}: {lines} lines",
                file.display()
            ));
        }
    }
    assert!(
        long.is_empty(),
        "split these into a pure decision and its I/O (at most {MAX_FUNCTION_LINES} lines each):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_length_check_sees_through_strings_comments_and_test_modules() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let source = format!(
        "pub(crate) async fn long() {{\n{}}}\n\
         fn short() {{\n    let s = \"}}}}}}\"; // }}\n    let c = '}}';\n    let r = r#\"{{\"#;\n{}}}\n\
         fn lifetimes<'a>(x: &'a str) -> &'a str {{\n    x\n}}\n\
         trait T {{\n    fn declared(&self);\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\n",
        body(80),
        body(70),
        body(200),
    );
    let found = long_functions(&source, MAX_FUNCTION_LINES);
    assert_eq!(found, vec![("long".to_owned(), 1, 82)], "{source}");
}

/// Every `.rs` file under `dir`, except test modules kept in files of their own (`tests.rs`).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("read source folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// `(name, first line, length)` of every function in `source` longer than `max` lines, up to
/// the first `#[cfg(test)]` module.
fn long_functions(source: &str, max: usize) -> Vec<(String, usize, usize)> {
    let code = code_only(source);
    let lines = library_lines(&code);
    let end = lines.len();
    let mut found = Vec::new();
    for (start, line) in lines[..end].iter().enumerate() {
        let Some(name) = function_name(line) else {
            continue;
        };
        let mut depth = 0usize;
        let mut opened = false;
        for (offset, text) in lines[start..end].iter().enumerate() {
            for ch in text.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            if !opened && text.trim_end().ends_with(';') {
                break; // a declaration without a body
            }
            if opened && depth == 0 {
                if offset + 1 > max {
                    found.push((name.to_owned(), start + 1, offset + 1));
                }
                break;
            }
        }
    }
    found
}

/// The name of the function a line starts, if it starts one.
fn function_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn cargo_stdout(args: &[&str]) -> String {
    let output = Command::new(cargo())
        .args(args)
        .current_dir(root())
        .output()
        .expect("run cargo");
    assert!(
        output.status.success(),
        "cargo {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo prints UTF-8")
}

fn crate_manifests() -> Vec<PathBuf> {
    let mut manifests: Vec<PathBuf> = fs::read_dir(root().join("crates"))
        .expect("read crates/")
        .map(|entry| entry.expect("read crates/ entry").path().join("Cargo.toml"))
        .filter(|manifest| manifest.is_file())
        .collect();
    manifests.sort();
    assert!(!manifests.is_empty(), "no crates under crates/");
    manifests
}

/// The key/value lines of TOML table `[name]`, without comments and blank lines.
fn section(toml: &str, name: &str) -> Vec<String> {
    let header = format!("[{name}]");
    toml.lines()
        .map(|line| without_comment(line).trim())
        .skip_while(|line| *line != header)
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter(|line| !line.is_empty())
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn is_workspace_true(line: &str) -> bool {
    line.replace(' ', "") == "workspace=true"
}

/// The line up to a `#` (good enough for manifests: they put no `#` inside strings that matter).
fn without_comment(line: &str) -> &str {
    line.split_once('#').map_or(line, |(code, _)| code)
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create copy folder");
    for entry in fs::read_dir(from).expect("read folder to copy") {
        let entry = entry.expect("read folder entry");
        let target = to.join(entry.file_name());
        if entry.file_name() == "target" {
            continue;
        }
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// A uniquely named folder under the system temp dir, outside any workspace, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(purpose: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "xtask-tidy-{purpose}-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&path).expect("create scratch folder");
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The lessor's layers, bottom up: each may use only the layers below it (`partition` ←
/// `lessor` ← `fleet`), so the range algebra stands alone. The simulators sit above all three,
/// in the unpublished crate `lessor-sim`.
const LESSOR_LAYERS: [(&str, &[&str]); 2] =
    [("partition", &["lessor", "fleet"]), ("lessor", &["fleet"])];

#[test]
fn the_lessor_layers_use_only_the_layers_below() {
    let src = root().join("crates").join("lessor-partition").join("src");
    let exports = module_exports(&read(&src.join("lib.rs")));
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let sources: Vec<(String, String)> = files
        .iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(&src).ok()?;
            let module = relative.iter().next()?.to_str()?.trim_end_matches(".rs");
            Some((module.to_owned(), read(file)))
        })
        .collect();
    assert!(sources.len() > 10, "found the lessor's sources");
    let offences = layer_offences(&sources, &exports);
    assert!(
        offences.is_empty(),
        "a lower layer of lessor-partition uses a higher one:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_layer_check_catches_a_planted_upward_use() {
    let lib =
        "mod partition;\npub use fleet::{Worker, WorkerHandle};\npub use lessor::{Lessor, get};\n";
    let exports = module_exports(lib);
    let planted = |module: &str, code: &str| vec![(module.to_owned(), code.to_owned())];
    let caught =
        |module: &str, code: &str| !layer_offences(&planted(module, code), &exports).is_empty();
    assert!(caught("partition", "use crate::lessor::Grant;\n"));
    assert!(caught("partition", "fn f(w: &crate::Worker) {}\n"));
    assert!(caught(
        "lessor",
        "use crate::{PartitionSet, WorkerHandle};\n"
    ));
    assert!(caught(
        "partition",
        "fn f() { let _ = crate::get(\"x\"); }\n"
    ));
    assert!(caught("lessor", "use crate::fleet::Worker;\n"));
    // Allowed: downward uses, mentions in comments and strings, and test modules.
    assert!(!caught(
        "fleet",
        "use crate::lessor::listing_of;\nuse crate::Lessor;\n"
    ));
    assert!(!caught(
        "partition",
        "// a Worker uses crate::fleet\nconst S: &str = \"crate::fleet\";\n"
    ));
    assert!(!caught(
        "lessor",
        "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::Worker;\n}\n"
    ));
}

/// The simulators are test machinery: they live in `lessor-sim`, which is never published, and
/// the published lessor neither contains them nor needs them to build its own tests.
#[test]
fn the_simulators_live_in_an_unpublished_crate_outside_the_lessor() {
    let crates = root().join("crates");
    let sim = read(&crates.join("lessor-sim/Cargo.toml"));
    assert!(
        sim.lines()
            .any(|line| line.replace(' ', "") == "publish=false"),
        "crates/lessor-sim must be `publish = false`"
    );
    let lessor = crates.join("lessor-partition");
    assert!(
        !lessor.join("src/sim").exists() && !lessor.join("src/sim.rs").exists(),
        "the simulators belong in crates/lessor-sim, not in lessor-partition's library"
    );
    let manifest = read(&lessor.join("Cargo.toml"));
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").replace(' ', "");
        assert!(
            !line.starts_with("lessor-partition=") && !line.starts_with("lessor-sim"),
            "lessor-partition's manifest must not depend on itself or on lessor-sim \
             (cargo package drops a version-less path dependency): `{line}`"
        );
    }
}

/// The crates a backend or the AWS SDK is made of: the lessor may use them in tests only.
const BACKEND_CRATES: [&str; 3] = ["lease-dynamo", "lease-file", "lease-cli"];

#[test]
fn the_lessor_depends_on_no_backend_and_no_aws_crate() {
    for features in [&[][..], &["--all-features"][..]] {
        let mut args = vec![
            "tree",
            "-p",
            "lessor-partition",
            "-e",
            "normal",
            "--prefix",
            "none",
        ];
        args.extend_from_slice(features);
        let tree = cargo_stdout(&args);
        let offenders = backend_dependencies(&tree);
        assert!(
            offenders.is_empty(),
            "lessor-partition ({features:?}) must reach backends only through lease-core's traits, \
             yet depends on {offenders:?}; full tree:\n{tree}"
        );
    }
}

#[test]
fn the_dependency_check_catches_a_planted_backend() {
    let clean = "lessor-partition v0.1.0\nlease-core v0.1.0\nthiserror v2.0.0\ntracing v0.1.0\n";
    assert!(backend_dependencies(clean).is_empty());
    let planted = format!("{clean}lease-file v0.1.0\naws-sdk-dynamodb v1.0.0\naws-config v1.0.0\n");
    assert_eq!(
        backend_dependencies(&planted),
        vec!["aws-config", "aws-sdk-dynamodb", "lease-file"]
    );
}

/// Calls that read the time or draw randomness themselves. Library code takes both from what it
/// is given (a `Clock`, a `TokenSource`), so tests can drive them; see `ALLOWED_AMBIENT`.
const AMBIENT_CALLS: [&str; 5] = [
    "SystemTime::now()",
    "Instant::now()",
    "RandomTokens.",
    "Uuid::new_v4",
    "rand::",
];

/// Where library code may read the time or draw randomness itself: `(file, call, why)`, the file
/// as a path under `crates/`. Nothing else may: add an entry here only with its reason, and
/// say so in docs/architecture.md when it is a new kind of exception.
const ALLOWED_AMBIENT: &[(&str, &str, &str)] = &[
    // The Clock implementations themselves: SystemClock reads the system clocks, ManualClock
    // anchors its instants, and the sleeps wait on the real clock the Clock stands for.
    (
        "lease-core/src/clock.rs",
        "SystemTime::now()",
        "SystemClock",
    ),
    (
        "lease-core/src/clock.rs",
        "Instant::now()",
        "SystemClock, ManualClock's anchor, sleeps",
    ),
    // RandomTokens itself: the one default TokenSource.
    (
        "lease-core/src/error/token.rs",
        "Uuid::new_v4",
        "RandomTokens",
    ),
    // The conformance suite (feature `conformance`, test support): a fresh key prefix per run,
    // so that runs against one shared table never see each other's keys.
    (
        "lease-core/src/conformance.rs",
        "Uuid::new_v4",
        "conformance key nonce",
    ),
    // docs/architecture.md, the documented exception: DynamoDB's per-call request ids must be
    // unique even when a caller's token generator is not. (Retry jitter, the other exception,
    // is lease-core's `Backoff`, seeded from std's per-process hash keys, not from a call here.)
    (
        "lease-dynamo/src/acquire.rs",
        "Uuid::new_v4",
        "per-call request id",
    ),
    (
        "lease-dynamo/src/tenure.rs",
        "Uuid::new_v4",
        "per-call request id",
    ),
    // lease-postgres: the same per-call request ids, for the same reason, drawn in one function.
    (
        "lease-postgres/src/backend.rs",
        "Uuid::new_v4",
        "per-call request id",
    ),
    // lease-redis: the same per-call request ids, for the same reason, drawn in one function.
    (
        "lease-redis/src/backend.rs",
        "Uuid::new_v4",
        "per-call request id",
    ),
    // Table provisioning (an operator's call, not a lease operation): how long it waited for the
    // table to become active, for its error message.
    (
        "lease-dynamo/src/table.rs",
        "Instant::now()",
        "provisioning wait",
    ),
    // lease-file: the lock's heartbeats and liveness deadlines are measured on the process's own
    // monotonic clock, and the file names of temporary files and chain links need a nonce that
    // no other process draws: neither may come from a caller's (possibly repeating) generator.
    (
        "lease-file/src/lock.rs",
        "Instant::now()",
        "heartbeat and liveness deadlines",
    ),
    (
        "lease-file/src/lock.rs",
        "SystemTime::now()",
        "heartbeat record time",
    ),
    (
        "lease-file/src/lock.rs",
        "Uuid::new_v4",
        "lock instance nonce",
    ),
    (
        "lease-file/src/state.rs",
        "Uuid::new_v4",
        "temporary file nonce",
    ),
    (
        "lease-file/src/store.rs",
        "Uuid::new_v4",
        "temporary file nonce",
    ),
    // lease-testservers (test support, never published): how long a throwaway server may take
    // to start, stop, stream or promote is bounded on the real clock; the servers' own clocks
    // are what the suites test, not these waits.
    (
        "lease-testservers/src/postgres.rs",
        "Instant::now()",
        "server readiness deadline",
    ),
    // The conformance suite's bound on a wait for a backend's round trip: a test's own limit,
    // not time a lease is judged by (those come from the subject's clock).
    (
        "lease-core/src/conformance.rs",
        "Instant::now()",
        "conformance wait bound",
    ),
    (
        "lease-testservers/src/redis.rs",
        "Instant::now()",
        "server readiness deadline",
    ),
    (
        "lease-testservers/src/supervisor.rs",
        "Instant::now()",
        "server exit deadline",
    ),
    // lease-file's prune: a key's idle time is the system clock's reading against its lock
    // directory's modification time, which the kernel set from that same clock; an injected
    // clock cannot move file times, so it cannot time them either.
    (
        "lease-file/src/store.rs",
        "SystemTime::now()",
        "idle time against a directory's mtime",
    ),
];

#[test]
fn library_code_takes_time_and_randomness_from_what_it_is_given() {
    let crates = root().join("crates");
    let mut files = Vec::new();
    for manifest in crate_manifests() {
        let src = manifest.with_file_name("src");
        if src.join("lib.rs").is_file() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 20, "found the library sources: {files:?}");
    let mut offences = Vec::new();
    let mut used = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&crates).expect("under crates/");
        let relative = relative.to_string_lossy().replace('\\', "/");
        if relative.contains("/src/bin/") || relative.ends_with("/src/main.rs") {
            continue;
        }
        let source = read(file);
        offences.extend(ambient_calls(&relative, &source, ALLOWED_AMBIENT));
        for (path, call, _) in ALLOWED_AMBIENT {
            if *path == relative
                && !ambient_calls(&relative, &source, &[])
                    .iter()
                    .all(|o| !o.ends_with(call))
            {
                used.push((*path, *call));
            }
        }
    }
    let stale: Vec<_> = ALLOWED_AMBIENT
        .iter()
        .filter(|(path, call, _)| !used.contains(&(*path, *call)))
        .collect();
    assert!(
        stale.is_empty(),
        "allowed but no longer there, remove: {stale:?}"
    );
    assert!(
        offences.is_empty(),
        "read the time from a Clock and draw randomness from a TokenSource (or add a commented \
         entry to ALLOWED_AMBIENT):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_injection_check_catches_a_planted_ambient_call() {
    let planted = "fn deadline() -> Instant {\n    Instant::now() + D\n}\n\
                   fn token() -> LeaseToken {\n    lease_core::RandomTokens.next_token()\n}\n\
                   fn id() -> String {\n    uuid::Uuid::new_v4().to_string()\n}\n\
                   fn wall() -> SystemTime {\n    std::time::SystemTime::now()\n}\n\
                   fn roll() -> u8 {\n    rand::random()\n}\n";
    let found = ambient_calls("x/src/lib.rs", planted, &[]);
    assert_eq!(found.len(), 5, "{found:?}");
    // Allowed: an allowlisted call, a default injected in a builder, comments, strings, tests.
    let allowed = [("x/src/clock.rs", "Instant::now()", "a Clock")];
    assert!(
        ambient_calls(
            "x/src/clock.rs",
            "fn now() -> Instant { Instant::now() }\n",
            &allowed
        )
        .is_empty()
    );
    assert_eq!(
        ambient_calls(
            "x/src/other.rs",
            "fn now() -> Instant { Instant::now() }\n",
            &allowed
        )
        .len(),
        1,
        "the allowlist is per file"
    );
    let innocent = "fn b() -> B {\n    B { tokens: Arc::new(RandomTokens) }\n}\n\
                    // Instant::now() would be wrong here\n\
                    const S: &str = \"Uuid::new_v4\";\n\
                    #[cfg(test)]\nmod tests {\n    fn t() { let _ = Instant::now(); }\n}\n";
    assert!(ambient_calls("x/src/lib.rs", innocent, &[]).is_empty());
}

/// `path:line: call` for every ambient call in `source` (comments, strings and a trailing test
/// module aside) that `allowed` does not list for `path`.
fn ambient_calls(path: &str, source: &str, allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let code = code_only(source);
    let mut found = Vec::new();
    for (index, line) in library_lines(&code).iter().enumerate() {
        for call in AMBIENT_CALLS {
            let listed = allowed
                .iter()
                .any(|(file, what, _)| *file == path && *what == call);
            if line.contains(call) && !listed {
                found.push(format!("{path}:{}: {call}", index + 1));
            }
        }
    }
    found
}

/// The names each module of a crate root re-exports: `pub use fleet::{Worker, ..}` gives
/// `fleet: [Worker, ..]`.
fn module_exports(lib: &str) -> Vec<(String, Vec<String>)> {
    let code = code_only(lib).replace('\n', " ");
    let mut exports = Vec::new();
    for statement in code.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        let names = names
            .split(',')
            .map(str::trim)
            .filter(|name| {
                !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')
            })
            .map(str::to_owned)
            .collect();
        exports.push((module.trim().to_owned(), names));
    }
    exports
}

/// `module: what` for every use of a higher layer in `sources` (`(module, source)` pairs):
/// a path into it (`crate::fleet`), or a name it exports through the crate root (a type by its
/// name, a function as `crate::name`).
fn layer_offences(sources: &[(String, String)], exports: &[(String, Vec<String>)]) -> Vec<String> {
    let mut offences = Vec::new();
    for (module, source) in sources {
        let Some((_, forbidden)) = LESSOR_LAYERS.iter().find(|(layer, _)| layer == module) else {
            continue;
        };
        let code = code_only(source);
        let code = library_lines(&code).join("\n");
        for higher in *forbidden {
            let mut uses = vec![format!("crate::{higher}")];
            for (_, names) in exports.iter().filter(|(m, _)| m == higher) {
                for name in names {
                    if name.starts_with(char::is_uppercase) {
                        if has_word(&code, name) {
                            uses.push(name.clone());
                        }
                    } else {
                        uses.push(format!("crate::{name}("));
                    }
                }
            }
            for what in uses {
                let found = if what.starts_with("crate::") {
                    code.contains(&what)
                } else {
                    true
                };
                if found {
                    offences.push(format!("{module} uses {higher}: {what}"));
                }
            }
        }
    }
    offences
}

/// Whether `word` occurs in `code` as a whole identifier.
fn has_word(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(at, _)| {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let before = code[..at].chars().next_back().is_some_and(ident);
        let after = code[at + word.len()..].chars().next().is_some_and(ident);
        !before && !after
    })
}

/// The backend and AWS crates in a `cargo tree --prefix none` listing, sorted.
fn backend_dependencies(tree: &str) -> Vec<String> {
    let mut found: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| name.starts_with("aws-") || BACKEND_CRATES.contains(name))
        .map(str::to_owned)
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}
