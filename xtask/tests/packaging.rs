//! What crates.io and docs.rs need from every published crate, checked as code: both licence
//! files in the package (real copies, so the `.crate` carries them), the metadata a user searches
//! and reads (keywords, categories, documentation, readme), and docs.rs's feature badges.
//!
//! `cargo xtask test`'s "packages" step checks that the packages build; this file checks what
//! they say about themselves.

mod support;

use std::fs;
use std::path::Path;

use support::{crates, read, root};

/// The crates.io category slugs this workspace uses; a typo is rejected at publish time, so it is
/// rejected here first (the full list: <https://crates.io/category_slugs>).
const KNOWN_CATEGORIES: &[&str] = &[
    "algorithms",
    "asynchronous",
    "command-line-utilities",
    "concurrency",
    "database",
    "filesystem",
    "os::unix-apis",
    "os::windows-apis",
];

/// Every crate under `crates/` that is not `publish = false`, as `(name, folder, manifest)`.
fn published() -> Vec<(String, std::path::PathBuf, String)> {
    let out: Vec<_> = crates()
        .into_iter()
        .map(|(name, dir)| {
            let manifest = read(&dir.join("Cargo.toml"));
            (name, dir, manifest)
        })
        .filter(|(_, _, manifest)| !manifest.lines().any(|l| compact(l) == "publish=false"))
        .collect();
    assert!(out.len() >= 5, "expected at least five published crates");
    out
}

/// A manifest line without spaces and comment.
fn compact(line: &str) -> String {
    line.split_once('#')
        .map_or(line, |(code, _)| code)
        .replace(' ', "")
}

/// The value of `key = ...` in the manifest's `[package]` table, without spaces.
fn package_field(manifest: &str, key: &str) -> Option<String> {
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[package]")
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .map(compact)
        .find_map(|line| {
            line.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix('=').or_else(|| rest.strip_prefix(".")))
                .map(str::to_owned)
        })
}

/// The quoted strings of a one-line TOML array such as `["a", "b"]`.
fn string_array(value: &str) -> Vec<String> {
    value
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|item| item.trim_matches('"').to_owned())
        .filter(|item| !item.is_empty())
        .collect()
}

