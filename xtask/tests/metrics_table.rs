//! The metrics table of `docs/metrics.md` lists exactly the names `lease_core::metrics` and
//! `lessor_partition::metrics` define,
//! and every name is exercised by one of the recording tests (`tests/metrics.rs` of a crate), so
//! the docs, the code and the tests cannot drift apart.

mod support;

use std::collections::BTreeMap;
use std::process::Command;

use support::{read, root};

/// `pub const NAME: &str = "value";` lines of a Rust source, as (NAME, value).
fn string_constants(source: &str) -> BTreeMap<String, String> {
    source
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("pub const ")?;
            let (name, rest) = rest.split_once(": &str = \"")?;
            let (value, _) = rest.split_once('"')?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect()
}

/// The first column of the table under `## The series`, without its backquotes.
fn table_names(doc: &str) -> Vec<String> {
    doc.split("## The series")
        .nth(1)
        .unwrap_or_default()
        .split("\n## ")
        .next()
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(name, _)| name.to_owned()))
        .collect()
}

/// The metric names (the constants whose value is a series name, not a label): lease-core's,
/// and the fleet's own in lessor-partition.
fn metric_names() -> BTreeMap<String, String> {
    [
        "crates/lease-core/src/metrics.rs",
        "crates/lessor-partition/src/metrics.rs",
    ]
    .iter()
    .flat_map(|path| string_constants(&read(&root().join(path))))
    .filter(|(name, _)| !name.starts_with("LABEL_"))
    .collect()
}

#[test]
fn the_docs_table_lists_exactly_the_metric_names_of_the_code() {
    let code = metric_names();
    assert!(code.len() >= 14, "constants not found: {code:?}");
    let documented = table_names(&read(&root().join("docs/metrics.md")));
    let mut sorted = documented.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        documented.len(),
        "a row twice: {documented:?}"
    );
    let in_code: Vec<&String> = code.values().collect();
    let missing: Vec<_> = in_code.iter().filter(|n| !documented.contains(n)).collect();
    let extra: Vec<_> = documented.iter().filter(|n| !in_code.contains(n)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/metrics.md and the metrics modules (lease-core, lessor-partition) differ: not documented {missing:?}, \
         documented but not in the code {extra:?}"
    );
}

#[test]
fn every_metric_is_checked_by_a_recording_test() {
    let tests: String = [
        "crates/lease-core/tests/metrics.rs",
        "crates/lease-file/tests/metrics.rs",
        "crates/lease-dynamo/tests/metrics.rs",
        "crates/lease-postgres/tests/metrics.rs",
        "crates/lease-redis/tests/metrics.rs",
        "crates/lessor-partition/tests/metrics.rs",
    ]
    .iter()
    .map(|path| read(&root().join(path)))
    .collect();
    let unchecked: Vec<_> = metric_names()
        .into_keys()
        .filter(|constant| !has_word(&tests, constant))
        .collect();
    assert!(
        unchecked.is_empty(),
        "no recording test (crates/*/tests/metrics.rs) checks {unchecked:?}"
    );
}

#[test]
fn without_the_feature_no_library_crate_depends_on_the_metrics_facade() {
    for package in [
        "lease-core",
        "lease-file",
        "lease-dynamo",
        "lease-postgres",
        "lease-redis",
        "lessor-partition",
    ] {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let output = Command::new(cargo)
            .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
            .current_dir(root())
            .output()
            .expect("run cargo tree");
        assert!(output.status.success(), "cargo tree -p {package} failed");
        let tree = String::from_utf8_lossy(&output.stdout);
        let metrics: Vec<&str> = tree
            .lines()
            .filter(|line| line.starts_with("metrics "))
            .collect();
        assert!(
            metrics.is_empty(),
            "{package} (default features) depends on {metrics:?}: the facade belongs behind \
             the `metrics` feature"
        );
    }
}

fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !part(before) && !part(after)
    })
}

#[test]
fn the_table_check_reads_rows_and_constants() {
    let doc = "# M\n\n## The series\n\n| name | type |\n| --- | --- |\n| `a_total` | counter |\n\
               | `b` | gauge |\n\n## Labels\n\n| `backend` | x |\n";
    assert_eq!(table_names(doc), ["a_total", "b"]);
    let source =
        "pub const A: &str = \"a_total\";\npub const LABEL_X: &str = \"x\";\nconst C: u8 = 1;\n";
    let constants = string_constants(source);
    assert_eq!(constants.len(), 2);
    assert_eq!(constants["A"], "a_total");
    assert!(has_word("[A, B]", "A") && !has_word("AB", "A"));
}
