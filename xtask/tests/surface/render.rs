//! Rustdoc JSON items written as one line each, in Rust's own syntax with every path in full
//! (`core::time::Duration`, `lease_core::LeaseKey`), the way `cargo public-api` writes them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::rustdoc::{Doc, id_key, tagged};

/// One line of the list, and what the tests ask of it.
pub(crate) struct Entry {
    /// The path it is filed under: the item's own, or for an impl its type's (else its trait's).
    pub(crate) key: String,
    pub(crate) line: String,
    pub(crate) kind: Kind,
}

/// What a line declares, as far as the tests need to know.
pub(crate) enum Kind {
    /// A function or method.
    Fn {
        takes_self: bool,
        /// The path of the type or trait whose function it is.
        owner: Option<String>,
        /// Every path its return type names.
        returns: BTreeSet<String>,
    },
    /// An impl block of a trait.
    Impl {
        trait_path: String,
        for_type: String,
    },
    Other,
}

/// Traits rustdoc writes impls of that stable Rust has no name for (auto traits, and the marker
/// `derive(PartialEq)` adds).
const UNSTABLE_TRAITS: [&str; 3] = ["Freeze", "UnsafeUnpin", "StructuralPartialEq"];

pub(crate) struct Render<'a> {
    pub(crate) doc: &'a Doc,
    /// The canonical path of every reachable item of this crate, by id.
    pub(crate) canonical: &'a BTreeMap<String, String>,
    /// Every public path of the crates already listed, to its canonical path.
    pub(crate) known: &'a BTreeMap<String, String>,
}

