//! The configuration reference (`docs/reference/config.md`), made from the
//! schema itself: the sections and keys, their types and doc comments are
//! read from `configs/src/*.rs` (parsed with `syn`), the defaults from
//! `Config::default()`, the allowed values from the enums, who reads each
//! key from `rulka_config::readers::READERS`, and where a key is refused by
//! trying a value of it under each algorithm and environment through
//! `Config::validate`. The page is compared with what this makes, so it
//! cannot drift from the code (`RULKA_BLESS=1` rewrites it); every key of
//! the schema must have a reader.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod common;

use common::ranges::{self, Range};
use rulka_config::readers::{reader_of, READERS};
use rulka_config::Config;
use serde_json::Value;

/// A struct or an enum of the schema, as its source says.
#[derive(Debug, Clone)]
enum Item {
    Struct { doc: String, fields: Vec<Field> },
    Enum { variants: Vec<(String, String)>, plain: bool },
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    doc: String,
    ty: syn::Type,
}

fn doc_of(attrs: &[syn::Attribute]) -> String {
    let mut lines = Vec::new();
    for a in attrs {
        if !a.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(nv) = &a.meta {
            if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &nv.value {
                lines.push(s.value().strip_prefix(' ').unwrap_or(&s.value()).to_string());
            }
        }
    }
    // Paragraphs joined into lines; a doc's code examples are left out, and
    // rustdoc's links (`[`X`]`, `[x](y)`) read as their text.
    let text = lines.join("\n").replace("[`", "`").replace("`]", "`");
    text.split("\n\n")
        .filter(|p| !p.trim_start().starts_with("```"))
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn serde_arg(attrs: &[syn::Attribute], key: &str) -> Option<String> {
    let mut found = None;
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|m| {
            if m.path.is_ident(key) {
                if let Ok(v) = m.value() {
                    if let Ok(s) = v.parse::<syn::LitStr>() {
                        found = Some(s.value());
                    }
                }
            } else if m.input.peek(syn::Token![=]) {
                let _: syn::Expr = m.value()?.parse()?;
            }
            Ok(())
        });
    }
    found
}

fn schema() -> BTreeMap<String, Item> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut items = BTreeMap::new();
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "rs")) {
        let file = syn::parse_file(&std::fs::read_to_string(f).unwrap()).unwrap();
        for item in file.items {
            match item {
                syn::Item::Struct(s) => {
                    let fields = match &s.fields {
                        syn::Fields::Named(n) => n
                            .named
                            .iter()
                            .filter(|f| matches!(f.vis, syn::Visibility::Public(_)))
                            .map(|f| Field {
                                name: serde_arg(&f.attrs, "rename")
                                    .unwrap_or_else(|| f.ident.as_ref().unwrap().to_string()),
                                doc: doc_of(&f.attrs),
                                ty: f.ty.clone(),
                            })
                            .collect(),
                        _ => Vec::new(),
                    };
                    items.insert(
                        s.ident.to_string(),
                        Item::Struct { doc: doc_of(&s.attrs), fields },
                    );
                }
                syn::Item::Enum(e) => {
                    let rename_all = serde_arg(&e.attrs, "rename_all");
                    let plain = e.variants.iter().all(|v| matches!(v.fields, syn::Fields::Unit));
                    let variants = e
                        .variants
                        .iter()
                        .map(|v| {
                            let name = serde_arg(&v.attrs, "rename").unwrap_or_else(|| {
                                let n = v.ident.to_string();
                                match rename_all.as_deref() {
                                    Some("snake_case") => snake(&n),
                                    Some("lowercase") => n.to_lowercase(),
                                    _ => n,
                                }
                            });
                            (name, doc_of(&v.attrs))
                        })
                        .collect();
                    items.insert(e.ident.to_string(), Item::Enum { variants, plain });
                }
                _ => {}
            }
        }
    }
    items
}

fn snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The last path segment's name and generic arguments of a type.
fn head(ty: &syn::Type) -> (String, Vec<syn::Type>) {
    if let syn::Type::Path(p) = ty {
        if let Some(seg) = p.path.segments.last() {
            let args = match &seg.arguments {
                syn::PathArguments::AngleBracketed(a) => a
                    .args
                    .iter()
                    .filter_map(|g| {
                        if let syn::GenericArgument::Type(t) = g {
                            Some(t.clone())
                        } else {
                            None
                        }
                    })
                    .collect(),
                _ => Vec::new(),
            };
            return (seg.ident.to_string(), args);
        }
    }
    (quote_ty(ty), Vec::new())
}

