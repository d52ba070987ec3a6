//! Repository rules that can be checked, checked as code (rust-analyzer's "tidy" tests).
//!
//! lease-core is what people vendor into their own workspaces: it must build without an async
//! runtime, without AWS crates and without its workspace. The other crates share the
//! workspace's lints; lease-core carries its own copy so that it builds alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

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
        if manifest
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|name| name == "lease-core")
        {
            assert!(
                !uses_workspace_lints,
                "lease-core must carry its own [lints.*] (it builds outside the workspace)"
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
    let lines: Vec<&str> = code.lines().collect();
    let end = lines
        .windows(2)
        .position(|pair| {
            pair[0].trim() == "#[cfg(test)]"
                && pair[1].trim_start().starts_with("mod ")
                && pair[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
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

/// `source` with comments and the insides of string and character literals blanked out, line
/// breaks kept, so that braces can be counted.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    // Copies line breaks only, from `from` up to (not including) `to`.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &chars[from..to.min(chars.len())] {
            if c == '\n' {
                out.push('\n');
            }
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            let end = (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len());
            i = end;
        } else if c == '/' && next == Some('*') {
            let end = (i + 2..chars.len())
                .find(|&j| chars[j - 1] == '*' && chars[j] == '/')
                .map_or(chars.len(), |j| j + 1);
            blank(&mut out, i, end);
            i = end;
        } else if c == 'r' && !prev_ident && matches!(next, Some('"' | '#')) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let body = i + 2 + hashes;
            let end = (body..chars.len())
                .find(|&j| {
                    chars[j] == '"'
                        && chars[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == '#')
                            .count()
                            == hashes
                })
                .map_or(chars.len(), |j| j + 1 + hashes);
            blank(&mut out, i, end);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' && next == Some('\\') {
            let end = (i + 2..chars.len())
                .find(|&j| chars[j] == '\'')
                .map_or(chars.len(), |j| j + 1);
            i = end;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
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

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
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
