//! No circles in the house: the module import graph of every crate is a DAG.
//!
//! The graph is read from the source (comments, literals and `#[cfg(test)]` modules left out):
//!
//! - **Nodes** are the crate's files: `src/lib.rs` (or `main.rs`) is the root `crate`,
//!   `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs` is `a::b`.
//! - **Edges** come from every `use` item and from every `crate::`, `super::` and `self::` path
//!   in code. A path names the deepest file module it walks through; when the next segment is a
//!   name that module only re-exports (`pub use worker::Worker` in `fleet/mod.rs`), the path is
//!   followed to where the name comes from, so `crate::fleet::Worker` is an edge to
//!   `fleet::worker`, and `crate::Holder` (re-exported by the root) to the module that declares
//!   it or to nothing when it comes from another crate.
//! - **A parent's edges to its own descendants do not count.** A parent declares, assembles and
//!   re-exports its children; that is what a parent is for, and it places the parent above them.
//!   A child's edges to its ancestors do count: what a child takes from its parent is below the
//!   child. So a child importing its parent is never a cycle with its own parent, while two
//!   siblings importing each other, directly or through a parent's own items, are.
//! - Paths into other crates are not edges: the crate graph is `tidy.rs`'s business.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

mod support;

use support::{crates, library_code, library_files, read};

/// A module's path inside its crate: empty for the root, `["fleet", "worker"]` for
/// `src/fleet/worker.rs`.
type ModPath = Vec<String>;

/// One edge of the graph and the first path in code that made it, for the failure message.
type Edges = BTreeMap<ModPath, BTreeMap<ModPath, String>>;

/// Cycles not yet untangled, each with its crate and members: the test fails when one of them
/// is gone (remove it here) as well as when any other cycle appears. Empty: every crate's graph
/// is a DAG. The list stays for a cycle that must be accepted while it is being untangled.
const NOT_YET_UNTANGLED: &[(&str, &[&str])] = &[];

#[test]
fn no_crate_has_an_import_cycle() {
    let mut report = Vec::new();
    let mut still_known = Vec::new();
    for (name, dir) in crates() {
        let modules = crate_modules(&dir);
        let graph = import_graph(&modules);
        for component in strongly_connected(&graph) {
            let members: Vec<String> = component.iter().map(shown).collect();
            let known = NOT_YET_UNTANGLED
                .iter()
                .any(|(krate, known)| *krate == name && *known == members.as_slice());
            if known {
                still_known.push((name.clone(), members));
            }
        }
        for cycle in cycles(&graph) {
            let members_listed = NOT_YET_UNTANGLED.iter().any(|(krate, known)| {
                *krate == name
                    && cycle.starts_with(&format!("cycle among {}:", known.len()))
                    && known.iter().all(|m| cycle.contains(&format!("`{m}`")))
            });
            if !members_listed {
                report.push(format!("{name}: {cycle}"));
            }
        }
    }
    assert_eq!(
        still_known.len(),
        NOT_YET_UNTANGLED.len(),
        "a cycle listed in NOT_YET_UNTANGLED is gone: remove it from the list (still there: \
         {still_known:?})"
    );
    assert!(
        report.is_empty(),
        "module import cycles (lower modules must never import higher ones; \
         see xtask/tests/imports.rs for how the graph is read):\n\n{}",
        report.join("\n\n")
    );
}

#[test]
fn a_planted_cycle_is_found_and_a_child_using_its_parent_is_not_one() {
    let modules = synthetic(&[
        (
            "",
            "mod a; mod b; mod c; mod up; pub use a::Alpha; pub struct Root;",
        ),
        (
            "a",
            "use crate::b::Beta;\npub struct Alpha;\nfn f() { let _ = crate::Root; }",
        ),
        ("b", "pub struct Beta(crate::c::Gamma);"),
        // Reaches back to `a` through the root's re-export.
        ("c", "use crate::Alpha;\npub struct Gamma;"),
        // A parent using its child and the child using its parent is not a cycle.
        ("up", "mod down;\nuse self::down::Down;\npub struct Up;"),
        ("up::down", "use super::Up;\npub struct Down;"),
    ]);
    let found = cycles(&import_graph(&modules));
    assert_eq!(found.len(), 1, "{found:#?}");
    for module in ["a", "b", "c"] {
        assert!(
            found[0].contains(&format!("`{module}`")),
            "{module} missing from {}",
            found[0]
        );
    }
    assert!(!found[0].contains("`up"), "{}", found[0]);
    assert!(
        found[0].contains("crate::Alpha"),
        "the cycle names the path that closes it: {}",
        found[0]
    );
}