fn quote_ty(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Array(a) => format!(
            "[{}; {}]",
            quote_ty(&a.elem),
            match &a.len {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => i.to_string(),
                _ => "N".into(),
            }
        ),
        syn::Type::Path(_) => {
            let (n, args) = head(ty);
            if args.is_empty() {
                n
            } else {
                format!("{n}<{}>", args.iter().map(quote_ty).collect::<Vec<_>>().join(", "))
            }
        }
        _ => "?".into(),
    }
}

/// The user's words for a type: `integer`, `list of numbers`, an enum's values...
fn type_words(ty: &syn::Type, items: &BTreeMap<String, Item>) -> String {
    let (n, args) = head(ty);
    match n.as_str() {
        "Option" => format!("{} or unset", type_words(&args[0], items)),
        "Vec" => format!("list of {}", plural(&type_words(&args[0], items))),
        "Box" => type_words(&args[0], items),
        "bool" => "true or false".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" => "integer ≥ 0".into(),
        "i32" | "i64" => "integer".into(),
        "f32" | "f64" => "number".into(),
        "String" => "text".into(),
        "PathBuf" => "path".into(),
        "Schedule" => "schedule: [[frame, value], ...]".into(),
        "SeedList" | "Seeds" => "seeds: a list of seeds and ranges \"a..b\"".into(),
        "LearnerThreads" => "`auto` or an integer ≥ 1".into(),
        "HfModel" => "a Hugging Face model's shape (read from its folder)".into(),
        _ => match items.get(&n) {
            Some(Item::Enum { plain: true, variants, .. }) => {
                format!(
                    "one of {}",
                    variants.iter().map(|(v, _)| format!("`{v}`")).collect::<Vec<_>>().join(", ")
                )
            }
            Some(Item::Enum { .. }) => n.clone(),
            Some(Item::Struct { .. }) => format!("a `{n}` (below)"),
            None if matches!(ty, syn::Type::Array(_)) => quote_ty(ty),
            None => n,
        },
    }
}

fn plural(s: &str) -> String {
    match s {
        "number" => "numbers".into(),
        "text" => "texts".into(),
        "path" => "paths".into(),
        "integer ≥ 0" => "integers ≥ 0".into(),
        "integer" => "integers".into(),
        s => s.to_string(),
    }
}

/// A key of the schema: its dotted path (a list's items as `[]`), field and type.
#[derive(Debug, Clone)]
struct Key {
    path: String,
    field: Field,
    /// The section (struct) it belongs to, and whether that section sits in a list.
    section: String,
}

/// The structs a field's type leads into (through `Option`, `Box`, `Vec`).
fn inner_struct(ty: &syn::Type, items: &BTreeMap<String, Item>) -> Option<(String, bool)> {
    let (n, args) = head(ty);
    match n.as_str() {
        "Option" | "Box" => inner_struct(&args[0], items),
        "Vec" => inner_struct(&args[0], items).map(|(s, _)| (s, true)),
        _ if matches!(items.get(&n), Some(Item::Struct { fields, .. }) if !fields.is_empty())
            && n != "Schedule" =>
        {
            Some((n, false))
        }
        _ => None,
    }
}

fn keys(items: &BTreeMap<String, Item>) -> (Vec<Key>, Vec<(String, String)>) {
    let mut out = Vec::new();
    let mut sections = Vec::new();
    fn walk(
        items: &BTreeMap<String, Item>,
        ty_name: &str,
        prefix: &str,
        out: &mut Vec<Key>,
        sections: &mut Vec<(String, String)>,
    ) {
        let Some(Item::Struct { fields, .. }) = items.get(ty_name) else { return };
        sections.push((prefix.to_string(), ty_name.to_string()));
        for f in fields {
            let path =
                if prefix.is_empty() { f.name.clone() } else { format!("{prefix}.{}", f.name) };
            match inner_struct(&f.ty, items) {
                Some((s, list)) => {
                    let p = if list { format!("{path}[]") } else { path };
                    walk(items, &s, &p, out, sections);
                }
                None => out.push(Key { path, field: f.clone(), section: prefix.to_string() }),
            }
        }
    }
    walk(items, "Config", "", &mut out, &mut sections);
    (out, sections)
}

