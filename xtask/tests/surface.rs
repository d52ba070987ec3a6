//! The public surface of every crate, written down: a new public item is a decision, made in
//! review, never a leak. `docs/public-api.txt` lists every public item of every library crate as
//! rustdoc itself sees it (its JSON output, the `cargo public-api` approach): modules, types and
//! their fields and variants, traits and their methods, inherent methods, trait impls,
//! functions, constants, macros and re-exports, one per line with its signature. This test fails
//! when the code and the list differ. After a deliberate change, one command regenerates it:
//! `LEASE_BLESS=1 cargo test -p xtask --test surface`; review the list's diff.

#[path = "../src/public_api.rs"]
mod public_api;
#[path = "surface/render.rs"]
mod render;
#[path = "surface/rustdoc.rs"]
mod rustdoc;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use public_api::LISTED;
use render::{Entry, Kind, Render};
use rustdoc::{Doc, document, id_key, joined};
use support::{crates, read, root};

const LIST: &str = "docs/public-api.txt";

/// Crates with no library surface, and why.
const UNLISTED: [(&str, &str); 1] = [("lease-cli", "a binary: its surface is its command line")];

/// Every crate's entries, generated once per test run (several tests read them).
fn entries() -> &'static BTreeMap<String, Vec<Entry>> {
    static ENTRIES: OnceLock<BTreeMap<String, Vec<Entry>>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        let started = Instant::now();
        let target_dir = public_api::target_dir(&root(), std::env::var_os("CARGO_TARGET_DIR"));
        let mut known = BTreeMap::new();
        let mut all = BTreeMap::new();
        for (package, features) in LISTED {
            let doc = document(package, features, &target_dir);
            all.insert(package.to_string(), crate_entries(&doc, &mut known));
        }
        eprintln!(
            "public API of {} crates from rustdoc JSON in {:.1} s",
            LISTED.len(),
            started.elapsed().as_secs_f64()
        );
        all
    })
}

/// One crate's entries. Each item is written out once, at its canonical path (the shortest,
/// then the first in order); every other public path to it is a `pub use PATH = CANONICAL`
/// line. `known` gathers every path of the crates listed so far, so that a re-export of
/// another crate's item (or glob of its module) resolves to that item's canonical path.
fn crate_entries(doc: &Doc, known: &mut BTreeMap<String, String>) -> Vec<Entry> {
    let (reach, foreign) = doc.reachable();
    let mut canonical = BTreeMap::new();
    for (id, paths) in &reach {
        let first = paths
            .iter()
            .map(|path| (path.len(), joined(path)))
            .min()
            .map(|(_, path)| path)
            .unwrap_or_default();
        canonical.insert(id.clone(), first);
    }
    let mut out = Vec::new();
    let mut impls = Vec::new();
    {
        let render = Render {
            doc,
            canonical: &canonical,
            known,
        };
        for (id, paths) in &reach {
            let path = &canonical[id];
            let id_value = id
                .parse::<u64>()
                .map_or_else(|_| id.as_str().into(), serde_json::Value::from);
            render.item(&id_value, path, &mut out, &mut impls);
            for other in paths
                .iter()
                .map(|p| joined(p))
                .filter(|p| p.as_str() != path.as_str())
            {
                out.push(reexport(&other, path));
            }
        }
        // Impls this crate writes for types and traits of others (`impl From<X> for io::Error`).
        impls.extend(doc.impl_ids());
        let mut written = BTreeSet::new();
        for id in impls {
            if written.insert(id_key(&id).unwrap_or_default()) {
                render.impl_entry(&id, &mut out);
            }
        }
        for used in foreign {
            let target = known
                .get(&used.target)
                .cloned()
                .unwrap_or(used.target.clone());
            let path = joined(&used.path);
            if !used.glob {
                out.push(reexport(&path, &target));
                continue;
            }
            let prefix = format!("{}::", used.target);
            let names: Vec<(String, String)> = known
                .iter()
                .filter_map(|(alias, canon)| {
                    let name = alias.strip_prefix(&prefix)?;
                    (!name.contains("::")).then(|| (name.to_string(), canon.clone()))
                })
                .collect();
            if names.is_empty() {
                out.push(reexport(&format!("{path}::*"), &format!("{target}::*")));
            }
            for (name, canon) in names {
                out.push(reexport(&format!("{path}::{name}"), &canon));
            }
        }
    }
    for (id, paths) in &reach {
        for path in paths {
            known.insert(joined(path), canonical[id].clone());
        }
        // Other crates' JSON names an item by where it is defined (`lease_core::lease::Lease`).
        let id_value = id
            .parse::<u64>()
            .map_or_else(|_| id.as_str().into(), serde_json::Value::from);
        if let Some(defined) = doc.summary_path(&id_value) {
            known
                .entry(defined)
                .or_insert_with(|| canonical[id].clone());
        }
    }
    // Under each path: the declaration, then its impls.
    out.sort_by(|a, b| {
        let rank = |e: &Entry| matches!(e.kind, Kind::Impl { .. });
        (&a.key, rank(a), &a.line).cmp(&(&b.key, rank(b), &b.line))
    });
    out.dedup_by(|a, b| a.line == b.line);
    out
}

