//! The workspace's test binaries, run by xtask itself in lanes: two at a time, longest first,
//! each with its whole output printed when it ends.
//!
//! `cargo test` runs one test binary after another. Most of ours wait far more than they
//! compute (on DynamoDB Local, PostgreSQL, child processes, leases expiring on the wall clock),
//! so on two cores one binary's waits leave a core idle that another binary can use. The build
//! step lists every binary `cargo test` would run (cargo's `--message-format=json`); this module
//! runs exactly those, with the environment and working directory cargo gives them, so a
//! binary's result does not depend on who started it. A failing binary does not stop the
//! others: the step fails once all have ended, naming each failure and how to rerun it.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use crate::Result;
use crate::step::command_line;

/// How many binaries run at once.
pub(crate) const LANES: usize = 2;

/// The longest a test binary may run before it is killed and counted as failed, so that a hung
/// binary ends the run instead of holding CI until its timeout: three times the slowest binary
/// on a machine at load 11 (lease-file's model check, 95 s).
const TIMEOUT: Duration = Duration::from_secs(300);

/// The binaries known to run longest (package, target name, seconds measured alone on 2 cores),
/// started first so that no long one is left to run by itself at the end. Only an order: a
/// binary missing here runs after these, in cargo's order; the step prints the slowest of each
/// run to keep this list true.
const LONGEST_FIRST: &[(&str, &str, u32)] = &[
    ("lease-file", "model_check", 80),
    ("lease-dynamo", "stress", 51),
    ("lessor-partition", "dynamo_processes", 42),
    ("lease-cli", "cli", 26),
    ("lease-cli", "dynamo_deadlines", 24),
    ("lease-file", "pauses", 24),
    ("lease-postgres", "server_faults", 22),
    ("lessor-partition", "lessor_compaction", 20),
    ("lessor-partition", "dynamo_fleet", 19),
    ("lessor-partition", "postgres_fleet", 18),
    ("xtask", "tidy", 18),
    ("lessor-partition", "dynamo_assigner", 17),
    ("lease-cli", "dynamo_restart", 17),
    ("lease-cli", "postgres_server_loss", 17),
    ("lease-dynamo", "restore", 16),
    ("lessor-sim", "sim", 14),
    ("lease-file", "processes", 14),
    ("xtask", "readme_quick_starts", 12),
];

/// One test binary as cargo built it for `cargo test`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Binary {
    /// The package it belongs to.
    pub(crate) package: String,
    /// `lib`, `bin`, `test` or `bench`.
    pub(crate) kind: String,
    /// The target's name.
    pub(crate) name: String,
    /// The executable.
    pub(crate) path: PathBuf,
    /// The package's folder: the working directory and `CARGO_MANIFEST_DIR` cargo gives it.
    pub(crate) manifest_dir: PathBuf,
    /// What `cargo test` needs besides `-p` and the target to build it again: `--features`
    /// with the package's features other than `default`, `--target` for another system's.
    pub(crate) rerun_args: Vec<String>,
}

impl Binary {
    /// `package kind name`, as the step prints it.
    fn label(&self) -> String {
        format!("{} {} {}", self.package, self.kind, self.name)
    }

    /// The cargo arguments that run this binary alone.
    fn rerun(&self) -> String {
        let target = match self.kind.as_str() {
            "lib" => "--lib".to_owned(),
            kind => format!("--{kind} {}", self.name),
        };
        let mut line = format!("cargo test -p {}", self.package);
        for arg in &self.rerun_args {
            line.push(' ');
            line.push_str(arg);
        }
        format!("{line} {target}")
    }

    /// Where it stands in [`LONGEST_FIRST`]: lower runs earlier.
    fn rank(&self) -> usize {
        LONGEST_FIRST
            .iter()
            .position(|(package, name, _)| *package == self.package && *name == self.name)
            .unwrap_or(LONGEST_FIRST.len())
    }
}