/// `path`'s default: the value `Config::default()` has there; under an
/// optional section or a list, the section's own defaults (parsed from an
/// empty one), `None` where a value has no default.
fn default_of(path: &str) -> Option<Value> {
    let root = serde_json::to_value(Config::default()).unwrap();
    let parts: Vec<&str> = path.split('.').collect();
    let mut v = &root;
    for (i, p) in parts.iter().enumerate() {
        let (name, list) = match p.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (*p, false),
        };
        match v.get(name) {
            Some(Value::Null) if i + 1 < parts.len() || list => {
                return section_default(&parts[..=i], &parts[i + 1..]);
            }
            Some(x) if list => {
                let _ = x;
                return section_default(&parts[..=i], &parts[i + 1..]);
            }
            Some(x) => v = x,
            None => return None,
        }
    }
    Some(v.clone())
}

/// The defaults of the section at `at` (optional, or a list's item):
/// a config that has that section empty, read back.
fn section_default(at: &[&str], rest: &[&str]) -> Option<Value> {
    let mut doc = serde_json::json!({});
    let mut slot = &mut doc;
    for (i, p) in at.iter().enumerate() {
        let (name, list) = match p.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (*p, false),
        };
        let last = i + 1 == at.len();
        slot[name] = if last && list { serde_json::json!([{}]) } else { serde_json::json!({}) };
        slot = if last && list { &mut slot[name][0] } else { &mut slot[name] };
    }
    let cfg: Config = serde_json::from_value(doc).ok()?;
    let mut v = serde_json::to_value(cfg).unwrap();
    for p in at {
        v = match p.strip_suffix("[]") {
            Some(n) => v.get(n)?.get(0)?.clone(),
            None => v.get(*p)?.clone(),
        };
    }
    for p in rest {
        v = v.get(*p)?.clone();
    }
    Some(v)
}

fn show(v: &Value) -> String {
    match v {
        Value::Null => "unset".into(),
        Value::String(s) if s.is_empty() => "`\"\"`".into(),
        Value::String(s) => format!("`{s}`"),
        Value::Array(a) if a.is_empty() => "`[]`".into(),
        v => format!("`{}`", serde_json::to_string(v).unwrap()),
    }
}

/// Values of a key to try when finding where it is refused: a flipped
/// bool, numbers around the default, each value of an enum.
fn candidates(default: &Value, ty: &syn::Type, items: &BTreeMap<String, Item>) -> Vec<Value> {
    let (n, args) = head(ty);
    if let Some(Item::Enum { plain: true, variants, .. }) = items.get(&n) {
        return variants
            .iter()
            .map(|(v, _)| Value::String(v.clone()))
            .filter(|v| v != default)
            .collect();
    }
    // An unset option: values of its inner type.
    if n == "Option" && default.is_null() {
        return match head(&args[0]).0.as_str() {
            "f32" | "f64" => [0.5, 0.1, 1.0, 2.0].map(Value::from).to_vec(),
            "u8" | "u16" | "u32" | "u64" | "usize" => [1, 2, 32].map(Value::from).to_vec(),
            "bool" => vec![Value::Bool(true), Value::Bool(false)],
            _ => Vec::new(),
        };
    }
    match default {
        Value::Bool(b) => vec![Value::Bool(!b)],
        Value::Number(x) if x.is_u64() || x.is_i64() => {
            let d = x.as_i64().unwrap_or(0);
            [d + 1, d * 2, 1].into_iter().filter(|c| *c != d && *c >= 0).map(Value::from).collect()
        }
        Value::Number(x) => {
            let d = x.as_f64().unwrap_or(0.0);
            [d * 0.5, d * 1.5, 0.5, 0.1].into_iter().filter(|c| *c != d).map(Value::from).collect()
        }
        _ => Vec::new(),
    }
}

/// The configs a key is tried in: each algorithm on the simulator, and the
/// game (with one map, as a game config needs).
fn contexts() -> Vec<(&'static str, Value)> {
    let base = serde_json::to_value(Config::default()).unwrap();
    let mut out = Vec::new();
    for (algo, name) in [("ppo", "PPO"), ("grpo", "GRPO"), ("dpo", "DPO")] {
        let mut c = base.clone();
        c["training"]["algorithm"] = Value::from(algo);
        out.push((name, c));
    }
    let mut tmi = base;
    tmi["environment"]["kind"] = Value::from("tmi");
    tmi["environment"]["tmi"]["maps"] =
        serde_json::json!([{"name": "a", "map_path": "a.Challenge.Gbx", "zone_centers": "a.npy"}]);
    out.push(("the game", tmi));
    out
}

