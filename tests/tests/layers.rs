//! The module layering of `cudagraph` and `cudagraph-macros-core` (README, "Layout"): each
//! top-level module uses (`crate::module::…`, or an item the crate root re-exports from it) only
//! the modules below it in its crate's list. A new reference upward, which would make a new
//! cycle, fails here, naming the file and line; so does a new module that is not in the list.
//! Test code (`tests.rs` files and `#[cfg(test)]` items) may use any module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `cudagraph`'s modules, lowest first.
const RUNTIME: &[&str] = &[
    "plan",
    "raw",
    "flags",
    "error",
    "operand",
    "pinned",
    "array",
    "ledger",
    "session",
    "kind",
    "capture_host",
    "introspect",
    "capture",
    "cache",
    "builder",
    "lib",
];

/// References upward in `cudagraph` that stay, with why (README, "Layout"): none.
const RUNTIME_CYCLES: &[(&str, &str)] = &[];

/// `cudagraph-macros-core`'s modules, lowest first.
const MACROS: &[&str] =
    &["errors", "ast", "hygiene", "parse", "check", "expand", "programmatic", "kernels", "lib"];

#[test]
fn runtime_modules_use_only_the_modules_below_them() {
    check(&crate_src("cudagraph"), RUNTIME, RUNTIME_CYCLES);
}

#[test]
fn macro_modules_use_only_the_modules_below_them() {
    check(&crate_src("cudagraph-macros-core"), MACROS, &[]);
}

/// The scanner itself, on a made-up crate.
#[test]
fn the_scanner_finds_paths_groups_and_re_exports_and_skips_comments_strings_and_tests() {
    let lib = "mod a;\nmod b;\npub use b::{Thing, other::More};\npub use cudarc;\n";
    let a = "// crate::b::Commented\nuse crate::{b::x, Thing as T};\nconst S: &str = \"crate::b\";\n\
             fn f<'a>(c: char) -> bool { c == '\"' || c == '{' }\nfn g() { crate::More::new(); crate::cudarc::x(); }\n\
             #[cfg(test)]\nmod tests { use crate::b::Hidden; }\n";
    let refs = references(&[("lib.rs", lib), ("a.rs", a), ("b.rs", "")]);
    let found: Vec<_> = refs.iter().map(|r| (r.from.as_str(), r.to.as_str(), r.line)).collect();
    assert_eq!(found, [("a", "b", 2), ("a", "b", 2), ("a", "b", 5)]);
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

/// One reference from module `from` to module `to`.
#[derive(Debug)]
struct Ref {
    from: String,
    to: String,
    file: String,
    line: usize,
    path: String,
}

fn check(src: &Path, order: &[&str], allowed: &[(&str, &str)]) {
    let mut files = Vec::new();
    collect(src, src, &mut files);
    let texts: Vec<(String, String)> =
        files.iter().map(|f| (f.clone(), std::fs::read_to_string(src.join(f)).unwrap())).collect();
    let borrowed: Vec<(&str, &str)> = texts.iter().map(|(f, t)| (f.as_str(), t.as_str())).collect();
    let rank = |m: &str| order.iter().position(|o| *o == m);
    let mut problems = Vec::new();
    let modules: BTreeSet<String> =
        files.iter().filter(|f| !is_test_file(f)).map(|f| module_of(f)).collect();
    for m in &modules {
        if rank(m).is_none() {
            problems.push(format!("module `{m}` is not in the layer list"));
        }
    }
    let mut used = BTreeMap::<(String, String), usize>::new();
    for r in references(&borrowed) {
        let (Some(from), Some(to)) = (rank(&r.from), rank(&r.to)) else { continue };
        if to > from {
            *used.entry((r.from.clone(), r.to.clone())).or_default() += 1;
            if !allowed.contains(&(r.from.as_str(), r.to.as_str())) {
                problems.push(format!(
                    "{}:{}: `{}` uses `crate::{}`, in `{}` above it",
                    r.file, r.line, r.from, r.path, r.to
                ));
            }
        }
    }
    for (from, to) in allowed {
        if !used.contains_key(&(from.to_string(), to.to_string())) {
            problems.push(format!("`{from}` → `{to}` is listed as a cycle left but is gone"));
        }
    }
    assert!(problems.is_empty(), "layering of {}:\n{}", src.display(), problems.join("\n"));
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            out.push(rel);
        }
    }
}

/// Whether a file is a test module of its own (`#[cfg(test)] mod tests;`).
fn is_test_file(file: &str) -> bool {
    file.rsplit('/').next() == Some("tests.rs")
}

/// The top-level module a file belongs to: `lib` for `lib.rs`, `x` for `x.rs` and `x/…`.
fn module_of(file: &str) -> String {
    let first = file.split('/').next().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_string()
}