/// The binaries `cargo test` would run, read from the JSON messages of a `cargo test --no-run
/// --message-format=json-render-diagnostics`: every artifact with an executable built as a
/// test (libraries', binaries', tests' and benches' test targets; not the `lease` binary
/// itself, nor examples).
pub(crate) fn from_cargo_messages(messages: &str) -> Result<Vec<Binary>> {
    let mut binaries = Vec::new();
    for line in messages.lines().filter(|line| line.starts_with('{')) {
        let message: serde_json::Value = serde_json::from_str(line)
            .map_err(|error| format!("cargo's JSON message `{line}`: {error}"))?;
        if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
            continue;
        }
        let Some(path) = message["executable"].as_str() else {
            continue;
        };
        let text = |value: &serde_json::Value, what: &str| -> Result<String> {
            value
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("cargo's JSON message has no {what}: {line}").into())
        };
        let manifest = PathBuf::from(text(&message["manifest_path"], "manifest_path")?);
        let manifest_dir = manifest
            .parent()
            .ok_or_else(|| format!("manifest path without a folder: {}", manifest.display()))?
            .to_path_buf();
        let features: Vec<&str> = message["features"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .filter(|feature| *feature != "default")
            .collect();
        let rerun_args = if features.is_empty() {
            Vec::new()
        } else {
            vec!["--features".to_owned(), features.join(",")]
        };
        binaries.push(Binary {
            package: package_name(&text(&message["package_id"], "package_id")?, &manifest_dir),
            kind: text(&message["target"]["kind"][0], "target kind")?,
            name: text(&message["target"]["name"], "target name")?,
            path: PathBuf::from(path),
            manifest_dir,
            rerun_args,
        });
    }
    Ok(binaries)
}

/// A package's name from its id: `path+file:///dir#name@version`, or `path+file:///dir#version`
/// when the name is the folder's.
fn package_name(id: &str, manifest_dir: &Path) -> String {
    match id.rsplit_once('#') {
        Some((_, fragment)) if fragment.contains('@') => {
            fragment.split('@').next().unwrap_or(fragment).to_owned()
        }
        _ => manifest_dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// How one binary ended.
#[derive(Debug)]
struct Ended {
    binary: Binary,
    took: Duration,
    /// `None` when it was killed at [`TIMEOUT`].
    status: Option<ExitStatus>,
}

impl Ended {
    fn passed(&self) -> bool {
        self.status.is_some_and(|status| status.success())
    }
}

/// Runs `binaries` [`LANES`] at a time, longest first, each with the environment `template`
/// sets (its variables, and those it removes), in its package's folder, with its output in
/// `logs/`; through `runner` when one is given (`wine` for Windows binaries: `wine <binary>`).
/// Each binary's output is printed whole when it ends, so outputs never interleave.
/// Fails, once all have ended, if any failed.
pub(crate) fn run(
    binaries: Vec<Binary>,
    template: &Command,
    logs: &Path,
    runner: Option<&str>,
) -> Result {
    fs::create_dir_all(logs)?;
    let mut queue: Vec<Binary> = binaries;
    // Stable: binaries not in the list keep cargo's order.
    queue.sort_by_key(Binary::rank);
    let count = queue.len();
    let queue = Mutex::new(VecDeque::from(queue));
    let ended = Mutex::new(Vec::with_capacity(count));
    let started = Instant::now();
    println!(
        "    {count} test binaries, {LANES} at a time, logs in {}",
        logs.display()
    );
    thread::scope(|scope| {
        for _ in 0..LANES {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut queue| queue.pop_front());
                    let Ok(Some(binary)) = next else { break };
                    let result = run_one(&binary, template, logs, runner);
                    let mut ended = ended.lock().unwrap_or_else(|poison| poison.into_inner());
                    match result {
                        Ok(end) => ended.push(end),
                        Err(error) => {
                            println!("    ! {}: {error}", binary.label());
                            ended.push(Ended {
                                binary,
                                took: Duration::ZERO,
                                status: None,
                            });
                        }
                    }
                }
            });
        }
    });
    let ended = ended
        .into_inner()
        .unwrap_or_else(|poison| poison.into_inner());
    print!("{}", report(&ended, started.elapsed()));
    let failed: Vec<&Ended> = ended.iter().filter(|end| !end.passed()).collect();
    if failed.is_empty() {
        return Ok(());
    }
    let mut message = format!("{} of {count} test binaries failed:", failed.len());
    for end in failed {
        let how = match end.status {
            Some(status) => status.to_string(),
            None => format!("killed after {}s", TIMEOUT.as_secs()),
        };
        let _ = write!(
            message,
            "\n      {} ({how}): {}",
            end.binary.label(),
            end.binary.rerun()
        );
    }
    Err(message.into())
}