#[test]
fn every_published_crate_carries_both_licence_files_as_real_copies() {
    for name in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let original = fs::read(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (krate, dir, _) in published() {
            let copy = dir.join(name);
            let kind = fs::symlink_metadata(&copy)
                .unwrap_or_else(|e| panic!("{krate} has no {name}: {e}"))
                .file_type();
            assert!(
                kind.is_file(),
                "{krate}/{name} must be a regular file (a symlink is packaged as the link \
                 target's path on some platforms, and a vendored copy loses it)"
            );
            assert_eq!(
                fs::read(&copy).expect("read licence copy"),
                original,
                "{krate}/{name} differs from the workspace root's"
            );
        }
    }
    let mit = read(&root().join("LICENSE-MIT"));
    assert!(mit.contains("Copyright (c) The lease-rs developers"));
    let apache = read(&root().join("LICENSE-APACHE"));
    assert!(apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"));
}

#[test]
fn every_published_crate_has_the_metadata_crates_io_and_docs_rs_show() {
    for (krate, dir, manifest) in published() {
        for key in ["description", "license", "repository", "homepage"] {
            assert!(
                package_field(&manifest, key).is_some(),
                "{krate}: [package] lacks `{key}`"
            );
        }
        let documentation = package_field(&manifest, "documentation");
        assert_eq!(
            documentation.as_deref(),
            Some(format!("\"https://docs.rs/{krate}\"").as_str()),
            "{krate}: documentation must point at docs.rs"
        );
        let readme = package_field(&manifest, "readme")
            .unwrap_or_else(|| panic!("{krate}: [package] lacks `readme`"));
        assert!(
            dir.join(readme.trim_matches('"')).is_file(),
            "{krate}: readme {readme} does not exist"
        );
        let keywords = string_array(
            &package_field(&manifest, "keywords")
                .unwrap_or_else(|| panic!("{krate}: [package] lacks `keywords`")),
        );
        assert!(
            (1..=5).contains(&keywords.len()),
            "{krate}: crates.io takes 1 to 5 keywords, found {keywords:?}"
        );
        for keyword in &keywords {
            let valid = keyword.len() <= 20
                && keyword.starts_with(|c: char| c.is_ascii_alphabetic())
                && keyword
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_+".contains(c));
            assert!(
                valid,
                "{krate}: keyword {keyword:?} is not valid on crates.io"
            );
        }
        let categories = string_array(
            &package_field(&manifest, "categories")
                .unwrap_or_else(|| panic!("{krate}: [package] lacks `categories`")),
        );
        assert!(
            (1..=5).contains(&categories.len()),
            "{krate}: crates.io takes 1 to 5 categories, found {categories:?}"
        );
        for category in &categories {
            assert!(
                KNOWN_CATEGORIES.contains(&category.as_str()),
                "{krate}: category {category:?} is not a crates.io slug listed in this test"
            );
        }
        let docs_rs: Vec<String> = manifest
            .lines()
            .skip_while(|line| line.trim() != "[package.metadata.docs.rs]")
            .skip(1)
            .take_while(|line| !line.trim_start().starts_with('['))
            .map(compact)
            .collect();
        assert!(
            docs_rs.iter().any(|line| line == "all-features=true"),
            "{krate}: [package.metadata.docs.rs] lacks all-features = true"
        );
        assert!(
            docs_rs
                .iter()
                .any(|line| line == r#"rustdoc-args=["--cfg","docsrs"]"#),
            "{krate}: [package.metadata.docs.rs] lacks rustdoc-args = [\"--cfg\", \"docsrs\"]"
        );
    }
}

#[test]
fn every_published_library_turns_on_doc_cfg_badges_for_docs_rs() {
    for (krate, dir, _) in published() {
        let lib = dir.join("src/lib.rs");
        if !lib.is_file() {
            continue; // a binary-only package: docs.rs renders no library
        }
        let text = read(&lib);
        assert!(
            text.contains("#![cfg_attr(docsrs, feature(doc_cfg))]"),
            "{krate}: src/lib.rs lacks #![cfg_attr(docsrs, feature(doc_cfg))], so docs.rs \
             shows no feature badge on feature-gated items"
        );
    }
}

/// The one published crate that installs a binary; `cargo install` of any other installs nothing,
/// so test probes re-run their test binary instead of being `[[bin]]`s.
const BINARY_CRATES: &[&str] = &["lease-cli"];

#[test]
fn only_the_cli_package_installs_a_binary() {
    for (krate, dir, manifest) in published() {
        if BINARY_CRATES.contains(&krate.as_str()) {
            continue;
        }
        assert!(
            !manifest.lines().any(|line| line.trim() == "[[bin]]")
                && !dir.join("src/main.rs").exists()
                && !dir.join("src/bin").exists(),
            "{krate} would install a binary with `cargo install {krate}`: test helpers belong in \
             the test binaries (re-run themselves, as lease-file's tests/probe) or in a \
             publish = false crate"
        );
    }
}

#[test]
fn the_manifest_reader_of_this_file_reads_what_it_should() {
    let manifest = "[package]\nname = \"x\"\nkeywords = [\"a\", \"b-c\"] # two\n\
                    license.workspace = true\n[dependencies]\ndocumentation = \"no\"\n";
    assert_eq!(
        string_array(&package_field(manifest, "keywords").expect("keywords")),
        ["a", "b-c"]
    );
    assert_eq!(
        package_field(manifest, "license").as_deref(),
        Some("workspace=true")
    );
    assert_eq!(package_field(manifest, "documentation"), None);
    assert!(Path::new(&root()).join("Cargo.toml").is_file());
}
