//! Sibling modules depend on each other one way only, at every level: a cycle (`config` and
//! `router` reaching into each other, or `router::chain` and `router::hedge`) makes neither
//! readable nor testable alone, and each one this project had was broken on purpose.
//!
//! Read from the source: every path a file names (`crate::a::b`, `super::x`, `self::y`, in
//! `use` groups too), outside comments and test modules, resolved against the file's own
//! module path. A path from module `a::b::c` to `a::d::e` is an edge `b -> d` among the
//! children of `a`: the first place the two paths part.

// Tests and benches stop at the first surprise: unwrap, expect and panic are how they say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn sibling_modules_have_no_import_cycle_at_any_level() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let levels = levels(&src);
    let top = &levels[""];
    assert!(
        top.contains_key("router") && top.contains_key("server"),
        "{top:?}"
    );
    assert!(levels.contains_key("router"), "every level is read");
    let found: Vec<String> = levels
        .iter()
        .flat_map(|(parent, graph)| {
            cycles(graph)
                .into_iter()
                .map(move |cycle| format!("in `{parent}`: {}", cycle.join(" <-> ")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "modules that reach each other: {found:#?}"
    );
}

#[test]
fn a_cycle_is_found_however_long() {
    let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")];
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph.entry(from.into()).or_default().insert(to.into());
    }
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
    graph.get_mut("c").map(|to| to.remove("a"));
    assert!(cycles(&graph).is_empty());
}

/// A cycle planted two levels down, between `x::y::p` and `x::y::q`, through `super::` on
/// one side and `crate::` on the other, is found in `x::y`; a file's declared test module
/// (`mod tests;`) does not end its reading.
#[test]
fn a_planted_cycle_deep_down_is_found() {
    let dir = std::env::temp_dir().join(format!("switchyard-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files = [
        ("x.rs", "pub mod y;\n"),
        ("x/y.rs", "mod p;\nmod q;\n"),
        (
            "x/y/p.rs",
            "#[cfg(test)]\nmod tests;\n\nuse super::q::Thing;\n",
        ),
        (
            "x/y/q.rs",
            "pub struct Thing;\nfn f() { crate::x::y::p::g(); }\n",
        ),
        ("z.rs", "use crate::x::y::p;\n"),
    ];
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let levels = levels(&dir);
    assert_eq!(cycles(&levels["x::y"]), vec![vec!["p", "q"]]);
    assert!(cycles(&levels[""]).is_empty(), "{levels:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// For each module with children (`""` for the crate), the graph among its children.
fn levels(src: &Path) -> BTreeMap<String, Graph> {
    let modules: BTreeSet<Vec<String>> = rust_files(src)
        .iter()
        .map(|file| module_path(src, file))
        .collect();
    let mut levels: BTreeMap<String, Graph> = BTreeMap::new();
    for module in &modules {
        if let Some((_, parent)) = module.split_last() {
            let graph = levels.entry(parent.join("::")).or_default();
            graph.entry(module[module.len() - 1].clone()).or_default();
        }
    }
    for file in rust_files(src) {
        let from = module_path(src, &file);
        let text = std::fs::read_to_string(&file).expect("a source file is readable");
        for path in paths(&without_tests(&text)) {
            let Some(to) = resolve(&from, &path) else {
                continue;
            };
            // Where the two part; the target must be a module there, not an item of the parent.
            let shared = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if shared >= from.len() || shared >= to.len() {
                continue;
            }
            let sibling = to[..=shared].to_vec();
            if !modules.contains(&sibling) {
                continue;
            }
            let parent = from[..shared].join("::");
            if let Some(graph) = levels.get_mut(&parent) {
                graph
                    .entry(from[shared].clone())
                    .or_default()
                    .insert(to[shared].clone());
            }
        }
    }
    levels
}

/// `src/a/b.rs` is `[a, b]`; `lib.rs` and `main.rs` are the crate itself.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("a file under src/");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// Every `.rs` file under `dir` but test modules' own files.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for path in entries.filter_map(|entry| Some(entry.ok()?.path())) {
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "tests") {
                files.extend(rust_files(&path));
            }
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The code before a file's inline test module, without its comment lines. A declared one
/// (`mod tests;`) lives in a file of its own, which is skipped, so reading goes on past it.
fn without_tests(text: &str) -> String {
    let code = text
        .split("#[cfg(test)]\nmod tests {")
        .next()
        .unwrap_or(text);
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts at `crate`, `super` or `self`, with `use` groups spread out:
/// `super::{a::b, c}` gives `super::a::b` and `super::c`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(root) {
            // A whole word: not `my_crate::` nor `xsuper::`.
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            // `super::super::x` is read once, from its first `super`.
            if at >= 2 && &code[at - 2..at] == "::" {
                continue;
            }
            let head = root.trim_end_matches("::").to_owned();
            spread(&code[at + root.len()..], vec![head], &mut found);
        }
    }
    found
}

/// Reads one path (or group) at `text`, after the segments in `prefix`.
fn spread(text: &str, mut prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            for item in split_group(group) {
                spread(item.trim(), prefix.clone(), found);
            }
            return;
        }
        let segment = identifier(rest);
        if segment.is_empty() {
            found.push(prefix);
            return;
        }
        rest = &rest[segment.len()..];
        prefix.push(segment);
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => {
                found.push(prefix);
                return;
            }
        }
    }
}

/// The top-level items of a `{…}` group, up to its closing brace.
fn split_group(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// A path written in module `from`, as a path from the crate's root.
fn resolve(from: &[String], path: &[String]) -> Option<Vec<String>> {
    let (head, rest) = path.split_first()?;
    let mut base: Vec<String> = match head.as_str() {
        "crate" => Vec::new(),
        "self" => from.to_vec(),
        "super" => from.get(..from.len().checked_sub(1)?)?.to_vec(),
        _ => return None,
    };
    let mut segments = rest.iter();
    for segment in segments.by_ref() {
        if segment == "super" {
            base.pop()?;
        } else {
            base.push(segment.clone());
            break;
        }
    }
    base.extend(segments.cloned());
    Some(base)
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Every cycle's modules, each listed once from its least name (strongly connected
/// components of more than one module).
fn cycles(graph: &Graph) -> Vec<Vec<&str>> {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(at) = stack.pop() {
            for next in graph.get(at).into_iter().flatten() {
                if next == to {
                    return true;
                }
                if seen.insert(next.as_str()) {
                    stack.push(next);
                }
            }
        }
        false
    };
    let mut found: Vec<Vec<&str>> = Vec::new();
    for module in graph.keys() {
        if found.iter().any(|cycle| cycle.contains(&module.as_str())) {
            continue;
        }
        let cycle: Vec<&str> = graph
            .keys()
            .map(String::as_str)
            .filter(|other| other == module || (reaches(module, other) && reaches(other, module)))
            .collect();
        if cycle.len() > 1 {
            found.push(cycle);
        }
    }
    found
}