fn set(doc: &mut Value, path: &str, v: Value) -> bool {
    let parts: Vec<&str> = path.split('.').collect();
    let mut slot = doc;
    for p in &parts[..parts.len() - 1] {
        match slot.get_mut(*p) {
            Some(x) if x.is_object() => slot = x,
            _ => return false,
        }
    }
    slot[*parts.last().unwrap()] = v;
    true
}

/// Where a value of `key` is refused though the same value is taken
/// elsewhere: `(context, message)` for each context that refuses it.
fn refusals(key: &Key, default: &Value, items: &BTreeMap<String, Item>) -> Vec<(String, String)> {
    if key.path.contains("[]") {
        return Vec::new();
    }
    let ctx = contexts();
    for cand in candidates(default, &key.field.ty, items) {
        let mut verdicts = Vec::new();
        for (name, base) in &ctx {
            let mut doc = base.clone();
            if !set(&mut doc, &key.path, cand.clone()) {
                continue;
            }
            let Ok(cfg) = serde_json::from_value::<Config>(doc) else { continue };
            let problem = cfg.validate().into_iter().find(|p| p.key == key.path);
            verdicts.push((name.to_string(), problem.map(|p| p.message)));
        }
        let taken = verdicts.iter().any(|(_, p)| p.is_none());
        let refused: Vec<(String, String)> =
            verdicts.into_iter().filter_map(|(n, p)| p.map(|m| (n, m))).collect();
        if taken && !refused.is_empty() {
            return refused;
        }
    }
    Vec::new()
}

