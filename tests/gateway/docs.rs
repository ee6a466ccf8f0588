//! The documentation matches the code: the configuration reference lists exactly the keys the
//! config types accept, with a type, a default and a meaning each, and the troubleshooting page
//! explains every error code the gateway emits.
//!
//! Both lists come from the code, never from a list kept by hand. The config's keys are read
//! from the config loader itself: every section is `deny_unknown_fields`, so offering it an
//! unknown key makes serde name every key it does accept. The error codes are read from the
//! source, where each is written once: the `kind()` of each error type, the codes of a
//! stream's error events, and the literal codes of error bodies.

use std::collections::BTreeSet;
use std::path::Path;

use switchyard::config::Config;

const PROBE: &str = "__probe__";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// One step down a config path: a key, and whether it holds an array of tables.
#[derive(Clone)]
struct Step {
    key: String,
    array: bool,
}

/// A config whose only key is the probe, at the end of `path`.
fn probe_config(path: &[Step]) -> String {
    let table =
        |key: String, value: toml::Value| toml::Value::Table([(key, value)].into_iter().collect());
    let mut value = table(PROBE.to_owned(), toml::Value::Integer(1));
    for step in path.iter().rev() {
        let inner = if step.array {
            toml::Value::Array(vec![value])
        } else {
            value
        };
        value = table(step.key.clone(), inner);
    }
    toml::to_string(&value).unwrap()
}

