//! The public surface of every crate, written down: a new public item is a decision, made in
//! review, never a leak. `docs/public-api.txt` lists every public declaration of every crate's
//! library; this test fails when the code and the list differ. After a deliberate change:
//! `LEASE_BLESS=1 cargo test -p xtask --test surface`, and review the list's diff.

mod support;

use std::fs;

use support::{Decl, all_public_decls, crates, library_files, public_decls, read, root};

const LIST: &str = "docs/public-api.txt";

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
    let listed_lines: Vec<&str> = listed.lines().collect();
    let now_lines: Vec<&str> = now.lines().collect();
    let added: Vec<&&str> = now_lines
        .iter()
        .filter(|l| !listed_lines.contains(l))
        .collect();
    let removed: Vec<&&str> = listed_lines
        .iter()
        .filter(|l| !now_lines.contains(l))
        .collect();
    panic!(
        "the public surface changed; if on purpose, run `LEASE_BLESS=1 cargo test -p xtask --test \
         surface` and review {LIST}\nnew public items:\n{added:#?}\nno longer public:\n{removed:#?}"
    );
}

#[test]
fn nothing_outside_lease_core_backend_can_make_a_lease_or_a_fencing_token() {
    let core = root().join("crates/lease-core");
    let mut makers = Vec::new();
    for file in library_files(&core) {
        let shown = file
            .strip_prefix(&core)
            .unwrap_or(&file)
            .display()
            .to_string();
        for decl in public_decls(&read(&file)) {
            if decl.kind == "fn" && makes_lease_or_fencing_token(&decl) && shown != "src/backend.rs"
            {
                makers.push(format!("{shown}: {}", decl.signature));
            }
        }
    }
    assert!(
        makers.is_empty(),
        "public ways to make a Lease or a FencingToken: {makers:?}"
    );
    let backend = read(&core.join("src/backend.rs"));
    assert!(
        backend.contains("pub fn new_lease(") && backend.contains("pub const fn fencing_token(")
    );
}

/// A function that takes no `self` and hands out a `Lease` or a `FencingToken`: an associated
/// function of either type, or a free function returning one.
fn makes_lease_or_fencing_token(decl: &Decl) -> bool {
    let takes_self = decl.signature.contains("self");
    let owner = decl.owner.as_deref();
    let returns = |ty: &str| {
        decl.signature.contains(&format!("-> {ty}"))
            || decl.signature.contains(&format!("-> Result<{ty},"))
            || decl.signature.contains(&format!("-> Option<{ty}>"))
    };
    !takes_self
        && (matches!(owner, Some("Lease" | "FencingToken"))
            || returns("Lease")
            || returns("FencingToken"))
}

#[test]
fn the_surface_reader_sees_items_fields_and_impl_owners() {
    let source = "pub use a::{B,\n    C};\npub struct S {\n    pub field: u8,\n    hidden: u8,\n}\n\
                  impl<T: X> Trait for S<T> {\n    fn f(&self) {}\n}\nimpl S {\n    pub fn new() -> Self { todo!() }\n    \
                  pub(crate) fn private() {}\n}\npub(crate) fn nope() {}\npub const fn c() {}\n\
                  #[cfg(test)]\nmod tests {\n    pub fn in_test() {}\n}\n";
    let shown: Vec<String> = public_decls(source).iter().map(show).collect();
    assert_eq!(
        shown,
        [
            "pub use a::{B,C}",
            "pub struct S",
            "S: pub field field",
            "S: pub fn new",
            "pub fn c",
        ],
        "{source}"
    );
}

fn show(decl: &Decl) -> String {
    let owner = decl
        .owner
        .as_deref()
        .map(|o| format!("{o}: "))
        .unwrap_or_default();
    format!("{owner}pub {} {}", decl.kind, decl.name)
}

/// The list: one line per public declaration, `crate/file: [Owner: ]pub kind name`.
fn surface() -> String {
    let mut out = String::from(
        "# Every public declaration of every crate's library. Checked by xtask/tests/surface.rs;\n\
         # regenerate after a deliberate change with LEASE_BLESS=1 cargo test -p xtask --test surface.\n",
    );
    for (file, decl) in all_public_decls() {
        out.push_str(&format!("{file}: {}\n", show(&decl)));
    }
    out
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
/// other than this one, `std` and `tokio`.
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
        if !first.is_empty() && ![own.as_str(), "std", "tokio"].contains(&first) {
            problems.push(format!(
                "{name}/README.md: the quick start uses `{first}`: {line}"
            ));
        }
    }
    problems
}
