//! The crate's top-level modules depend on each other one way only: a cycle (`config` and
//! `router` reaching into each other, say) makes neither readable nor testable alone, and
//! each one this project had was broken on purpose. Read from the source: every `crate::x`
//! path, grouped `use crate::{x, y}` included, outside comments and test modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn top_level_modules_have_no_import_cycle() {
    let graph = graph(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").as_path());
    assert!(
        graph.contains_key("router") && graph.contains_key("server"),
        "{graph:?}"
    );
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "modules that reach each other: {cycles:?}"
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

/// Each top-level module (`src/x.rs` with `src/x/`) and the others its code names.
fn graph(src: &Path) -> Graph {
    let modules: BTreeSet<String> = std::fs::read_dir(src)
        .expect("src/ is readable")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".rs").map(str::to_owned))
        .filter(|name| name != "lib" && name != "main")
        .collect();
    let mut graph = Graph::new();
    for module in &modules {
        let mut files = vec![src.join(format!("{module}.rs"))];
        files.extend(rust_files(&src.join(module)));
        let named = graph.entry(module.clone()).or_default();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file is readable");
            for other in crate_paths(&without_tests(&text)) {
                if other != *module && modules.contains(&other) {
                    named.insert(other);
                }
            }
        }
    }
    graph
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for path in entries.filter_map(|entry| Some(entry.ok()?.path())) {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            files.push(path);
        }
    }
    files
}

/// The code before a file's test module, without its comment lines.
fn without_tests(text: &str) -> String {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every `crate::` path: `crate::x::y` and `crate::{x::y, z}` name
/// `x` (and `z`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_ascii_lowercase() || c == '_') => {
                        names.insert(identifier(&group[i..]));
                        item_start = false;
                    }
                    c if !c.is_whitespace() => item_start = false,
                    _ => {}
                }
            }
        } else {
            names.insert(identifier(rest));
        }
    }
    names
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