/// The keys the table at `path` accepts, if it is a table that refuses unknown keys.
fn keys_at(path: &[Step]) -> Option<Vec<String>> {
    let error = Config::parse(&probe_config(path)).err()?.to_string();
    let unknown = format!("unknown field `{PROBE}`");
    let at = error.find(&unknown)?;
    let rest = &error[at + unknown.len()..];
    let expected = rest.lines().next().unwrap_or("");
    // serde: "expected one of `a`, `b`", "expected `a`", or "there are no fields".
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Every key the config accepts, as the reference writes them (`routes[].steps[].model`),
/// below the top-level sections, which are the reference's headings.
fn code_keys() -> BTreeSet<String> {
    fn walk(path: &mut Vec<Step>, found: &mut BTreeSet<String>) {
        let Some(keys) = keys_at(path) else { return };
        for key in keys {
            let mut child = None;
            for array in [false, true] {
                path.push(Step {
                    key: key.clone(),
                    array,
                });
                if keys_at(path).is_some() {
                    child = Some(path.clone());
                }
                path.pop();
                if child.is_some() {
                    break;
                }
            }
            let name = |steps: &[Step]| {
                steps
                    .iter()
                    .map(|s| format!("{}{}", s.key, if s.array { "[]" } else { "" }))
                    .collect::<Vec<_>>()
                    .join(".")
            };
            match child {
                Some(mut nested) => {
                    // A nested table is listed by its key (`routes[].steps`); its `[]`
                    // belongs to the keys below it.
                    if !path.is_empty() {
                        found.insert(name(&nested).trim_end_matches("[]").to_owned());
                    }
                    walk(&mut nested, found);
                }
                None => {
                    let mut leaf = path.clone();
                    leaf.push(Step { key, array: false });
                    found.insert(name(&leaf));
                }
            }
        }
    }
    let mut found = BTreeSet::new();
    walk(&mut Vec::new(), &mut found);
    found
}

/// The reference's rows: `| key | type | default | meaning |`, after its heading.
fn reference_rows() -> Vec<Vec<String>> {
    let text = read("docs/src/configuration.md");
    let start = text
        .find("## The reference")
        .expect("configuration.md has a section `## The reference`");
    text[start..]
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            line.trim()
                .trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn the_probe_reads_the_config_types() {
    let keys = code_keys();
    // If serde's wording changed, the walk would find nothing and the test below would pass
    // vacuously; these keys sit at every depth the walk goes to.
    for key in [
        "server.listen",
        "routes[].steps[].deployments[].weight",
        "providers[].health_check.every",
        "otel.headers_env",
        "auth.direct_models",
    ] {
        assert!(keys.contains(key), "the probe misses `{key}`: {keys:?}");
    }
}

#[test]
fn the_configuration_reference_lists_every_key_and_only_those() {
    let code = code_keys();
    let rows = reference_rows();
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &rows {
        let key = row[0].trim_matches('`').to_owned();
        if row.len() != 4 || row.iter().any(String::is_empty) {
            problems.push(format!(
                "`{key}`: a row needs a type, a default and a meaning: {row:?}"
            ));
        }
        if !documented.insert(key.clone()) {
            problems.push(format!("`{key}` is listed twice"));
        }
    }
    for key in code.difference(&documented) {
        problems.push(format!(
            "`{key}` is accepted by the config but missing from docs/src/configuration.md"
        ));
    }
    for key in documented.difference(&code) {
        problems.push(format!(
            "`{key}` is in docs/src/configuration.md but the config refuses it"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Rust source without its test modules, which emit nothing to users.
fn shipped_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // The fake provider plays the upstreams; its errors are theirs, not the gateway's.
            if path.is_dir() && !path.ends_with("src/fake") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let shipped = match text.find("#[cfg(test)]\nmod tests") {
                    Some(at) => text[..at].to_owned(),
                    None => text,
                };
                files.push((path.display().to_string(), shipped));
            }
        }
    }
    files
}

/// The string literals of `text` that look like codes (`snake_case`).
fn code_literals(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            !s.is_empty()
                && s.starts_with(|c: char| c.is_ascii_lowercase())
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

/// The arguments of the call whose name ends at `open` (the index of its `(`), split at
/// their top-level commas.
fn call_args(text: &str, open: usize) -> Vec<&str> {
    let mut args = Vec::new();
    let (mut depth, mut from) = (0usize, open + 1);
    let mut in_string = false;
    let mut previous = ' ';
    for (offset, c) in text[open..].char_indices() {
        let at = open + offset;
        if c == '"' && previous != '\\' {
            in_string = !in_string;
        }
        previous = c;
        if in_string {
            continue;
        }
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 1 => {
                args.push(text[from..at].trim());
                break;
            }
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 1 => {
                args.push(text[from..at].trim());
                from = at + 1;
            }
            _ => {}
        }
    }
    args.retain(|a| !a.is_empty());
    args
}

/// `const NAME: &str = "value";` in `text`, for codes named by a constant.
fn str_const(text: &str, name: &str) -> Option<String> {
    let at = text.find(&format!("const {name}: &str = \""))?;
    code_literals(&text[at..]).into_iter().next()
}

/// The functions that write an error body or event, and for each of their definitions the
/// number of parameters and which one is the code: read from the definitions themselves.
fn code_parameters(sources: &[(String, String)]) -> Vec<(&'static str, usize, usize)> {
    let mut found = Vec::new();
    for name in ["error_body", "error_event", "stream_error_event"] {
        for (_, text) in sources {
            for (at, _) in text.match_indices(&format!("fn {name}(")) {
                let open = at + "fn ".len() + name.len();
                let params: Vec<&str> = call_args(text, open)
                    .into_iter()
                    .filter(|p| !p.ends_with("self"))
                    .collect();
                if let Some(index) = params.iter().position(|p| p.starts_with("code:")) {
                    found.push((name, params.len(), index));
                }
            }
        }
    }
    found
}

/// Every `code` the gateway puts in an error body, an error event or a failure class.
fn emitted_codes() -> BTreeSet<String> {
    let sources = shipped_sources();
    let writers = code_parameters(&sources);
    let mut codes = BTreeSet::new();
    for (_, text) in &sources {
        // Each error type's `kind()`: its match arms' names.
        for (at, _) in text.match_indices("fn kind(") {
            let body = &text[at..];
            let end = body.find("\n    }\n").unwrap_or(body.len());
            for arm in body[..end].split("=> ").skip(1) {
                codes.extend(code_literals(arm).into_iter().take(1));
            }
        }
        // A stream that fails midway: `self.fail(class, "code", message)`.
        for (at, _) in text.match_indices("self.fail(") {
            let args = call_args(text, at + "self.fail".len());
            if let Some(code) = args.get(1) {
                codes.extend(code_literals(code));
            }
        }
        // Error bodies and events: the argument in the `code` parameter's place, a literal
        // (or `Some` of one) or a constant.
        for (name, arity, index) in &writers {
            for (at, _) in text.match_indices(&format!("{name}(")) {
                let before = &text[..at];
                if before.ends_with("fn ")
                    || before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                {
                    continue;
                }
                let args = call_args(text, at + name.len());
                if args.len() != *arity {
                    continue;
                }
                let arg = args[*index];
                codes.extend(code_literals(arg));
                codes.extend(str_const(text, arg));
            }
        }
        // A code chosen before the call: `let code = …;` (not what it is compared with).
        for (at, _) in text.match_indices("let code = ") {
            let end = text[at..].find(';').map_or(text.len(), |e| at + e);
            for (i, piece) in text[at..end].split("== ").enumerate() {
                let skip = usize::from(i > 0 && piece.starts_with('"'));
                codes.extend(code_literals(piece).into_iter().skip(skip));
            }
        }
        // An answer chosen by status: `(StatusCode::X, "code", …)`.
        for (at, _) in text.match_indices("StatusCode::") {
            if !text[..at].trim_end().ends_with('(') {
                continue;
            }
            let rest = &text[at..];
            if let Some(comma) = rest.find(',') {
                let next = rest[comma + 1..].trim_start();
                if next.starts_with('"') {
                    codes.extend(code_literals(next).into_iter().take(1));
                }
            }
        }
    }
    codes
}

#[test]
fn troubleshooting_explains_every_error_code_the_gateway_emits() {
    let codes = emitted_codes();
    // The scan must keep finding codes of every kind it reads.
    for known in [
        "log_full",
        "budget_exceeded",
        "circuit_open",
        "truncated",
        "stream_idle_timeout",
        "too_many_connections",
        "untranslatable_field",
        "config_invalid",
        "upstream_error",
        "shutting_down",
    ] {
        assert!(
            codes.contains(known),
            "the scan misses `{known}`: {codes:?}"
        );
    }
    let page = read("docs/src/troubleshooting.md");
    let missing: Vec<_> = codes
        .iter()
        .filter(|code| !page.contains(&format!("`{code}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/src/troubleshooting.md does not explain: {missing:?}"
    );
}
