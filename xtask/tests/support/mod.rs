//! What the source-reading tidy tests share: where the sources are, and a lexer that blanks
//! comments and literals so that code can be read by its shape.
#![allow(dead_code)] // each test file uses its own part

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root.
pub(crate) fn root() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

/// A file's text; panics with the path on failure (this is a test).
pub(crate) fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every crate of the workspace under `crates/`, as `(name, folder)`, sorted.
pub(crate) fn crates() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = fs::read_dir(root().join("crates"))
        .expect("read crates/")
        .map(|entry| entry.expect("crates/ entry").path())
        .filter(|dir| dir.join("Cargo.toml").is_file())
        .map(|dir| {
            let name = dir
                .file_name()
                .expect("crate folder")
                .to_string_lossy()
                .into_owned();
            (name, dir)
        })
        .collect();
    out.sort();
    out
}

/// Whether the crate in `dir` is published: its manifest does not say `publish = false`.
pub(crate) fn is_published(dir: &Path) -> bool {
    !read(&dir.join("Cargo.toml"))
        .lines()
        .any(|line| line.split('#').next().unwrap_or("").replace(' ', "") == "publish=false")
}

/// Every `.rs` file of a crate's library (`src/`, binaries and test-module files aside), sorted.
pub(crate) fn library_files(crate_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(&crate_dir.join("src"), &mut out);
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("read source folder entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "bin") {
                walk(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The library part of a source file: its code with comments and literals blanked (see
/// [`code_only`]), up to its first `#[cfg(test)]` module.
pub(crate) fn library_code(source: &str) -> String {
    library_lines(&code_only(source)).join("\n")
}

/// The lines of `code` before its first `#[cfg(test)]` module.
pub(crate) fn library_lines(code: &str) -> Vec<&str> {
    let lines: Vec<&str> = code.lines().collect();
    let end = lines
        .windows(2)
        .position(|pair| {
            pair[0].trim() == "#[cfg(test)]"
                && pair[1].trim_start().starts_with("mod ")
                && pair[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// `source` with comments and the insides of string and character literals blanked out, line
/// breaks kept, so that braces can be counted.
pub(crate) fn code_only(source: &str) -> String {
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

/// One public declaration: its kind (`fn`, `struct`, `enum`, `trait`, `type`, `const`,
/// `static`, `mod`, `use`, `field`), its name (the whole path list for `use`), and the type whose
/// `impl` block holds it, if any.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Decl {
    pub(crate) owner: Option<String>,
    pub(crate) kind: String,
    pub(crate) name: String,
    /// The declaration's whole first line (or whole `use`), whitespace collapsed.
    pub(crate) signature: String,
}

/// Every public declaration of every published crate's library, each with where it stands
/// (`crate/src/file.rs`), in crate and file order. Unpublished crates (`publish = false`, such as
/// the simulators of `lessor-sim`) are test machinery: no user calls them.
pub(crate) fn all_public_decls() -> Vec<(String, Decl)> {
    let mut out = Vec::new();
    for (name, dir) in crates().into_iter().filter(|(_, dir)| is_published(dir)) {
        for file in library_files(&dir) {
            let shown = format!(
                "{name}/{}",
                file.strip_prefix(&dir).unwrap_or(&file).display()
            );
            out.extend(
                public_decls(&read(&file))
                    .into_iter()
                    .map(|d| (shown.clone(), d)),
            );
        }
    }
    out
}

/// The public (`pub`, not `pub(crate)` or `pub(super)`) declarations of a library source.
pub(crate) fn public_decls(source: &str) -> Vec<Decl> {
    let code = library_code(source);
    let mut out = Vec::new();
    let mut depth = 0isize;
    let mut owner: Option<String> = None;
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let text = line.trim();
        if depth == 0 {
            owner = impl_target(text).or_else(|| struct_target(text));
        }
        let mut statement = text.to_owned();
        if let Some(rest) = text.strip_prefix("pub ") {
            if rest.starts_with("use ") {
                while !statement.contains(';') {
                    let Some(more) = lines.next() else { break };
                    statement.push(' ');
                    statement.push_str(more.trim());
                }
            }
            let rest = statement.strip_prefix("pub ").unwrap_or_default();
            if let Some(decl) = decl_of(rest, depth > 0) {
                out.push(Decl {
                    owner: if depth > 0 { owner.clone() } else { None },
                    ..decl
                });
            }
        }
        depth = (depth + brace_delta(&statement)).max(0);
    }
    out
}

fn brace_delta(text: &str) -> isize {
    text.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

/// The struct a `struct` line opens, whose `pub` fields follow.
fn struct_target(line: &str) -> Option<String> {
    let rest = line
        .strip_prefix("pub ")
        .unwrap_or(line)
        .strip_prefix("struct ")?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The type an `impl` line opens: `impl<T: X> Trait for Type<T> {` gives `Type`.
fn impl_target(line: &str) -> Option<String> {
    let mut rest = line.strip_prefix("impl")?;
    if rest.starts_with('<') {
        let mut angle = 0isize;
        let end = rest.char_indices().find_map(|(i, c)| {
            angle += match c {
                '<' => 1,
                '>' => -1,
                _ => 0,
            };
            (angle == 0).then_some(i + 1)
        })?;
        rest = &rest[end..];
    } else if !rest.starts_with(' ') {
        return None;
    }
    let rest = rest.rsplit(" for ").next().unwrap_or(rest).trim();
    let name: String = rest
        .trim_start_matches("dyn ")
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

fn decl_of(statement: &str, nested: bool) -> Option<Decl> {
    let collapsed = statement.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut rest = collapsed.as_str();
    for prefix in ["const ", "async ", "unsafe "] {
        if rest.starts_with(prefix) && rest[prefix.len()..].starts_with("fn ") {
            rest = &rest[prefix.len()..];
        }
    }
    for kind in [
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "use",
    ] {
        if let Some(after) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
            let name: String = if kind == "use" {
                after
                    .trim_end_matches(';')
                    .replace(", ", ",")
                    .replace(",}", "}")
            } else {
                // `$name` in a macro's template: the invocation names the items.
                after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                    .collect()
            };
            return Some(Decl {
                owner: None,
                kind: kind.to_owned(),
                name,
                signature: collapsed.clone(),
            });
        }
    }
    // `pub name: Type,` inside a struct (or an enum variant's fields, which are not `pub`).
    if nested {
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && rest[name.len()..].starts_with(':') {
            return Some(Decl {
                owner: None,
                kind: "field".to_owned(),
                name,
                signature: collapsed.clone(),
            });
        }
    }
    None
}
