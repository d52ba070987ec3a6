//! Rust's verbs, checked from the sources: outside the `go` modules an `acquire` waits and a
//! `try_acquire` makes one attempt, as in std, lock_api and tokio; Go's `acquire_with_wait` and
//! its one-attempt `acquire` live only in the `go` modules. Read from each function's name and
//! doc comment (functions without one, such as trait implementations, follow their trait's).

mod support;

use support::{crates, library_files, read, root};

#[test]
fn acquire_waits_and_try_acquire_is_one_attempt_outside_the_go_modules() {
    let mut problems = Vec::new();
    for (_, dir) in crates() {
        for file in library_files(&dir) {
            if file.file_name().is_some_and(|name| name == "go.rs") {
                continue;
            }
            let shown = file
                .strip_prefix(root())
                .unwrap_or(&file)
                .display()
                .to_string();
            problems.extend(verb_problems(&shown, &read(&file)));
        }
    }
    assert!(
        problems.is_empty(),
        "Go's verbs outside a go module:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_verb_check_catches_a_one_attempt_acquire_and_a_go_named_wait() {
    let planted = "\
/// One attempt to acquire (Go: `Acquire`).
pub fn acquire(&self) -> Result<(), E> { todo() }
/// Acquires, waiting until `wait.timeout`.
pub fn acquire_with_wait(&self, wait: &WaitOptions) -> Result<(), E> { todo() }
/// Acquires, waiting until the lease is free.
fn try_acquire<'a>(&'a self) -> BoxFuture<'a, ()>;
fn acquire(&self) {}
/// Acquires, **waiting** until the lease is free.
pub async fn acquire(self) -> Result<(), E> { todo() }
";
    let problems = verb_problems("planted.rs", planted);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("planted.rs:2") && problems[0].contains("one attempt"));
    assert!(problems[1].contains("acquire_with_wait"));
    assert!(problems[2].contains("planted.rs:6") && problems[2].contains("try_acquire"));
}

/// What breaks the verbs in one source file: a documented `acquire` that makes one attempt (or
/// does not say it waits), a documented `try_acquire` that does not say it makes one attempt, any
/// `acquire_with_wait`.
fn verb_problems(file: &str, source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut problems = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let doc = doc_above(&lines[..i]).to_lowercase();
        let at = format!("{file}:{}", i + 1);
        match name {
            "acquire_with_wait" => problems.push(format!(
                "{at}: `acquire_with_wait` is Go's shape: `acquire` waits, `acquire_with` takes WaitOptions"
            )),
            "acquire" if !doc.is_empty() && (makes_one_attempt(&doc) || !doc.contains("wait")) => {
                problems.push(format!(
                    "{at}: `acquire` must wait (its doc says one attempt, or never says it waits); one attempt is `try_acquire`"
                ));
            }
            "try_acquire" if !doc.is_empty() && !doc.contains("one attempt") => problems.push(format!(
                "{at}: `try_acquire` must make one attempt, and its doc say so"
            )),
            _ => {}
        }
    }
    problems
}

/// Whether a (lower-cased) doc comment says its function makes one attempt, as Go's `Acquire`
/// does; pointing elsewhere for one attempt ("for one attempt, call `try_acquire`") is fine.
fn makes_one_attempt(doc: &str) -> bool {
    doc.contains("one attempt to") || doc.contains("(go: `acquire`)")
}

/// The name of the function a line declares, whatever its visibility and qualifiers.
fn fn_name(line: &str) -> Option<&str> {
    let rest = line.trim_start();
    let rest = rest.strip_prefix("pub ").unwrap_or(rest);
    let rest = rest.strip_prefix("async ").unwrap_or(rest);
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// The doc comment right above a declaration (attributes between them skipped).
fn doc_above(before: &[&str]) -> String {
    let mut doc: Vec<&str> = before
        .iter()
        .rev()
        .map(|line| line.trim_start())
        .take_while(|line| line.starts_with("///") || line.starts_with("#["))
        .filter_map(|line| line.strip_prefix("///"))
        .collect();
    doc.reverse();
    doc.join("\n")
}