/// Every `crate::…` reference outside test code, resolved to the module it names. `files` are
/// `(path relative to src, text)`; `lib.rs`'s `pub use module::{…}` say which module a root name
/// comes from, and `pub use other_crate;` which root names are other crates (not references).
fn references(files: &[(&str, &str)]) -> Vec<Ref> {
    let modules: BTreeSet<String> = files.iter().map(|(f, _)| module_of(f)).collect();
    let mut root = BTreeMap::<String, Option<String>>::new();
    if let Some((_, lib)) = files.iter().find(|(f, _)| *f == "lib.rs") {
        let toks = tokens(lib);
        let mut i = 0;
        while i + 2 < toks.len() {
            // Only the crate root's own `pub use`s (before any inline module).
            if toks[i].0 == "mod" && toks.get(i + 2).is_some_and(|t| t.0 == "{") {
                break;
            }
            if toks[i].0 == "pub" && toks[i + 1].0 == "use" {
                let head = toks[i + 2].0.clone();
                let mut paths = Vec::new();
                use_tree(&toks, i + 2, &mut Vec::new(), &mut paths);
                for p in paths {
                    let name = p.last().unwrap().clone();
                    let from = modules.contains(&head).then(|| head.clone());
                    root.insert(name, from);
                }
            }
            i += 1;
        }
    }
    let mut out = Vec::new();
    for (file, text) in files {
        if is_test_file(file) {
            continue;
        }
        let from = module_of(file);
        let toks = tokens(text);
        let mut i = 0;
        while i < toks.len() {
            if toks[i].0 == "#" && is_cfg_test(&toks, i) {
                i = skip_item(&toks, i);
                continue;
            }
            let after_dollar = i > 0 && toks[i - 1].0 == "$";
            if toks[i].0 == "crate" && !after_dollar && toks.get(i + 1).is_some_and(|t| t.0 == "::")
            {
                let mut paths = Vec::new();
                let end = use_tree(&toks, i + 2, &mut Vec::new(), &mut paths);
                for p in paths {
                    let head = &p[0];
                    let to = if modules.contains(head) {
                        head.clone()
                    } else {
                        match root.get(head) {
                            Some(Some(m)) => m.clone(),
                            Some(None) => continue, // another crate re-exported
                            None if head == "self" => continue,
                            None => "lib".to_string(),
                        }
                    };
                    if to != from {
                        let path = p.join("::");
                        out.push(Ref {
                            from: from.clone(),
                            to,
                            file: file.to_string(),
                            line: toks[i].1,
                            path,
                        });
                    }
                }
                i = end;
                continue;
            }
            i += 1;
        }
    }
    out
}

/// Whether the attribute at `i` is `#[cfg(test)]`.
fn is_cfg_test(toks: &[(String, usize)], i: usize) -> bool {
    let want = ["#", "[", "cfg", "(", "test", ")", "]"];
    toks.len() >= i + want.len() && want.iter().zip(&toks[i..]).all(|(w, t)| t.0 == *w)
}

/// The index after the item starting at `i` (its attributes included): up to its `;` or the end
/// of its first `{ … }` block.
fn skip_item(toks: &[(String, usize)], mut i: usize) -> usize {
    while i < toks.len() && toks[i].0 == "#" {
        i = close(toks, i + 1) + 1; // past `[ … ]`
    }
    while i < toks.len() {
        match toks[i].0.as_str() {
            ";" => return i + 1,
            "{" => return close(toks, i) + 1,
            "(" | "[" => i = close(toks, i) + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index of the delimiter closing the one at `open`.
fn close(toks: &[(String, usize)], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.0.as_str() {
            "{" | "(" | "[" => depth += 1,
            "}" | ")" | "]" => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// The paths of a path or use tree starting at `i` (after `crate::`), each as its segments,
/// into `out`; returns the index after it.
fn use_tree(
    toks: &[(String, usize)],
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let base = prefix.len();
    while let Some(t) = toks.get(i) {
        if t.0 == "{" {
            let end = close(toks, i);
            i += 1;
            while i < end {
                let next = use_tree(toks, i, prefix, out);
                // Past the `,` (or a token that starts no path, such as `*`).
                i = if next == i { i + 1 } else { next };
                if toks.get(i).is_some_and(|t| t.0 == ",") {
                    i += 1;
                }
            }
            prefix.truncate(base);
            return end + 1;
        }
        if t.0.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_') {
            prefix.push(t.0.clone());
            i += 1;
            if toks.get(i).is_some_and(|t| t.0 == "::") {
                i += 1;
                continue;
            }
        }
        break;
    }
    if prefix.len() > base {
        out.push(prefix.clone());
    }
    if toks.get(i).is_some_and(|t| t.0 == "as") {
        i += 2; // `as name`
    }
    prefix.truncate(base);
    i
}

/// The tokens of Rust source with their line numbers: identifiers and single punctuation
/// characters (`::` as one), without comments, string and character literals or lifetimes.
fn tokens(text: &str) -> Vec<(String, usize)> {
    let c: Vec<char> = text.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, x)| c.get(i + k) == Some(&x));
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if at(i, "//") {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(i, "/*") {
            let mut depth = 0;
            while i < c.len() {
                if at(i, "/*") {
                    depth += 1;
                    i += 2;
                } else if at(i, "*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == 'r' && (at(i, "r\"") || at(i, "r#")) && !ident_before(&c, i) {
            // A raw string: r"…" or r#"…"#.
            let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                i += 1; // a raw identifier `r#name`
                continue;
            }
            let end: String =
                std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            i += 2 + hashes;
            while i < c.len() && !at(i, &end) {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            i += end.len();
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                line += usize::from(c[i] == '\n');
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '\'' {
            // A character literal ('x', '\n', '\u{…}') or a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((c[start..i].iter().collect(), line));
        } else if at(i, "::") {
            out.push(("::".to_string(), line));
            i += 2;
        } else {
            out.push((ch.to_string(), line));
            i += 1;
        }
    }
    out
}

/// Whether an identifier character comes just before `i` (so `r` there is part of a name).
fn ident_before(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}