/// Runs one binary to its end (or [`TIMEOUT`]), its output in a log file, then prints the log.
fn run_one(
    binary: &Binary,
    template: &Command,
    logs: &Path,
    runner: Option<&str>,
) -> Result<Ended> {
    let log = logs.join(format!(
        "{}-{}-{}.log",
        binary.package, binary.kind, binary.name
    ));
    let file = File::create(&log)?;
    let mut command = match runner {
        Some(runner) => {
            let mut command = Command::new(runner);
            command.arg(&binary.path);
            command
        }
        None => Command::new(&binary.path),
    };
    for (name, value) in template.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command
        .current_dir(&binary.manifest_dir)
        .env("CARGO_MANIFEST_DIR", &binary.manifest_dir)
        .env("CARGO_PKG_NAME", &binary.package)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    if std::env::var_os("CARGO").is_none() {
        command.env("CARGO", OsString::from("cargo"));
    }
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|error| format!("could not start {}: {error}", binary.path.display()))?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() >= TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        sleep(Duration::from_millis(20));
    };
    let end = Ended {
        binary: binary.clone(),
        took: started.elapsed(),
        status,
    };
    let output = fs::read_to_string(&log).unwrap_or_default();
    let verdict = match end.status {
        Some(status) if status.success() => "ok".to_owned(),
        Some(status) => format!("FAILED, {status}"),
        None => format!("FAILED, killed after {}s", TIMEOUT.as_secs()),
    };
    // One print call per binary, so that the other lane's output never lands inside it.
    print!(
        "\n    --- {} ({:.1}s, {verdict}): {}\n{output}",
        binary.label(),
        end.took.as_secs_f64(),
        command_line(&command)
    );
    Ok(end)
}