#[test]
fn use_trees_super_paths_and_re_exports_resolve_to_the_declaring_file() {
    let modules = synthetic(&[
        ("", "mod fleet; mod lock;"),
        ("lock", "pub struct Holder;"),
        (
            "fleet",
            "mod worker; mod session; pub use worker::Worker; pub(crate) use session::Session;",
        ),
        (
            "fleet::worker",
            "use super::{Session, super::lock::{self, Holder as H}};\npub struct Worker;",
        ),
        (
            "fleet::session",
            "pub struct Session;\nfn f() { let _ = crate::fleet::Worker; }",
        ),
    ]);
    let graph = import_graph(&modules);
    let targets = |from: &str| -> Vec<String> {
        graph
            .get(&mod_path(from))
            .map(|to| to.keys().map(shown).collect())
            .unwrap_or_default()
    };
    assert_eq!(targets("fleet::worker"), ["fleet::session", "lock"]);
    assert_eq!(targets("fleet::session"), ["fleet::worker"]);
    assert!(targets("fleet").is_empty(), "a parent's edges to children");
    assert_eq!(cycles(&graph).len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Reading a crate

/// Every file module of a crate (binaries under `src/bin` aside), with its code.
fn crate_modules(crate_dir: &Path) -> BTreeMap<ModPath, String> {
    let src = crate_dir.join("src");
    let mut out = BTreeMap::new();
    for file in library_files(crate_dir) {
        let relative = file.strip_prefix(&src).unwrap_or(&file);
        let mut path: ModPath = relative
            .iter()
            .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
            .collect();
        if matches!(
            path.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            path.pop();
        }
        out.insert(path, library_code(&read(&file)));
    }
    out
}

fn synthetic(files: &[(&str, &str)]) -> BTreeMap<ModPath, String> {
    files
        .iter()
        .map(|(path, code)| (mod_path(path), (*code).to_owned()))
        .collect()
}

fn mod_path(shown: &str) -> ModPath {
    shown
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn shown(path: &ModPath) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

// ---------------------------------------------------------------------------------------------
// The graph

/// The import graph of one crate's modules: `from -> to -> the first path that made the edge`.
fn import_graph(modules: &BTreeMap<ModPath, String>) -> Edges {
    let bindings: BTreeMap<ModPath, BTreeMap<String, ModPath>> = modules
        .iter()
        .map(|(module, code)| {
            let names = use_paths(code)
                .into_iter()
                .filter_map(|(name, path)| Some((name, absolute(module, &path, modules)?)))
                .collect();
            (module.clone(), names)
        })
        .collect();
    let mut graph = Edges::new();
    for (module, code) in modules {
        let mut paths: Vec<Vec<String>> = use_paths(code).into_iter().map(|(_, p)| p).collect();
        paths.extend(inline_paths(&without_use_items(code)));
        for path in paths {
            let Some(full) = absolute(module, &path, modules) else {
                continue;
            };
            let Some(target) = declaring_module(&full, modules, &bindings, 0) else {
                continue;
            };
            // A module's own items, and a parent's children, are not edges (see the module docs).
            if target.starts_with(module) {
                continue;
            }
            graph
                .entry(module.clone())
                .or_default()
                .entry(target)
                .or_insert_with(|| path.join("::"));
        }
    }
    graph
}

/// `path` as seen from `module`, made absolute (without the leading `crate`); `None` for a path
/// into another crate.
fn absolute(
    module: &ModPath,
    path: &[String],
    modules: &BTreeMap<ModPath, String>,
) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut base: ModPath = match first.as_str() {
        "crate" | "$crate" => return Some(rest.to_vec()),
        "self" => module.clone(),
        "super" => {
            let mut up = module.clone();
            up.pop();
            up
        }
        _ => {
            // A bare path starting at a child module of this one (`use worker::Worker;`).
            let mut child = module.clone();
            child.push(first.clone());
            if !modules.contains_key(&child) {
                return None;
            }
            return Some([child, rest.to_vec()].concat());
        }
    };
    let mut rest = rest;
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    Some([base, rest.to_vec()].concat())
}

/// The file module that declares what the absolute `path` names, following re-exports.
fn declaring_module(
    path: &[String],
    modules: &BTreeMap<ModPath, String>,
    bindings: &BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    depth: usize,
) -> Option<ModPath> {
    let mut current = ModPath::new();
    for (i, segment) in path.iter().enumerate() {
        let mut child = current.clone();
        child.push(segment.clone());
        if modules.contains_key(&child) {
            current = child;
            continue;
        }
        if let Some(target) = bindings.get(&current).and_then(|b| b.get(segment))
            && depth < 16
        {
            let followed = [target.clone(), path[i + 1..].to_vec()].concat();
            return declaring_module(&followed, modules, bindings, depth + 1);
        }
        return Some(current);
    }
    Some(current)
}

/// Every leaf of every `use` item in `code`, as `(the name it binds, its path)`; a glob binds
/// `*`.
fn use_paths(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(code, "use", from) {
        let Some(end) = code[at..].find(';').map(|e| at + e) else {
            break;
        };
        let tree: String = code[at + 3..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        expand_tree(&tree, &mut Vec::new(), &mut out);
        from = end;
    }
    out
}

/// `code` with its `use` items cut out, so that a path inside a use tree is read only as part of
/// its tree.
fn without_use_items(code: &str) -> String {
    let mut out = String::new();
    let mut from = 0;
    while let Some(at) = find_word(code, "use", from) {
        out.push_str(&code[from..at]);
        from = code[at..].find(';').map_or(code.len(), |end| at + end);
    }
    out.push_str(&code[from..]);
    out
}

/// Expands one use tree (`a::{b, c::{self, D as E}}`) into its leaves.
fn expand_tree(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = segments(&tree[..open]);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let depth = prefix.len();
        prefix.extend(head);
        for part in split_top_level(inner) {
            expand_tree(part, prefix, out);
        }
        prefix.truncate(depth);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path, Some(alias.trim().to_owned())),
        None => (tree, None),
    };
    let mut full = prefix.clone();
    for segment in segments(path) {
        if segment != "self" || full.is_empty() {
            full.push(segment);
        }
    }
    let Some(last) = full.last().cloned() else {
        return;
    };
    out.push((alias.unwrap_or(last), full));
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// Every `crate::…`, `super::…` and `self::…` path written in code (outside `use` items too).
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = find_word(code, &start[..start.len() - 2], from) {
            from = at + 1;
            let tail = &code[at..];
            if !tail.starts_with(start) || code[..at].ends_with("::") {
                continue;
            }
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            let mut path = segments(&tail[..end]);
            if path.len() < 2 {
                continue; // `super::{…}`: the `use` item's leaves are read by `use_paths`
            }
            if code[..at].ends_with('$') {
                path[0] = "$crate".to_owned();
            }
            out.push(path);
        }
    }
    out
}

