//! The guide (README.md and the mdBook in docs/) checked against the
//! code: every page is in the book, every link and anchor resolves, every
//! YAML block is a config `rulka config check` takes (alone, or merged onto
//! the preset an `<!-- on: configs/X.yaml -->` line before it names), every
//! command line parses with the real binaries' argument parsers, the book's
//! first page is the README, and the generated CLI reference is the one the
//! binaries make today (`RULKA_BLESS=1` rewrites it).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// README.md and every page under docs/, as (path relative to the root, text).
fn pages() -> Vec<(String, String)> {
    let r = root();
    let mut out =
        vec![("README.md".to_string(), std::fs::read_to_string(r.join("README.md")).unwrap())];
    let mut stack = vec![r.join("docs")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                let rel = p.strip_prefix(&r).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A fenced block: its language, first line number (1-based, the fence's),
/// the line before the fence, and its text.
struct Block {
    lang: String,
    line: usize,
    before: String,
    text: String,
}

fn blocks(md: &str) -> Vec<Block> {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        if let Some(lang) = l.strip_prefix("```") {
            let indent = lines[i].len() - l.len();
            let start = i;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                body.push(
                    lines[i]
                        .get(indent.min(lines[i].len() - lines[i].trim_start().len())..)
                        .unwrap_or(""),
                );
                i += 1;
            }
            out.push(Block {
                lang: lang.trim().to_string(),
                line: start + 1,
                before: if start > 0 { lines[start - 1].trim().to_string() } else { String::new() },
                text: body.join("\n"),
            });
        }
        i += 1;
    }
    out
}

/// The text outside fenced blocks and inline code (links live there).
fn prose(md: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for l in md.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            let mut inline = false;
            for c in l.chars() {
                if c == '`' {
                    inline = !inline;
                } else if !inline {
                    out.push(c);
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The anchors a page's headings get (GitHub's and mdBook's slugs; a
/// repeated heading gets `-1`, `-2`, ...), and explicit `<a id="...">`.
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for l in md.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        if let Some(h) = l.strip_prefix('#') {
            let title = h.trim_start_matches('#').trim();
            let slug: String = title
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect();
            let n = seen.entry(slug.clone()).or_insert(0);
            out.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
            *n += 1;
        }
        for part in l.split("<a id=\"").skip(1) {
            if let Some(id) = part.split('"').next() {
                out.insert(id.to_string());
            }
        }
    }
    out
}

/// Every `[text](target)` and `![alt](target)` of a page's prose.
fn links(md: &str) -> Vec<String> {
    let p = prose(md);
    let mut out = Vec::new();
    let mut rest = p.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        out.push(after[..end].trim().to_string());
        rest = &after[end.min(after.len())..];
    }
    out
}

#[test]
fn every_page_is_in_the_book_and_every_entry_exists() {
    let r = root();
    let summary = std::fs::read_to_string(r.join("docs/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    for l in &listed {
        assert!(r.join("docs").join(l).is_file(), "SUMMARY.md lists {l}, which is not there");
    }
    for (page, _) in pages() {
        let Some(rel) = page.strip_prefix("docs/") else { continue };
        if rel == "SUMMARY.md" {
            continue;
        }
        assert!(listed.contains(rel), "{page} is in no chapter of docs/SUMMARY.md");
    }
    assert!(r.join("book.toml").is_file());
}

#[test]
fn every_link_and_anchor_resolves() {
    let r = root();
    let all = pages();
    let texts: BTreeMap<PathBuf, &String> = all.iter().map(|(p, t)| (r.join(p), t)).collect();
    let mut bad = Vec::new();
    for (page, text) in &all {
        let dir = r.join(page).parent().unwrap().to_path_buf();
        for target in links(text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                bad.push(format!("{page}: {target}: the guide links to no host"));
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() { r.join(page) } else { dir.join(path) };
            let Ok(file) = file.canonicalize() else {
                bad.push(format!("{page}: {target}: no such file"));
                continue;
            };
            if !file.starts_with(&r) {
                bad.push(format!("{page}: {target}: outside the repository"));
                continue;
            }
            if page.starts_with("docs/")
                && !file.starts_with(r.join("docs"))
                && path.ends_with(".md")
            {
                bad.push(format!("{page}: {target}: a book page links to a page outside the book"));
            }
            if let Some(a) = anchor {
                match texts.get(&file) {
                    Some(t) if anchors(t).contains(a) => {}
                    Some(_) => bad.push(format!("{page}: {target}: no heading makes #{a}")),
                    None => bad.push(format!(
                        "{page}: {target}: an anchor into a file that is not a page"
                    )),
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} broken link(s):\n{}", bad.len(), bad.join("\n"));
}

/// `base` with `over` laid on it (maps merged key by key, anything else replaced).
fn merge(base: &mut serde_yaml_ng::Value, over: serde_yaml_ng::Value) {
    match (base, over) {
        (serde_yaml_ng::Value::Mapping(b), serde_yaml_ng::Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

#[test]
fn every_yaml_block_is_a_config_rulka_takes() {
    let r = root();
    // A user runs rulka from the repository's root: relative paths in the
    // configs (a map line) are read from there. (nextest runs each test in
    // its own process.)
    std::env::set_current_dir(&r).unwrap();
    let mut checked = 0;
    let mut bad = Vec::new();
    for (page, text) in pages() {
        for b in blocks(&text).into_iter().filter(|b| b.lang == "yaml") {
            let at = format!("{page}:{}", b.line);
            let snippet: serde_yaml_ng::Value = match serde_yaml_ng::from_str(&b.text) {
                Ok(v) => v,
                Err(e) => {
                    bad.push(format!("{at}: not YAML: {e}"));
                    continue;
                }
            };
            let mut doc = serde_yaml_ng::Value::Mapping(Default::default());
            if let Some(preset) =
                b.before.strip_prefix("<!-- on:").and_then(|s| s.strip_suffix("-->"))
            {
                let preset = preset.trim();
                let Ok(t) = std::fs::read_to_string(r.join(preset)) else {
                    bad.push(format!("{at}: merged onto {preset}, which is not there"));
                    continue;
                };
                doc = serde_yaml_ng::from_str(&t).unwrap();
            }
            merge(&mut doc, snippet);
            let yaml = serde_yaml_ng::to_string(&doc).unwrap();
            if let Err(e) = rulka_config::Config::from_yaml_str(&yaml, &at) {
                bad.push(format!("{at}: {e}"));
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} yaml blocks found");
    assert!(bad.is_empty(), "{} yaml block(s) rulka refuses:\n{}", bad.len(), bad.join("\n"));
}

/// Shell words of a command line (quotes kept out, `#` comments dropped).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None::<char>, false);
    for c in line.chars() {
        match (quote, c) {
            // A `#` that starts a word starts a comment.
            (None, '#') if !any && cur.is_empty() => break,
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, ' ' | '\t') => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (_, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The command lines of a shell or batch block, continuations joined.
fn command_lines(b: &Block) -> Vec<String> {
    let cont = if b.lang == "bat" { '^' } else { '\\' };
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in b.text.lines() {
        let t = l.trim();
        if let Some(head) = t.strip_suffix(cont) {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

#[test]
fn every_command_line_parses_with_the_real_binaries() {
    let r = root();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_rulka")).parent().unwrap().to_path_buf();
    let collector = bin_dir.join("rulka-collector");
    let mut checked = 0;
    let mut bad = Vec::new();
    for (page, text) in pages() {
        for b in
            blocks(&text).into_iter().filter(|b| matches!(b.lang.as_str(), "bash" | "sh" | "bat"))
        {
            for line in command_lines(&b) {
                let w = words(&line);
                let Some(first) = w.first() else { continue };
                let at = format!("{page}:{}: {line}", b.line);
                let (bin, mut args): (PathBuf, Vec<String>) = match first.as_str() {
                    "scripts/rulka" | "rulka" => {
                        (PathBuf::from(env!("CARGO_BIN_EXE_rulka")), w[1..].to_vec())
                    }
                    "rulka-collector" | "./rulka-collector" | "rulka-collector.exe" => {
                        (collector.clone(), w[1..].to_vec())
                    }
                    s if s.starts_with("scripts/") => {
                        if !r.join(s).is_file() {
                            bad.push(format!("{at}: no {s}"));
                        }
                        continue;
                    }
                    _ => continue,
                };
                if first == "scripts/rulka"
                    && args.first().is_some_and(|a| a.starts_with("--build="))
                {
                    args.remove(0);
                }
                let o =
                    Command::new(&bin).args(&args).env("RULKA_PARSE_ONLY", "1").output().unwrap();
                if !o.status.success() {
                    let err = String::from_utf8_lossy(&o.stderr);
                    bad.push(format!("{at}\n    {}", err.lines().next().unwrap_or("(no message)")));
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} command lines found");
    assert!(
        bad.is_empty(),
        "{} command line(s) the binaries refuse:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The scripts a user runs, then those a developer runs, as the scripts
/// reference lists them.
const SCRIPTS: [(&str, &[&str]); 2] = [
    (
        "For users",
        &[
            "rulka",
            "setup.sh",
            "test",
            "docs",
            "gpu-check",
            "package-collector",
            "windows-toolchain",
        ],
    ),
    (
        "For developers",
        &[
            "mutants",
            "sweep",
            "busy",
            "games-soak",
            "bench-learning",
            "bench-pretrain",
            "bench-windows-collector",
            "limits-replay",
        ],
    ),
];

/// `docs/reference/scripts.md`: each script's own header (its comment
/// lines up to `set -euo pipefail`, which its `--help` prints too).
fn scripts_reference(r: &Path) -> String {
    let mut out = String::from(
        "# Scripts\n\n<!-- Made from the scripts' headers by cli/tests/docs.rs (RULKA_BLESS=1 rewrites it): edit the scripts. -->\n\n\
         The checkout's scripts, in `scripts/`, each as its own header says (`scripts/NAME --help` prints the same). \
         `scripts/rulka` runs the `rulka` binary of the [command-line reference](cli.md).\n",
    );
    for (part, names) in SCRIPTS {
        out.push_str(&format!("\n## {part}\n"));
        for name in names {
            let text = std::fs::read_to_string(r.join("scripts").join(name))
                .unwrap_or_else(|e| panic!("scripts/{name}: {e}"));
            let header: Vec<&str> = text
                .lines()
                .skip(1)
                .take_while(|l| !l.starts_with("set -euo"))
                .map(|l| l.strip_prefix("# ").or_else(|| l.strip_prefix('#')).unwrap_or(l))
                .collect();
            out.push_str(&format!(
                "\n### `scripts/{name}`\n\n```text\n{}\n```\n",
                header.join("\n").trim_end()
            ));
        }
    }
    out
}

#[test]
fn the_scripts_reference_is_their_headers() {
    let r = root();
    let want = scripts_reference(&r);
    let path = r.join("docs/reference/scripts.md");
    if std::env::var_os("RULKA_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/reference/scripts.md is stale: a script's header changed (RULKA_BLESS=1 cargo test -p rulka --test docs rewrites it)"
    );
    // Every script a page runs is in it, but the internal ones.
    for (page, text) in pages() {
        for b in blocks(&text).into_iter().filter(|b| matches!(b.lang.as_str(), "bash" | "sh")) {
            for line in command_lines(&b) {
                if let Some(s) = words(&line).first().and_then(|w| w.strip_prefix("scripts/")) {
                    assert!(
                        SCRIPTS.iter().any(|(_, n)| n.contains(&s)),
                        "{page}: scripts/{s} is run there but not in the scripts reference"
                    );
                }
            }
        }
    }
}

#[test]
fn the_books_first_page_is_the_readme() {
    let r = root();
    let readme = std::fs::read_to_string(r.join("README.md")).unwrap();
    let intro = std::fs::read_to_string(r.join("docs/introduction.md")).unwrap();
    let want = introduction(&readme);
    if std::env::var_os("RULKA_BLESS").is_some() {
        std::fs::write(r.join("docs/introduction.md"), &want).unwrap();
        return;
    }
    assert!(intro == want, "docs/introduction.md is not README.md with its links into docs/ (RULKA_BLESS=1 cargo test -p rulka --test docs rewrites it)");
}

/// README.md as the book's first page: links into docs/ made relative to it.
fn introduction(readme: &str) -> String {
    let body = readme.replacen("# rulka\n", "# rulka\n\n<!-- Made from README.md by cli/tests/docs.rs (RULKA_BLESS=1 rewrites it): edit the README. -->\n", 1);
    body.replace("](docs/", "](")
}

#[test]
fn the_cli_reference_is_what_the_binaries_say() {
    let r = root();
    let o = Command::new(env!("CARGO_BIN_EXE_rulka")).arg("__reference").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let made = String::from_utf8(o.stdout).unwrap();
    let path = r.join("docs/reference/cli.md");
    if std::env::var_os("RULKA_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &made).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == made,
        "docs/reference/cli.md is stale: a command or option changed (RULKA_BLESS=1 cargo test -p rulka --test docs rewrites it)"
    );
    for cmd in [
        "train",
        "collect",
        "eval",
        "gpu check",
        "sim serve",
        "tmi check",
        "config check",
        "bench inference",
    ] {
        assert!(made.contains(&format!("## `rulka {cmd}`")), "the reference has no rulka {cmd}");
    }
}

/// Every key and section the configuration reference lists.
fn config_keys() -> BTreeSet<String> {
    let reference = std::fs::read_to_string(root().join("docs/reference/config.md")).unwrap();
    let mut keys = BTreeSet::new();
    for l in reference.lines() {
        let name = l
            .strip_prefix("- **`")
            .and_then(|r| r.split('`').next())
            .or_else(|| l.strip_prefix("## `").and_then(|r| r.split('`').next()));
        if let Some(k) = name {
            let k = k.replace("[]", "");
            // A key's sections are keys a page may name too.
            let parts: Vec<&str> = k.split('.').collect();
            for i in 1..=parts.len() {
                keys.insert(parts[..i].join("."));
            }
        }
    }
    keys
}

const SECTIONS: [&str; 12] = [
    "training",
    "nn",
    "ppo",
    "grpo",
    "dpo",
    "rewards",
    "environment",
    "collectors",
    "inference",
    "state_normalization",
    "transport",
    "pretrain",
];

/// The `inline code` spans of a page's prose.
fn code_spans(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for l in md.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let parts: Vec<&str> = l.split('`').collect();
        for (i, p) in parts.iter().enumerate() {
            if i % 2 == 1 {
                out.push(p.to_string());
            }
        }
    }
    out
}

#[test]
fn every_config_key_a_page_names_is_one_the_schema_has() {
    let keys = config_keys();
    assert!(keys.contains("ppo.sil_coef") && keys.contains("environment.tmi.maps.zone_centers"));
    let mut bad = BTreeSet::new();
    for (page, text) in pages() {
        if page.ends_with("reference/config.md") {
            continue;
        }
        for span in code_spans(&text) {
            // `ppo.normalize_returns: true`, `environment.tmi.maps[0].name`: the key part.
            let word =
                span.split([':', ' ', '=', '(', ',']).next().unwrap_or("").trim_end_matches('.');
            let key: String = word
                .replace("[]", "")
                .split('[')
                .map(|p| p.split_once(']').map_or(p, |(_, r)| r))
                .collect();
            let Some(first) = key.split('.').next() else { continue };
            if !key.contains('.')
                || !SECTIONS.contains(&first)
                || key.contains('*')
                || [
                    ".rs", ".json", ".yaml", ".md", ".npy", ".onnx", ".csv", ".toml", ".svg",
                    ".py", ".log",
                ]
                .iter()
                .any(|x| key.ends_with(x))
            {
                continue;
            }
            if !keys.contains(&key) {
                bad.insert(format!("{page}: `{span}`"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} key(s) the schema does not have:\n{}",
        bad.len(),
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn every_option_a_page_names_is_one_a_binary_or_script_takes() {
    let r = root();
    let cli = std::fs::read_to_string(r.join("docs/reference/cli.md")).unwrap();
    let mut known: BTreeSet<String> = BTreeSet::new();
    for w in cli.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_')) {
        if w.starts_with("--") {
            known.insert(w.to_string());
        }
    }
    // The scripts' own options, and cargo's and the tools' the guide mentions.
    for e in std::fs::read_dir(r.join("scripts")).unwrap().flatten() {
        let t = std::fs::read_to_string(e.path()).unwrap_or_default();
        for w in t.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_')) {
            if w.starts_with("--") && w.len() > 2 {
                known.insert(w.to_string());
            }
        }
    }
    for f in [
        "--release",
        "--features",
        "--workspace",
        "--all-targets",
        "--locked",
        "--stress-count",
        "--in-place",
        "--logdir",
        "--help",
        "--version",
        "--no-fail-fast",
        // cargo-nextest's, and WSL's.
        "--shard",
        "--sharding",
        "--shutdown",
        "--test",
        "--lib",
        "--bins",
        "--package",
        "--timeout",
    ] {
        known.insert(f.to_string());
    }
    let mut bad = BTreeSet::new();
    for (page, text) in pages() {
        for span in code_spans(&text) {
            for w in span.split(|c: char| {
                c.is_whitespace()
                    || c == '|'
                    || c == '['
                    || c == ']'
                    || c == ','
                    || c == '='
                    || c == '('
                    || c == ')'
            }) {
                let w = w.trim_end_matches(['.', ':', ';']);
                if w.starts_with("--")
                    && w.len() > 2
                    && w.chars().nth(2).is_some_and(|c| c.is_ascii_lowercase())
                    && !known.contains(w)
                {
                    bad.insert(format!("{page}: {w} (in `{span}`)"));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} option(s) nothing takes:\n{}",
        bad.len(),
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
}