/// The slowest binaries, the time all of them took one after another and the wall time.
fn report(ended: &[Ended], wall: Duration) -> String {
    let mut by_time: Vec<&Ended> = ended.iter().collect();
    by_time.sort_by_key(|end| std::cmp::Reverse(end.took));
    let mut text = String::from("\n    the slowest test binaries:\n");
    for end in by_time.iter().take(12) {
        let _ = writeln!(
            text,
            "    {:>7.1}s  {}",
            end.took.as_secs_f64(),
            end.binary.label()
        );
    }
    let serial: Duration = ended.iter().map(|end| end.took).sum();
    let _ = writeln!(
        text,
        "    {} binaries: {:.1}s one after another, {:.1}s in {LANES} lanes",
        ended.len(),
        serial.as_secs_f64(),
        wall.as_secs_f64()
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binaries_are_those_cargo_test_runs() {
        let messages = r#"   Compiling nothing (a line that is not JSON)
{"reason":"compiler-artifact","package_id":"path+file:///w/crates/lease-file#0.1.0","manifest_path":"/w/crates/lease-file/Cargo.toml","target":{"kind":["test"],"name":"model_check"},"features":["default","failpoints"],"profile":{"test":true},"executable":"/w/target/debug/deps/model_check-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/xtask/chaos-actor#lease-chaos-actor@0.1.0","manifest_path":"/w/xtask/chaos-actor/Cargo.toml","target":{"kind":["bin"],"name":"lease-chaos-actor"},"profile":{"test":true},"executable":"/w/target/debug/deps/lease_chaos_actor-2"}
{"reason":"compiler-artifact","package_id":"path+file:///w/crates/lease-cli#0.1.0","manifest_path":"/w/crates/lease-cli/Cargo.toml","target":{"kind":["bin"],"name":"lease"},"profile":{"test":false},"executable":"/w/target/debug/lease"}
{"reason":"compiler-artifact","package_id":"path+file:///w/crates/lease-core#0.1.0","manifest_path":"/w/crates/lease-core/Cargo.toml","target":{"kind":["lib"],"name":"lease_core"},"profile":{"test":false},"executable":null}
{"reason":"build-finished","success":true}"#;
        let binaries = from_cargo_messages(messages).expect("parsed");
        assert_eq!(
            binaries,
            vec![
                Binary {
                    package: "lease-file".into(),
                    kind: "test".into(),
                    name: "model_check".into(),
                    path: "/w/target/debug/deps/model_check-1".into(),
                    manifest_dir: "/w/crates/lease-file".into(),
                    rerun_args: vec!["--features".into(), "failpoints".into()],
                },
                Binary {
                    package: "lease-chaos-actor".into(),
                    kind: "bin".into(),
                    name: "lease-chaos-actor".into(),
                    path: "/w/target/debug/deps/lease_chaos_actor-2".into(),
                    manifest_dir: "/w/xtask/chaos-actor".into(),
                    rerun_args: Vec::new(),
                },
            ]
        );
        assert_eq!(
            binaries[0].rerun(),
            "cargo test -p lease-file --features failpoints --test model_check"
        );
    }

    fn script(dir: &Path, name: &str, body: &str) -> Binary {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("script");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        Binary {
            package: "p".into(),
            kind: "test".into(),
            name: name.into(),
            path,
            manifest_dir: dir.to_path_buf(),
            rerun_args: Vec::new(),
        }
    }

    #[test]
    fn binaries_run_two_at_a_time_in_their_folder_with_the_templates_environment() {
        let dir = crate::project_root().join("target/xtask-lanes-test");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        let binaries = vec![
            script(
                &dir,
                "a",
                "sleep 1; pwd; echo \"$LANES_TEST\"; echo \"${GONE-unset}\"",
            ),
            script(&dir, "b", "sleep 1"),
        ];
        let mut template = Command::new("cargo");
        template.env("LANES_TEST", "set").env_remove("GONE");
        let started = Instant::now();
        run(binaries.clone(), &template, &dir.join("logs"), None).expect("both pass");
        assert!(
            started.elapsed() < Duration::from_millis(1900),
            "not at once"
        );
        let log = fs::read_to_string(dir.join("logs/p-test-a.log")).expect("log");
        assert_eq!(log, format!("{}\nset\nunset\n", dir.display()));

        let failing = vec![
            script(&dir, "fails", "exit 3"),
            script(&dir, "passes", "true"),
        ];
        let error = run(failing, &template, &dir.join("logs"), None)
            .expect_err("one failed")
            .to_string();
        assert!(error.contains("1 of 2 test binaries failed"), "{error}");
        assert!(error.contains("p test fails (exit status: 3)"), "{error}");
        assert!(error.contains("cargo test -p p --test fails"), "{error}");
        assert!(!error.contains("passes"), "{error}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_runner_starts_each_binary() {
        let dir = crate::project_root().join("target/xtask-lanes-runner-test");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("dir");
        // Not executable: only `sh <file>` runs it, as `wine <file.exe>` runs a Windows binary.
        let path = dir.join("plain");
        fs::write(&path, "echo \"ran $0\"\n").expect("file");
        let binary = Binary {
            package: "p".into(),
            kind: "test".into(),
            name: "plain".into(),
            path: path.clone(),
            manifest_dir: dir.clone(),
            rerun_args: vec!["--target".into(), "x86_64-pc-windows-gnu".into()],
        };
        let template = Command::new("cargo");
        run(
            vec![binary.clone()],
            &template,
            &dir.join("logs"),
            Some("sh"),
        )
        .expect("ran");
        let log = fs::read_to_string(dir.join("logs/p-test-plain.log")).expect("log");
        assert_eq!(log, format!("ran {}\n", path.display()));
        assert!(run(vec![binary], &template, &dir.join("logs"), None).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_longest_known_binaries_start_first() {
        let binary = |package: &str, name: &str| Binary {
            package: package.into(),
            kind: "test".into(),
            name: name.into(),
            path: PathBuf::new(),
            manifest_dir: PathBuf::new(),
            rerun_args: Vec::new(),
        };
        let mut queue = [
            binary("lease-core", "keeper"),
            binary("lease-dynamo", "stress"),
            binary("lease-core", "memory_model"),
            binary("lease-file", "model_check"),
        ];
        queue.sort_by_key(Binary::rank);
        let names: Vec<&str> = queue.iter().map(|binary| binary.name.as_str()).collect();
        assert_eq!(names, ["model_check", "stress", "keeper", "memory_model"]);
    }
}
