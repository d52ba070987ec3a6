//! Rustdoc's own account of a crate: its JSON output (`--output-format json`), read as plain
//! `serde_json` values so that no `rustdoc-types` version has to match the pinned toolchain's
//! `format_version`, and walked from the crate root to every public path.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::public_api;
use crate::support::root;

/// One crate's rustdoc JSON.
pub(crate) struct Doc {
    /// The crate's name as paths spell it (`lease_core`).
    pub(crate) name: String,
    /// The JSON's `format_version`, named in every complaint about a shape this reader does not know.
    pub(crate) format_version: u64,
    json: Value,
}

/// Runs `cargo rustdoc` for `package`'s library with `features` (`None`: all of them) into
/// `target_dir` (the command `cargo xtask test` builds with, so after its build step cargo
/// finds the JSON up to date), and reads the JSON it wrote.
pub(crate) fn document(package: &str, features: Option<&[&str]>, target_dir: &Path) -> Doc {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = public_api::rustdoc_json(cargo, &root(), package, features, target_dir)
        .output()
        .unwrap_or_else(|e| panic!("run cargo rustdoc -p {package}: {e}"));
    assert!(
        output.status.success(),
        "cargo rustdoc -p {package} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let name = package.replace('-', "_");
    let file = target_dir.join("doc").join(format!("{name}.json"));
    let text =
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", file.display()));
    let format_version = json["format_version"].as_u64().unwrap_or(0);
    Doc {
        name,
        format_version,
        json,
    }
}

/// An id as the index spells its keys (numbers in recent formats, strings in older ones).
pub(crate) fn id_key(id: &Value) -> Option<String> {
    match id {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// The one key of an externally tagged enum value (`{"struct": {...}}`), or the string of a
/// unit variant (`"unit"`), with its payload.
pub(crate) fn tagged(value: &Value) -> (&str, &Value) {
    match value {
        Value::String(tag) => (tag.as_str(), &Value::Null),
        Value::Object(map) if map.len() == 1 => {
            let (tag, inner) = map.iter().next().expect("one entry");
            (tag.as_str(), inner)
        }
        _ => ("", value),
    }
}

/// A path as `a::b::c`.
pub(crate) fn joined(path: &[String]) -> String {
    path.join("::")
}

/// Where a re-export of an item outside this crate's index points.
pub(crate) struct ForeignUse {
    /// The public path the re-export makes.
    pub(crate) path: Vec<String>,
    /// The re-exported path (for a glob, the module whose items it re-exports).
    pub(crate) target: String,
    pub(crate) glob: bool,
}

impl Doc {
    fn index(&self) -> &Map<String, Value> {
        self.json["index"]
            .as_object()
            .unwrap_or_else(|| self.unknown("an index", &self.json["index"]))
    }

    /// The index entry of `id`, if the crate documents it.
    pub(crate) fn item(&self, id: &Value) -> Option<&Value> {
        id_key(id).and_then(|key| self.index().get(&key))
    }

    /// The item's kind and payload (`("struct", {...})`).
    pub(crate) fn inner<'a>(&self, item: &'a Value) -> (&'a str, &'a Value) {
        tagged(&item["inner"])
    }

    /// The path rustdoc's `paths` table gives an id (for items of other crates: where they are
    /// defined or re-exported publicly), if any.
    pub(crate) fn summary_path(&self, id: &Value) -> Option<String> {
        let key = id_key(id)?;
        let path = self.json["paths"].get(&key)?["path"].as_array()?;
        let parts: Vec<String> = path
            .iter()
            .filter_map(|part| part.as_str().map(str::to_string))
            .collect();
        Some(parts.join("::"))
    }

    /// Every impl block this crate's index holds.
    pub(crate) fn impl_ids(&self) -> Vec<Value> {
        let mut ids: Vec<Value> = self
            .index()
            .values()
            .filter(|item| item["crate_id"].as_u64() == Some(0) && self.inner(item).0 == "impl")
            .map(|item| item["id"].clone())
            .collect();
        ids.sort_by_key(|id| id_key(id).unwrap_or_default());
        ids
    }

    /// Fails on a JSON shape this reader does not know, naming the format version.
    pub(crate) fn unknown(&self, what: &str, value: &Value) -> ! {
        let shown = value.to_string();
        panic!(
            "{}: rustdoc JSON format_version {}: expected {what}, found {}",
            self.name,
            self.format_version,
            &shown[..shown.len().min(400)]
        )
    }

    /// Every public path of every item of this crate reachable from its root, by id, and the
    /// re-exports of items this crate's index does not hold.
    pub(crate) fn reachable(&self) -> (BTreeMap<String, Vec<Vec<String>>>, Vec<ForeignUse>) {
        let mut walk = Walk {
            doc: self,
            paths: BTreeMap::new(),
            foreign: Vec::new(),
            open: Vec::new(),
        };
        let root = &self.json["root"];
        walk.module(root, std::slice::from_ref(&self.name));
        walk.paths
            .entry(id_key(root).unwrap_or_default())
            .or_default()
            .push(vec![self.name.clone()]);
        (walk.paths, walk.foreign)
    }
}

struct Walk<'a> {
    doc: &'a Doc,
    paths: BTreeMap<String, Vec<Vec<String>>>,
    foreign: Vec<ForeignUse>,
    /// The modules being walked, so that a module re-exporting an ancestor ends the walk.
    open: Vec<String>,
}

impl Walk<'_> {
    fn module(&mut self, id: &Value, path: &[String]) {
        let Some(key) = id_key(id) else { return };
        if self.open.contains(&key) {
            return;
        }
        let Some(module) = self.doc.item(id) else {
            return;
        };
        let (kind, inner) = self.doc.inner(module);
        if kind != "module" {
            self.doc.unknown("a module", module);
        }
        self.open.push(key);
        for child in inner["items"].as_array().into_iter().flatten() {
            self.child(child, path);
        }
        self.open.pop();
    }

    fn child(&mut self, id: &Value, path: &[String]) {
        let Some(item) = self.doc.item(id) else {
            return;
        };
        if item["visibility"].as_str() != Some("public") {
            return;
        }
        let (kind, inner) = self.doc.inner(item);
        if kind != "use" {
            let Some(name) = item["name"].as_str() else {
                return;
            };
            self.place(id, [path, &[name.to_string()]].concat());
            return;
        }
        let glob = inner["is_glob"].as_bool().unwrap_or(false);
        let name = inner["name"].as_str().unwrap_or_default().to_string();
        let target = &inner["id"];
        match self.doc.item(target) {
            Some(found) if glob && self.doc.inner(found).0 == "module" => {
                self.module(target, path);
            }
            Some(_) if !glob => self.place(target, [path, &[name]].concat()),
            _ => {
                let source = inner["source"].as_str().unwrap_or_default();
                self.foreign.push(ForeignUse {
                    path: if glob {
                        path.to_vec()
                    } else {
                        [path, &[name]].concat()
                    },
                    target: self
                        .doc
                        .summary_path(target)
                        .unwrap_or_else(|| source.to_string()),
                    glob,
                });
            }
        }
    }

    fn place(&mut self, id: &Value, path: Vec<String>) {
        let Some(key) = id_key(id) else { return };
        let is_module = self
            .doc
            .item(id)
            .is_some_and(|item| self.doc.inner(item).0 == "module");
        if is_module {
            self.module(id, &path);
        }
        self.paths.entry(key).or_default().push(path);
    }
}