/// The next occurrence of `word` at or after `from` that is a whole identifier.
fn find_word(code: &str, word: &str, from: usize) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = from;
    while let Some(offset) = code.get(from..)?.find(word) {
        let at = from + offset;
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        if !before.is_some_and(is_ident) && !after.is_some_and(is_ident) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Cycles

/// Each strongly connected component of more than one module, written as one cycle through it
/// followed by every edge inside it with the path that made it.
fn cycles(graph: &Edges) -> Vec<String> {
    let mut out = Vec::new();
    for component in strongly_connected(graph) {
        let members: BTreeSet<&ModPath> = component.iter().collect();
        let mut lines = vec![format!(
            "cycle among {}: {}",
            component.len(),
            one_cycle(graph, &members)
                .iter()
                .map(|m| format!("`{}`", shown(m)))
                .collect::<Vec<_>>()
                .join(" -> ")
        )];
        for from in &component {
            for (to, path) in graph.get(from).into_iter().flatten() {
                if members.contains(to) {
                    lines.push(format!(
                        "    `{}` -> `{}` (uses `{path}`)",
                        shown(from),
                        shown(to)
                    ));
                }
            }
        }
        out.push(lines.join("\n"));
    }
    out
}

/// A shortest cycle from the component's first member back to itself.
fn one_cycle(graph: &Edges, members: &BTreeSet<&ModPath>) -> Vec<ModPath> {
    let Some(&start) = members.iter().next() else {
        return Vec::new();
    };
    let mut came_from: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if !members.contains(next) {
                continue;
            }
            if next == start {
                let mut cycle = vec![node.clone()];
                let mut at = node;
                while let Some(&prev) = came_from.get(at) {
                    cycle.push(prev.clone());
                    at = prev;
                }
                cycle.reverse();
                cycle.push(start.clone());
                return cycle;
            }
            if next != start && !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    vec![start.clone()]
}

/// Tarjan's strongly connected components of size above one, each sorted, in module order.
fn strongly_connected(graph: &Edges) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g Edges,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'g>(s: &mut State<'g>, node: &'g ModPath) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for next in s.graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.push(top.clone());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.out.sort();
    state.out
}