fn reexport(path: &str, target: &str) -> Entry {
    Entry {
        key: path.to_string(),
        line: format!("pub use {path} = {target}"),
        kind: Kind::Other,
    }
}

/// The list as written to `docs/public-api.txt`.
fn surface() -> String {
    let mut out = String::from(
        "# The public API of every library crate, from rustdoc's JSON, every feature on.\n\
         # Checked by xtask/tests/surface.rs; after a deliberate change regenerate it with\n\
         #     LEASE_BLESS=1 cargo test -p xtask --test surface\n\
         # One line per item, filed under its path: each item once at its canonical path, every other\n\
         # path to it as `pub use PATH = CANONICAL`; trait impls as `impl Trait for Type` (blanket impls\n\
         # of std's traits left out); trait methods with a default body end in `(provided)`;\n\
         # #[doc(hidden)] items are not listed.\n",
    );
    for (name, why) in UNLISTED {
        out.push_str(&format!("# Not listed: {name}, {why}.\n"));
    }
    for (package, entries) in entries() {
        out.push_str(&format!("\n# {package}: {} entries\n", entries.len()));
        for entry in entries {
            out.push_str(&entry.line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn the_public_surface_is_the_reviewed_list() {
    let now = surface();
    let path = root().join(LIST);
    if std::env::var_os("LEASE_BLESS").is_some() {
        fs::write(&path, &now).expect("write the public API list");
        return;
    }
    let listed = fs::read_to_string(&path).unwrap_or_default();
    if listed == now {
        return;
    }
    let listed_lines: BTreeSet<&str> = listed.lines().collect();
    let now_lines: BTreeSet<&str> = now.lines().collect();
    let added: Vec<&&str> = now_lines.difference(&listed_lines).collect();
    let removed: Vec<&&str> = listed_lines.difference(&now_lines).collect();
    panic!(
        "the public surface changed; if on purpose, run `LEASE_BLESS=1 cargo test -p xtask --test \
         surface` and review {LIST}\nnew or changed:\n{added:#?}\nno longer there (or changed):\n{removed:#?}"
    );
}

#[test]
fn the_list_holds_trait_methods_enum_variants_and_impls() {
    let core = &entries()["lease-core"];
    let has = |start: &str| core.iter().any(|entry| entry.line.starts_with(start));
    assert!(has(
        "pub fn lease_core::LeaseBackend::try_acquire<'a>(&'a self, key: &'a lease_core::LeaseKey"
    ));
    assert!(has("pub fn lease_core::LeaseBackend::renew<"));
    assert!(has("pub lease_core::LeaseError::Held"));
    assert!(has("impl core::fmt::Debug for lease_core::LeaseKey"));
}

/// A backend re-exports nothing of lease-core: users depend on lease-core themselves, and
/// `MemoryBackend` or `ManualClock` are never reached through a backend (issue 33).
#[test]
fn no_crate_reexports_another_crates_items() {
    for (package, entries) in entries() {
        let foreign: Vec<&str> = entries
            .iter()
            .map(|entry| entry.line.as_str())
            .filter(|line| line.starts_with("pub use ") && line.contains(" = lease_core"))
            .filter(|_| package != "lease-core")
            .collect();
        assert!(
            foreign.is_empty(),
            "{package} re-exports lease-core: {foreign:?}"
        );
    }
}

/// The most public functions (methods, trait methods and free functions) the four library
/// crates of issue 33's review may have together: one obvious way per use keeps the surface a
/// user reads small.
const PUBLIC_FUNCTION_BUDGET: usize = 330;
const BUDGETED: [&str; 4] = [
    "lease-core",
    "lease-file",
    "lease-dynamo",
    "lessor-partition",
];
/// A backend added since has a budget of its own: a builder, its manager and the errors it
/// reports, everything else being lease-core's contract.
const NEW_BACKEND_BUDGET: usize = 40;

fn public_functions(entries: &[Entry]) -> usize {
    entries
        .iter()
        .filter(|entry| {
            entry.line.starts_with("pub fn ")
                || entry.line.starts_with("pub async fn ")
                || entry.line.starts_with("pub const fn ")
                || entry.line.starts_with("pub unsafe fn ")
        })
        .count()
}

#[test]
fn the_public_functions_stay_within_the_budget() {
    let mut total = 0;
    let mut counts = Vec::new();
    for (package, entries) in entries() {
        let functions = public_functions(entries);
        counts.push(format!("{package}: {functions}"));
        if BUDGETED.contains(&package.as_str()) {
            total += functions;
        } else {
            assert!(
                functions <= NEW_BACKEND_BUDGET,
                "{package}: {functions} public functions, over a backend's {NEW_BACKEND_BUDGET}"
            );
        }
    }
    assert!(
        total <= PUBLIC_FUNCTION_BUDGET,
        "{total} public functions in {BUDGETED:?} ({}), over the budget of \
         {PUBLIC_FUNCTION_BUDGET}",
        counts.join(", ")
    );
}

#[test]
fn no_runtime_helper_is_public() {
    // A home-made executor is not public API: async users bring their runtime, blocking users
    // get a blocking guard. fmt_time formats messages, as fmt_duration does: it sits beside it
    // in the implementors' module.
    let helpers = ["block_on", "join_all", "JoinAll", "sleep_until", "fmt_time"];
    for (package, entries) in entries() {
        for entry in entries {
            let name = entry.key.rsplit("::").next().unwrap_or_default();
            let allowed = name == "fmt_time" && entry.key == "lease_core::backend::fmt_time";
            assert!(
                !helpers.contains(&name) || allowed,
                "{package}: {} (no executor is public; fmt_time belongs in lease_core::backend)",
                entry.line
            );
        }
    }
}

#[test]
fn every_enum_variant_is_listed() {
    for (package, entries) in entries() {
        let lines: BTreeSet<&str> = entries.iter().map(|entry| entry.line.as_str()).collect();
        let enums: Vec<&str> = entries
            .iter()
            .filter_map(|entry| {
                entry
                    .line
                    .split(" enum ")
                    .nth(1)
                    .map(|_| entry.key.as_str())
            })
            .collect();
        for path in enums {
            let variants = lines
                .iter()
                .filter(|line| {
                    line.trim_start_matches("#[non_exhaustive] ")
                        .starts_with(&format!("pub {path}::"))
                })
                .count();
            assert!(variants > 0, "{package}: no variant of {path} listed");
        }
    }
}

#[test]
fn nothing_outside_lease_core_backend_can_make_a_lease_or_a_fencing_token() {
    let core = &entries()["lease-core"];
    let made = ["lease_core::Lease", "lease_core::FencingToken"];
    let mut makers = Vec::new();
    for entry in core {
        let public_way = match &entry.kind {
            Kind::Fn {
                takes_self,
                owner,
                returns,
            } => {
                !takes_self
                    && (owner.as_deref().is_some_and(|owner| made.contains(&owner))
                        || made.iter().any(|ty| returns.contains(*ty)))
            }
            // A conversion into either type is a way to make one.
            Kind::Impl {
                trait_path,
                for_type,
            } => {
                made.contains(&for_type.as_str())
                    && ["Default", "From", "TryFrom", "FromStr", "Deserialize"]
                        .iter()
                        .any(|maker| trait_path.rsplit("::").next() == Some(*maker))
            }
            Kind::Other => false,
        };
        if public_way && !entry.key.starts_with("lease_core::backend::") {
            makers.push(entry.line.clone());
        }
    }
    assert!(
        makers.is_empty(),
        "public ways to make a Lease or a FencingToken: {makers:#?}"
    );
    // The check sees the makers that are meant to exist.
    for meant in [
        "lease_core::backend::new_lease",
        "lease_core::backend::fencing_token",
    ] {
        assert!(
            core.iter()
                .any(|entry| entry.key == meant && matches!(entry.kind, Kind::Fn { .. })),
            "{meant} is not in the list"
        );
    }
}

/// Words only a measurement writes: a time below a millisecond, the machine's load, a ratio to a
/// measured floor.
const MEASURED: [&str; 5] = [
    "µs",
    "load average",
    "x a floor",
    "times a floor",
    "x the floor",
];

#[test]
fn measured_figures_live_in_docs_benchmarks_md_only() {
    let mut files: Vec<PathBuf> = vec![root().join("README.md")];
    for (_, dir) in crates() {
        files.push(dir.join("README.md"));
        files.extend(support::library_files(&dir));
    }
    for entry in fs::read_dir(root().join("docs")).expect("read docs/") {
        let path = entry.expect("docs/ entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.extension().is_some_and(|e| e == "md") && name != "benchmarks.md" {
            files.push(path);
        }
    }
    let mut found = Vec::new();
    for file in files.iter().filter(|f| f.is_file()) {
        let text = read(file);
        let is_rust = file.extension().is_some_and(|e| e == "rs");
        for (number, line) in text.lines().enumerate() {
            let doc = line.trim_start();
            if is_rust && !(doc.starts_with("///") || doc.starts_with("//!")) {
                continue;
            }
            if let Some(word) = MEASURED.iter().find(|word| line.contains(*word)) {
                found.push(format!(
                    "{}:{}: `{word}`: {line}",
                    file.display(),
                    number + 1
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "measured figures belong in docs/benchmarks.md (written by `cargo xtask bench`); state \
         costs in requests and syscalls and link there:\n{}",
        found.join("\n")
    );
}

/// The most lines a quick start may take.
const QUICK_START_LINES: usize = 12;

#[test]
fn every_quick_start_fits_in_12_lines_with_one_dependency() {
    let mut problems = Vec::new();
    for (name, dir) in crates() {
        if name == "lease-cli" {
            continue; // a binary: its README shows commands
        }
        let readme = read(&dir.join("README.md"));
        problems.extend(quick_start_problems(&name, &readme));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_quick_start_check_counts_lines_and_crates() {
    let long = format!(
        "# x\n```rust\nuse other_crate::Thing;\n{}```\n",
        "let a = 1;\n".repeat(12)
    );
    let problems = quick_start_problems("lease-file", &long);
    assert_eq!(problems.len(), 2, "{problems:?}");
    let good =
        "```rust,no_run\nuse lease_file::FileLock;\n#[tokio::main]\nasync fn main() {}\n```\n";
    assert!(quick_start_problems("lease-file", good).is_empty());
}

/// What is wrong with the first Rust example of a crate's README: too long, or using a crate
/// other than this one, `lease_core` (whose types every backend's user names), `std` and
/// `tokio`.
fn quick_start_problems(name: &str, readme: &str) -> Vec<String> {
    let Some(start) = readme.find("```rust") else {
        return vec![format!("{name}/README.md has no Rust quick start")];
    };
    let body = &readme[start..];
    let body = &body[body.find('\n').map_or(body.len(), |i| i + 1)..];
    let example = &body[..body.find("```").unwrap_or(body.len())];
    let lines: Vec<&str> = example
        .lines()
        .filter(|line| !line.trim_start().starts_with("# ") && line.trim() != "#")
        .collect();
    let mut problems = Vec::new();
    if lines.len() > QUICK_START_LINES {
        problems.push(format!(
            "{name}/README.md: the quick start takes {} lines; at most {QUICK_START_LINES}",
            lines.len()
        ));
    }
    let own = name.replace('-', "_");
    for line in &lines {
        let path = line.trim_start().strip_prefix("use ").unwrap_or("");
        let first = path.split("::").next().unwrap_or("").trim_end_matches(';');
        if !first.is_empty() && ![own.as_str(), "lease_core", "std", "tokio"].contains(&first) {
            problems.push(format!(
                "{name}/README.md: the quick start uses `{first}`: {line}"
            ));
        }
    }
    problems
}