impl Render<'_> {
    /// The lines of the item `id`, listed at `path`; `impls` collects the impl blocks of types
    /// and traits, written once each by [`Render::impl_entry`].
    pub(crate) fn item(
        &self,
        id: &Value,
        path: &str,
        out: &mut Vec<Entry>,
        impls: &mut Vec<Value>,
    ) {
        let Some(item) = self.doc.item(id) else {
            return;
        };
        let (kind, inner) = self.doc.inner(item);
        let attrs = attrs(item);
        let mut push = |line: String, kind: Kind| {
            out.push(Entry {
                key: path.to_string(),
                line,
                kind,
            });
        };
        match kind {
            "module" => push(format!("pub mod {path}"), Kind::Other),
            "struct" | "union" => {
                let generics = self.generics(&inner["generics"]);
                push(format!("{attrs}pub {kind} {path}{generics}"), Kind::Other);
                let (shape, fields) = tagged(&inner["kind"]);
                let fields = match shape {
                    "plain" => &fields["fields"],
                    "tuple" => fields,
                    _ => &inner["fields"],
                };
                self.fields(fields, path, out);
                impls.extend(inner["impls"].as_array().into_iter().flatten().cloned());
            }
            "enum" => {
                let generics = self.generics(&inner["generics"]);
                push(format!("{attrs}pub enum {path}{generics}"), Kind::Other);
                for variant in inner["variants"].as_array().into_iter().flatten() {
                    self.variant(variant, path, out);
                }
                impls.extend(inner["impls"].as_array().into_iter().flatten().cloned());
            }
            "trait" => {
                self.trait_entries(item, inner, path, out);
                impls.extend(
                    inner["implementations"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
            "function" => {
                let (line, kind) = self.function(inner, path, None, "");
                out.push(Entry {
                    key: path.to_string(),
                    line: format!("{attrs}{line}"),
                    kind,
                });
            }
            "constant" => push(
                format!("pub const {path}: {}", self.ty(&inner["type"])),
                Kind::Other,
            ),
            "static" => {
                let mutable = if inner["is_mutable"].as_bool() == Some(true) {
                    "mut "
                } else {
                    ""
                };
                push(
                    format!("pub static {mutable}{path}: {}", self.ty(&inner["type"])),
                    Kind::Other,
                );
            }
            "type_alias" => push(
                format!(
                    "pub type {path}{} = {}",
                    self.generics(&inner["generics"]),
                    self.ty(&inner["type"])
                ),
                Kind::Other,
            ),
            "macro" => push(format!("pub macro {path}!"), Kind::Other),
            "proc_macro" => push(format!("pub proc_macro {path}!"), Kind::Other),
            "primitive" => push(format!("pub primitive {path}"), Kind::Other),
            "trait_alias" => push(format!("pub trait {path} = .."), Kind::Other),
            "extern_type" => push(format!("pub extern type {path}"), Kind::Other),
            _ => self.doc.unknown("an item kind", item),
        }
    }

    fn fields(&self, fields: &Value, owner: &str, out: &mut Vec<Entry>) {
        for (position, field) in fields.as_array().into_iter().flatten().enumerate() {
            let Some(item) = self.doc.item(field) else {
                continue;
            };
            let visible = item["visibility"].as_str();
            if !matches!(visible, Some("public" | "default")) {
                continue;
            }
            let name = item["name"]
                .as_str()
                .map_or_else(|| position.to_string(), str::to_string);
            let (_, ty) = self.doc.inner(item);
            out.push(Entry {
                key: format!("{owner}::{name}"),
                line: format!("pub {owner}::{name}: {}", self.ty(ty)),
                kind: Kind::Other,
            });
        }
    }

    fn variant(&self, id: &Value, owner: &str, out: &mut Vec<Entry>) {
        let Some(item) = self.doc.item(id) else {
            return;
        };
        let name = item["name"].as_str().unwrap_or_default();
        let path = format!("{owner}::{name}");
        let (_, inner) = self.doc.inner(item);
        let (shape, fields) = tagged(&inner["kind"]);
        let discriminant = inner["discriminant"]["expr"]
            .as_str()
            .map(|expr| format!(" = {expr}"))
            .unwrap_or_default();
        let tuple = if shape == "tuple" {
            let types: Vec<String> = fields
                .as_array()
                .into_iter()
                .flatten()
                .map(|field| match self.doc.item(field) {
                    Some(field) => self.ty(self.doc.inner(field).1),
                    None => "_".to_string(),
                })
                .collect();
            format!("({})", types.join(", "))
        } else {
            String::new()
        };
        out.push(Entry {
            key: path.clone(),
            line: format!("{}pub {path}{tuple}{discriminant}", attrs(item)),
            kind: Kind::Other,
        });
        if shape == "struct" {
            self.fields(&fields["fields"], &path, out);
        }
    }

    fn trait_entries(&self, item: &Value, inner: &Value, path: &str, out: &mut Vec<Entry>) {
        let unsafety = if inner["is_unsafe"].as_bool() == Some(true) {
            "unsafe "
        } else {
            ""
        };
        let auto = if inner["is_auto"].as_bool() == Some(true) {
            "auto "
        } else {
            ""
        };
        let generics = self.generics(&inner["generics"]);
        let bounds = self.colon_bounds(&inner["bounds"]);
        let dyn_compatible = if inner["is_dyn_compatible"].as_bool() == Some(true) {
            " (dyn-compatible)"
        } else {
            ""
        };
        out.push(Entry {
            key: path.to_string(),
            line: format!(
                "{}pub {unsafety}{auto}trait {path}{generics}{bounds}{}{dyn_compatible}",
                attrs(item),
                self.where_clause(&inner["generics"], None)
            ),
            kind: Kind::Other,
        });
        for member in inner["items"].as_array().into_iter().flatten() {
            let Some(member) = self.doc.item(member) else {
                continue;
            };
            let name = member["name"].as_str().unwrap_or_default();
            let member_path = format!("{path}::{name}");
            let (kind, payload) = self.doc.inner(member);
            let line = match kind {
                "function" => {
                    let provided = if payload["has_body"].as_bool() == Some(true) {
                        " (provided)"
                    } else {
                        ""
                    };
                    let (line, kind) = self.function(payload, &member_path, Some(path), "");
                    out.push(Entry {
                        key: member_path,
                        line: format!("{}{line}{provided}", attrs(member)),
                        kind,
                    });
                    continue;
                }
                "assoc_type" => {
                    let bounds = self.colon_bounds(&payload["bounds"]);
                    let default = self.default_type(&payload["type"]);
                    let generics = self.generics(&payload["generics"]);
                    format!("pub type {member_path}{generics}{bounds}{default}")
                }
                "assoc_const" => {
                    let default = payload["value"]
                        .as_str()
                        .map(|value| format!(" = {value}"))
                        .unwrap_or_default();
                    format!(
                        "pub const {member_path}: {}{default}",
                        self.ty(&payload["type"])
                    )
                }
                _ => self.doc.unknown("a trait item", member),
            };
            out.push(Entry {
                key: member_path,
                line,
                kind: Kind::Other,
            });
        }
    }

    /// The lines of one impl block: a trait impl is one line (`impl Debug for X`); an inherent
    /// impl is one line per public item (`pub fn X::new() -> X`). Blanket impls of other
    /// crates' traits (`impl<T> From<T> for T`) are the std's, not this crate's, and are left out.
    pub(crate) fn impl_entry(&self, id: &Value, out: &mut Vec<Entry>) {
        let Some(item) = self.doc.item(id) else {
            return;
        };
        let (_, inner) = self.doc.inner(item);
        if !inner["blanket_impl"].is_null() {
            return;
        }
        let for_type = self.ty(&inner["for"]);
        let for_path = self.type_path(&inner["for"]);
        let trait_ref = &inner["trait"];
        if trait_ref.is_null() {
            self.inherent_items(inner, &for_type, &for_path, out);
            return;
        }
        let trait_name = trait_ref["path"].as_str().unwrap_or_default();
        let trait_name = trait_name.rsplit("::").next().unwrap_or_default();
        if UNSTABLE_TRAITS.contains(&trait_name) {
            return;
        }
        let trait_path = self.resolve(&trait_ref["id"], trait_ref["path"].as_str());
        let negative = if inner["is_negative"].as_bool() == Some(true) {
            "!"
        } else {
            ""
        };
        let unsafety = if inner["is_unsafe"].as_bool() == Some(true) {
            "unsafe "
        } else {
            ""
        };
        let line = format!(
            "{unsafety}impl{} {negative}{}{} for {for_type}{}",
            self.generics(&inner["generics"]),
            trait_path,
            self.args(&trait_ref["args"]),
            self.where_clause(&inner["generics"], None)
        );
        // Filed under its type when the type is this crate's, else under its trait.
        let own = |path: &String| {
            path == &self.doc.name || path.starts_with(&format!("{}::", self.doc.name))
        };
        let key = for_path
            .clone()
            .filter(own)
            .unwrap_or_else(|| trait_path.clone());
        out.push(Entry {
            key,
            line,
            kind: Kind::Impl {
                trait_path,
                for_type: for_path.unwrap_or(for_type),
            },
        });
    }

    fn inherent_items(
        &self,
        inner: &Value,
        for_type: &str,
        for_path: &Option<String>,
        out: &mut Vec<Entry>,
    ) {
        let owner_key = for_path.clone().unwrap_or_else(|| for_type.to_string());
        for member in inner["items"].as_array().into_iter().flatten() {
            let Some(member) = self.doc.item(member) else {
                continue;
            };
            if member["visibility"].as_str() != Some("public") {
                continue;
            }
            let name = member["name"].as_str().unwrap_or_default();
            let path = format!("{for_type}::{name}");
            let key = format!("{owner_key}::{name}");
            let (kind, payload) = self.doc.inner(member);
            let (line, kind) = match kind {
                "function" => {
                    let (line, kind) = self.function(
                        payload,
                        &path,
                        Some(&owner_key),
                        &self.where_predicates(&inner["generics"]),
                    );
                    (format!("{}{line}", attrs(member)), kind)
                }
                "assoc_const" | "constant" => (
                    format!("pub const {path}: {}", self.ty(&payload["type"])),
                    Kind::Other,
                ),
                "assoc_type" => (
                    format!("pub type {path} = {}", self.ty(&payload["type"])),
                    Kind::Other,
                ),
                _ => self.doc.unknown("an inherent impl item", member),
            };
            out.push(Entry { key, line, kind });
        }
    }

    /// `pub fn path<G>(args) -> out where ...`; `outer` are the where predicates of an impl
    /// block the function belongs to (its generics, written as predicates).
    fn function(
        &self,
        inner: &Value,
        path: &str,
        owner: Option<&str>,
        outer: &str,
    ) -> (String, Kind) {
        let header = &inner["header"];
        let mut qualifiers = String::new();
        for (flag, word) in [
            ("is_const", "const "),
            ("is_async", "async "),
            ("is_unsafe", "unsafe "),
        ] {
            if header[flag].as_bool() == Some(true) {
                qualifiers.push_str(word);
            }
        }
        match &header["abi"] {
            Value::String(abi) if abi == "Rust" => {}
            Value::Null => {}
            abi => qualifiers.push_str(&format!("extern \"{}\" ", tagged(abi).0)),
        }
        let sig = &inner["sig"];
        let mut takes_self = false;
        let inputs: Vec<String> = sig["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|input| {
                let name = input[0].as_str().unwrap_or("_");
                let ty = &input[1];
                if name == "self" {
                    takes_self = true;
                    self.self_param(ty)
                } else {
                    format!("{name}: {}", self.ty(ty))
                }
            })
            .collect();
        let output = match &sig["output"] {
            Value::Null => String::new(),
            ty => format!(" -> {}", self.ty(ty)),
        };
        let mut returns = BTreeSet::new();
        self.named_paths(&sig["output"], &mut returns);
        let line = format!(
            "pub {qualifiers}fn {path}{}({}){output}{}",
            self.generics(&inner["generics"]),
            inputs.join(", "),
            self.where_clause(&inner["generics"], Some(outer))
        );
        let kind = Kind::Fn {
            takes_self,
            owner: owner.map(str::to_string),
            returns,
        };
        (line, kind)
    }

    fn self_param(&self, ty: &Value) -> String {
        let (kind, inner) = tagged(ty);
        let is_self = |t: &Value| tagged(t) == ("generic", &Value::String("Self".into()));
        match kind {
            "generic" if is_self(ty) => "self".to_string(),
            "borrowed_ref" if is_self(&inner["type"]) => {
                let lifetime = inner["lifetime"]
                    .as_str()
                    .map(|l| format!("{l} "))
                    .unwrap_or_default();
                let mutable = if inner["is_mutable"].as_bool() == Some(true) {
                    "mut "
                } else {
                    ""
                };
                format!("&{lifetime}{mutable}self")
            }
            _ => format!("self: {}", self.ty(ty)),
        }
    }

    /// Every path a type names (for a check of what a function hands out).
    fn named_paths(&self, value: &Value, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                if let Some(path) = map.get("resolved_path") {
                    out.insert(self.resolve(&path["id"], path["path"].as_str()));
                }
                for inner in map.values() {
                    self.named_paths(inner, out);
                }
            }
            Value::Array(values) => {
                for inner in values {
                    self.named_paths(inner, out);
                }
            }
            _ => {}
        }
    }

    /// The full path of an id: this crate's canonical path, another listed crate's, rustdoc's
    /// `paths` table, or as written.
    fn resolve(&self, id: &Value, written: Option<&str>) -> String {
        if let Some(path) = id_key(id).and_then(|key| self.canonical.get(&key)) {
            return path.clone();
        }
        if let Some(path) = self.doc.summary_path(id) {
            return self.known.get(&path).cloned().unwrap_or(path);
        }
        written.unwrap_or("_").to_string()
    }

    /// The path of a type that is a path (`X<T>` → `X`), for filing its impls under.
    fn type_path(&self, ty: &Value) -> Option<String> {
        let (kind, inner) = tagged(ty);
        (kind == "resolved_path").then(|| self.resolve(&inner["id"], inner["path"].as_str()))
    }

    pub(crate) fn ty(&self, ty: &Value) -> String {
        let (kind, inner) = tagged(ty);
        match kind {
            "resolved_path" => format!(
                "{}{}",
                self.resolve(&inner["id"], inner["path"].as_str()),
                self.args(&inner["args"])
            ),
            "dyn_trait" => {
                let mut parts: Vec<String> = inner["traits"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|poly| {
                        let path = &poly["trait"];
                        format!(
                            "{}{}{}",
                            self.higher_ranked(&poly["generic_params"]),
                            self.resolve(&path["id"], path["path"].as_str()),
                            self.args(&path["args"])
                        )
                    })
                    .collect();
                if let Some(lifetime) = inner["lifetime"].as_str() {
                    parts.push(lifetime.to_string());
                }
                format!("dyn {}", parts.join(" + "))
            }
            "generic" | "primitive" => inner.as_str().unwrap_or("_").to_string(),
            "function_pointer" => {
                let sig = &inner["sig"];
                let inputs: Vec<String> = sig["inputs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|input| self.ty(&input[1]))
                    .collect();
                let output = match &sig["output"] {
                    Value::Null => String::new(),
                    ty => format!(" -> {}", self.ty(ty)),
                };
                format!(
                    "{}fn({}){output}",
                    self.higher_ranked(&inner["generic_params"]),
                    inputs.join(", ")
                )
            }
            "tuple" => {
                let types: Vec<String> = inner
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| self.ty(t))
                    .collect();
                if types.len() == 1 {
                    format!("({},)", types[0])
                } else {
                    format!("({})", types.join(", "))
                }
            }
            "slice" => format!("[{}]", self.ty(inner)),
            "array" => format!(
                "[{}; {}]",
                self.ty(&inner["type"]),
                inner["len"].as_str().unwrap_or("_")
            ),
            "impl_trait" => format!("impl {}", self.bounds(inner)),
            "infer" => "_".to_string(),
            "raw_pointer" => format!(
                "*{} {}",
                if inner["is_mutable"].as_bool() == Some(true) {
                    "mut"
                } else {
                    "const"
                },
                self.ty(&inner["type"])
            ),
            "borrowed_ref" => format!(
                "&{}{}{}",
                inner["lifetime"]
                    .as_str()
                    .map(|l| format!("{l} "))
                    .unwrap_or_default(),
                if inner["is_mutable"].as_bool() == Some(true) {
                    "mut "
                } else {
                    ""
                },
                self.ty(&inner["type"])
            ),
            "qualified_path" => {
                let self_type = self.ty(&inner["self_type"]);
                let name = inner["name"].as_str().unwrap_or_default();
                let args = self.args(&inner["args"]);
                match &inner["trait"] {
                    Value::Null => format!("{self_type}::{name}{args}"),
                    path => format!(
                        "<{self_type} as {}{}>::{name}{args}",
                        self.resolve(&path["id"], path["path"].as_str()),
                        self.args(&path["args"])
                    ),
                }
            }
            "pat" => self.ty(&inner["type"]),
            _ => self.doc.unknown("a type", ty),
        }
    }

    fn args(&self, args: &Value) -> String {
        let (kind, inner) = tagged(args);
        match kind {
            "" if args.is_null() => String::new(),
            "angle_bracketed" => {
                let mut parts: Vec<String> = inner["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|arg| {
                        let (kind, value) = tagged(arg);
                        match kind {
                            "lifetime" => value.as_str().unwrap_or_default().to_string(),
                            "type" => self.ty(value),
                            "const" => value["expr"].as_str().unwrap_or("_").to_string(),
                            _ => "_".to_string(),
                        }
                    })
                    .collect();
                for constraint in inner["constraints"].as_array().into_iter().flatten() {
                    let name = constraint["name"].as_str().unwrap_or_default();
                    let own_args = self.args(&constraint["args"]);
                    let (binding, value) = tagged(&constraint["binding"]);
                    parts.push(match binding {
                        "equality" => {
                            let (term, term_value) = tagged(value);
                            let shown = if term == "type" {
                                self.ty(term_value)
                            } else {
                                term_value["expr"].as_str().unwrap_or("_").to_string()
                            };
                            format!("{name}{own_args} = {shown}")
                        }
                        _ => format!("{name}{own_args}: {}", self.bounds(value)),
                    });
                }
                if parts.is_empty() {
                    String::new()
                } else {
                    format!("<{}>", parts.join(", "))
                }
            }
            "parenthesized" => {
                let inputs: Vec<String> = inner["inputs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| self.ty(t))
                    .collect();
                let output = match &inner["output"] {
                    Value::Null => String::new(),
                    ty => format!(" -> {}", self.ty(ty)),
                };
                format!("({}){output}", inputs.join(", "))
            }
            "return_type_notation" => "(..)".to_string(),
            _ => self.doc.unknown("generic arguments", args),
        }
    }

    /// `: A + B` after a name, or nothing when there are no bounds.
    fn colon_bounds(&self, bounds: &Value) -> String {
        let bounds = self.bounds(bounds);
        if bounds.is_empty() {
            bounds
        } else {
            format!(": {bounds}")
        }
    }

    /// ` = T` for a default type, or nothing when there is none.
    fn default_type(&self, ty: &Value) -> String {
        match ty {
            Value::Null => String::new(),
            ty => format!(" = {}", self.ty(ty)),
        }
    }

    fn bounds(&self, bounds: &Value) -> String {
        let parts: Vec<String> = bounds
            .as_array()
            .into_iter()
            .flatten()
            .map(|bound| {
                let (kind, inner) = tagged(bound);
                match kind {
                    "trait_bound" => {
                        let modifier = match inner["modifier"].as_str() {
                            Some("maybe") => "?",
                            Some("maybe_const") => "~const ",
                            _ => "",
                        };
                        let path = &inner["trait"];
                        format!(
                            "{}{modifier}{}{}",
                            self.higher_ranked(&inner["generic_params"]),
                            self.resolve(&path["id"], path["path"].as_str()),
                            self.args(&path["args"])
                        )
                    }
                    "outlives" => inner.as_str().unwrap_or_default().to_string(),
                    "use" => {
                        let captured: Vec<String> = inner
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|arg| tagged(arg).1.as_str().unwrap_or_default().to_string())
                            .collect();
                        format!("use<{}>", captured.join(", "))
                    }
                    _ => self.doc.unknown("a bound", bound),
                }
            })
            .collect();
        parts.join(" + ")
    }

    fn higher_ranked(&self, params: &Value) -> String {
        let names: Vec<String> = params
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|param| param["name"].as_str().map(str::to_string))
            .collect();
        if names.is_empty() {
            String::new()
        } else {
            format!("for<{}> ", names.join(", "))
        }
    }

    /// `<'a, T: Bound, const N: usize>`, leaving out the parameters `impl Trait` arguments make.
    fn generics(&self, generics: &Value) -> String {
        let params: Vec<String> = generics["params"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|param| {
                let name = param["name"].as_str().unwrap_or_default();
                let (kind, inner) = tagged(&param["kind"]);
                match kind {
                    "lifetime" => {
                        let outlives: Vec<&str> = inner["outlives"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect();
                        Some(if outlives.is_empty() {
                            name.to_string()
                        } else {
                            format!("{name}: {}", outlives.join(" + "))
                        })
                    }
                    "type" if inner["is_synthetic"].as_bool() == Some(true) => None,
                    "type" => {
                        let bounds = self.colon_bounds(&inner["bounds"]);
                        let default = self.default_type(&inner["default"]);
                        Some(format!("{name}{bounds}{default}"))
                    }
                    "const" => Some(format!("const {name}: {}", self.ty(&inner["type"]))),
                    _ => self.doc.unknown("a generic parameter", param),
                }
            })
            .collect();
        if params.is_empty() {
            String::new()
        } else {
            format!("<{}>", params.join(", "))
        }
    }

    /// An impl block's generics as where predicates (`T: Clock`), for the lines of its items.
    fn where_predicates(&self, generics: &Value) -> String {
        let mut parts = Vec::new();
        for param in generics["params"].as_array().into_iter().flatten() {
            let (kind, inner) = tagged(&param["kind"]);
            if kind == "type" {
                let bounds = self.bounds(&inner["bounds"]);
                if !bounds.is_empty() {
                    parts.push(format!(
                        "{}: {bounds}",
                        param["name"].as_str().unwrap_or_default()
                    ));
                }
            }
        }
        let own = self.where_clause(generics, None);
        if let Some(rest) = own.strip_prefix(" where ") {
            parts.push(rest.to_string());
        }
        parts.join(", ")
    }

    /// ` where A: B, 'a: 'b` (empty when there is nothing), with `outer` predicates first.
    fn where_clause(&self, generics: &Value, outer: Option<&str>) -> String {
        let mut parts: Vec<String> = outer
            .filter(|outer| !outer.is_empty())
            .map(|outer| vec![outer.to_string()])
            .unwrap_or_default();
        for predicate in generics["where_predicates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let (kind, inner) = tagged(predicate);
            parts.push(match kind {
                "bound_predicate" => format!(
                    "{}{}: {}",
                    self.higher_ranked(&inner["generic_params"]),
                    self.ty(&inner["type"]),
                    self.bounds(&inner["bounds"])
                ),
                "lifetime_predicate" => {
                    let outlives: Vec<&str> = inner["outlives"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    format!(
                        "{}: {}",
                        inner["lifetime"].as_str().unwrap_or_default(),
                        outlives.join(" + ")
                    )
                }
                "eq_predicate" => {
                    let (_, rhs) = tagged(&inner["rhs"]);
                    format!("{} = {}", self.ty(&inner["lhs"]), self.ty(rhs))
                }
                _ => self.doc.unknown("a where predicate", predicate),
            });
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" where {}", parts.join(", "))
        }
    }
}

/// The attributes that are part of an item's contract: `#[non_exhaustive]`, `#[must_use]`.
fn attrs(item: &Value) -> String {
    let mut out = String::new();
    for attr in item["attrs"].as_array().into_iter().flatten() {
        match tagged(attr).0 {
            "non_exhaustive" => out.push_str("#[non_exhaustive] "),
            "must_use" => out.push_str("#[must_use] "),
            _ => {}
        }
    }
    out
}
