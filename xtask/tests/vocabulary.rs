//! One concept, one type: the vocabulary table of `docs/architecture.md`, checked against every
//! crate's public declarations.

mod support;

use std::collections::BTreeMap;

use support::{Decl, all_public_decls, public_decls, read, root};

/// One row of the table: the concept's one type, its kind, and the words a second one would carry.
#[derive(Debug)]
struct Row {
    concept: String,
    name: String,
    kind: String,
    words: Vec<String>,
}

#[test]
fn no_crate_declares_a_second_type_for_a_concept_of_the_vocabulary() {
    let rows = vocabulary(&read(&root().join("docs/architecture.md")));
    let problems = check(&rows, &all_public_decls());
    assert!(
        problems.is_empty(),
        "the vocabulary is broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_vocabulary_check_catches_a_second_loss_type_and_a_missing_one() {
    let table = "## Vocabulary\n\n| concept | the one type | kind | words |\n|---|---|---|---|\n\
                 | a loss | `LossReason` | enum | `Loss`, `Lost` |\n\
                 | an error | `LeaseError` | enum | `Error` |\n\n## Next\n";
    let rows = vocabulary(table);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let source = "pub enum LossReason { A }\npub enum LostReason { B }\n\
                  pub(crate) enum PrivateError { C }\npub struct NotAnEnumError;\n\
                  #[cfg(test)]\nmod tests {\n    pub enum TestError { D }\n}\n";
    let declared: Vec<(String, Decl)> = public_decls(source)
        .into_iter()
        .map(|d| ("planted.rs".to_owned(), d))
        .collect();
    let problems = check(&rows, &declared);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("LostReason") && problems[0].contains("LossReason"));
    assert!(problems[1].contains("LeaseError") && problems[1].contains("not declared"));
}

/// The rows of the `## Vocabulary` table.
fn vocabulary(markdown: &str) -> Vec<Row> {
    let section = markdown
        .split("## Vocabulary")
        .nth(1)
        .expect("docs/architecture.md has a ## Vocabulary section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    section
        .lines()
        .filter(|line| line.starts_with('|') && !line.starts_with("|---"))
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "a vocabulary row has four cells: {line}");
            Row {
                concept: cells[0].to_owned(),
                name: ticked(cells[1]).into_iter().next().unwrap_or_default(),
                kind: cells[2].to_owned(),
                words: ticked(cells[3]),
            }
        })
        .collect()
}

/// What breaks the vocabulary: a type of the table declared other than exactly once, or a
/// declaration of a row's kind carrying a row's word that is not a type of the table.
fn check(rows: &[Row], declared: &[(String, Decl)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut where_declared: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (file, decl) in declared {
        if decl.owner.is_none()
            && rows
                .iter()
                .any(|r| r.name == decl.name && r.kind == decl.kind)
        {
            where_declared.entry(&decl.name).or_default().push(file);
        }
    }
    for row in rows {
        match where_declared.get(row.name.as_str()).map(Vec::len) {
            Some(1) => {}
            Some(n) => problems.push(format!(
                "{} `{}` ({}) is declared {n} times: {:?}",
                row.kind,
                row.name,
                row.concept,
                where_declared[row.name.as_str()]
            )),
            None => problems.push(format!(
                "{} `{}` ({}) is not declared in any crate",
                row.kind, row.name, row.concept
            )),
        }
    }
    for (file, decl) in declared {
        if decl.owner.is_some() || rows.iter().any(|r| r.name == decl.name) {
            continue;
        }
        for row in rows.iter().filter(|r| r.kind == decl.kind) {
            if let Some(word) = row.words.iter().find(|w| decl.name.contains(w.as_str())) {
                problems.push(format!(
                    "{file}: {} `{}` looks like a second type for \"{}\" (contains `{word}`): use `{}`",
                    decl.kind, decl.name, row.concept, row.name
                ));
            }
        }
    }
    problems.sort_by_key(|p| !p.contains("looks like"));
    problems
}

/// The declaration reader this check relies on (moved here from the surface test, which reads
/// rustdoc's JSON now).
#[test]
fn the_declaration_reader_sees_items_fields_and_impl_owners() {
    let source = "pub use a::{B,\n    C};\npub struct S {\n    pub field: u8,\n    hidden: u8,\n}\n\
                  impl<T: X> Trait for S<T> {\n    fn f(&self) {}\n}\nimpl S {\n    pub fn new() -> Self { todo!() }\n    \
                  pub(crate) fn private() {}\n}\npub(crate) fn nope() {}\npub const fn c() {}\n\
                  #[cfg(test)]\nmod tests {\n    pub fn in_test() {}\n}\n";
    let shown: Vec<String> = public_decls(source)
        .iter()
        .map(|decl| {
            let owner = decl
                .owner
                .as_deref()
                .map(|o| format!("{o}: "))
                .unwrap_or_default();
            format!("{owner}pub {} {}", decl.kind, decl.name)
        })
        .collect();
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