fn make() -> String {
    let items = schema();
    let (keys, sections) = keys(&items);
    let mut out = String::from(
        "# Configuration reference\n\n\
         <!-- Made by configs/tests/reference.rs from the schema (configs/src), its doc comments, the defaults, the\n\
         readers table and Config::validate: do not edit; RULKA_BLESS=1 cargo test -p rulka-config --test reference rewrites it. -->\n\n\
         Every key of rulka's YAML config: its type, its default, its allowed values, which part of rulka reads it,\n\
         and where it is refused. Configuration is strict: a key not listed here, a wrong type, or a value out of its range is an\n\
         error naming the key (`rulka config check FILE`, exit 2). `rulka config show FILE` prints a config with every default\n\
         filled in. A `*_schedule` is a list of `[frame, value]` knots, interpolated between them (the first value before the first\n\
         knot, the last after the last), its frames multiplied by `training.global_schedule_speed`; where a key has both a fixed\n\
         value and a `_schedule`, the schedule, when set, is the one read. Keys under a list (`maps[]`) are each item's.\n\n\
         A key read only by some algorithms or environments is **ignored** by the others unless it says it is refused there.\n\n",
    );
    for (prefix, ty) in &sections {
        let Some(Item::Struct { doc, .. }) = items.get(ty) else { continue };
        let in_section: Vec<&Key> = keys.iter().filter(|k| &k.section == prefix).collect();
        if in_section.is_empty() {
            continue;
        }
        let title =
            if prefix.is_empty() { "(top level)".to_string() } else { format!("`{prefix}`") };
        let _ = writeln!(out, "## {title}\n");
        if !doc.is_empty() {
            let _ = writeln!(out, "{doc}\n");
        }
        for k in in_section {
            let default = default_of(&k.path);
            let reader = reader_of(&k.path);
            let _ = write!(out, "- **`{}`** ({}", k.path, type_words(&k.field.ty, &items));
            match &default {
                Some(d) => {
                    let _ = write!(out, "; default {}", show(d));
                }
                None if head(&k.field.ty).0 == "Option" => out.push_str("; default unset"),
                None => out.push_str("; required"),
            }
            let ranges = allowed(&k.path);
            if let Some((_, words)) = ranges.iter().find(|(c, _)| c.is_empty()) {
                let _ = write!(out, "; allowed: {words}");
            }
            out.push(')');
            if !k.field.doc.is_empty() {
                let _ = write!(out, ": {}", k.field.doc);
            }
            let (n, _) = head(&k.field.ty);
            let enum_name =
                if n == "Option" || n == "Vec" { head(&head(&k.field.ty).1[0]).0 } else { n };
            if let Some(Item::Enum { plain: true, variants, .. }) = items.get(&enum_name) {
                let described: Vec<String> = variants
                    .iter()
                    .filter(|(_, d)| !d.is_empty())
                    .map(|(v, d)| format!("`{v}`: {}", d.trim_end_matches('.')))
                    .collect();
                if !described.is_empty() {
                    let _ = write!(out, " Values: {}.", described.join("; "));
                }
            }
            for (context, words) in ranges.iter().filter(|(c, _)| !c.is_empty()) {
                let _ = write!(out, " *With `{context}`:* {words}.");
            }
            if let Some(r) = reader {
                let _ = write!(out, " *Read by:* {}.", r.describe());
            }
            let refused = default.as_ref().map(|d| refusals(k, d, &items)).unwrap_or_default();
            if !refused.is_empty() {
                let ctx: Vec<String> = refused.iter().map(|(c, _)| c.clone()).collect();
                let _ = write!(
                    out,
                    " *Refused under {}:* {}.",
                    ctx.join(", "),
                    refused[0].1.trim_end_matches('.')
                );
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// What `tests/common/ranges.rs` allows `path`, by the setting it is
/// checked in (`""`: the defaults).
fn allowed(path: &str) -> Vec<(String, String)> {
    let rows = ranges::NUMBERS.iter().map(|(k, r, c)| (k, Range::parse(r).words(), c));
    let schedules = ranges::SCHEDULES
        .iter()
        .map(|(k, r, c)| (k, format!("every value {}", Range::parse(r).words()), c));
    let lists =
        ranges::LISTS.iter().map(|(k, r, c)| (k, format!("each {}", Range::parse(r).words()), c));
    rows.chain(schedules)
        .chain(lists)
        .filter(|(k, _, _)| **k == path)
        .map(|(_, w, c)| (c.to_string(), w))
        .collect()
}

#[test]
fn every_key_of_the_schema_has_a_reader_and_every_reader_a_key() {
    let items = schema();
    let (keys, _) = keys(&items);
    assert!(keys.len() > 150, "only {} keys found: is the schema parsed?", keys.len());
    let missing: Vec<&str> =
        keys.iter().filter(|k| reader_of(&k.path).is_none()).map(|k| k.path.as_str()).collect();
    assert!(
        missing.is_empty(),
        "keys no entry of READERS (configs/src/readers.rs) covers: {missing:?}"
    );
    let plain: Vec<String> = keys.iter().map(|k| k.path.replace("[]", "")).collect();
    for r in READERS {
        assert!(
            plain.iter().any(|k| k == r.prefix || k.starts_with(&format!("{}.", r.prefix))),
            "READERS names {}, which is no key or section of the schema",
            r.prefix
        );
    }
}

#[test]
fn the_configuration_reference_is_up_to_date() {
    let made = make();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/config.md");
    if std::env::var_os("RULKA_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &made).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == made,
        "docs/reference/config.md is stale: the schema, a doc comment, a default, a reader or a refusal changed (RULKA_BLESS=1 cargo test -p rulka-config --test reference rewrites it)"
    );
}

#[test]
fn the_reference_says_what_a_reader_needs_of_known_keys() {
    let made = make();
    for want in [
        "- **`training.algorithm`** (one of `ppo`, `grpo`, `dpo`; default `ppo`)",
        "- **`inference.provider`** (one of `cpu`, `cuda`, `tensorrt`; default `cpu`)",
        "- **`environment.tmi.maps[].name`** (text; required)",
        "- **`ppo.sil_coef`** (number; default `0.0`; allowed: ≥ 0, finite)",
    ] {
        assert!(made.contains(want), "the reference lacks {want}");
    }
    // A PPO lever is refused under GRPO and DPO, named as such.
    let sil = made.lines().find(|l| l.starts_with("- **`ppo.sil_coef`**")).unwrap();
    assert!(sil.contains("*Refused under GRPO, DPO:*"), "{sil}");
    let popart = made.lines().find(|l| l.starts_with("- **`ppo.popart_beta`**")).unwrap();
    assert!(
        popart.contains("*Refused under GRPO, DPO:*"),
        "an unset option's values are tried too: {popart}"
    );
}
