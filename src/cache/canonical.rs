//! A JSON body's canonical form for the cache key: the body with the whitespace between
//! tokens taken out and every object's keys in byte order, in one pass over its bytes.
//!
//! Two bodies have the same form when they differ only in whitespace or in the order of an
//! object's keys. Strings and numbers are kept as written (`"\u0041"` is not `"A"`, `1.0` is
//! not `1`): a client that resends a request writes them the same way, and reading them
//! would cost a parse. The form is itself compact JSON.
//!
//! Hand-made rather than serde's: written from serde_json's parser (without a tree, strings
//! borrowed) the form cost 78,800 instructions for a 4 KB body, most of a cache hit; this
//! pass costs 31,300 (docs/src/development.md, "Dependencies, and why").

use std::ops::Range;

/// How deep arrays and objects may nest, as the request body's own check allows.
const MAX_DEPTH: usize = 128;

/// The canonical form of `body`, a JSON object, leaving out its top-level fields named in
/// `ignored`; `None` when it is not one well-formed JSON object.
#[cfg(test)]
pub fn canonical(body: &[u8], ignored: &[&str]) -> Option<Vec<u8>> {
    append_canonical(Vec::with_capacity(body.len()), body, ignored)
}

/// The canonical form of `body`, a JSON object, leaving out its top-level fields named in
/// `ignored`, written after what `out` holds already; `None` when `body` is not one
/// well-formed JSON object. It reads a body that passed the request's own check
/// ([`crate::providers::RequestBody::parse`]), so it finds the tokens' bounds without
/// checking every byte again: a control character inside a string goes unnoticed.
pub fn append_canonical(out: Vec<u8>, body: &[u8], ignored: &[&str]) -> Option<Vec<u8>> {
    let mut form = Form { body, at: 0, out };
    form.space();
    if form.peek() != Some(b'{') {
        return None;
    }
    form.object(0, ignored)?;
    form.space();
    (form.at == body.len()).then_some(form.out)
}

struct Form<'a> {
    body: &'a [u8],
    at: usize,
    out: Vec<u8>,
}

impl Form<'_> {
    fn peek(&self) -> Option<u8> {
        self.body.get(self.at).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.space();
        (self.peek() == Some(byte)).then(|| self.at += 1)
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        self.space();
        match self.peek()? {
            b'{' => self.object(depth + 1, &[]),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.body[self.at..].starts_with(word).then_some(())?;
        self.out.extend_from_slice(word);
        self.at += word.len();
        Some(())
    }

    fn number(&mut self) -> Option<()> {
        let start = self.at;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.at += 1;
        }
        let number = &self.body[start..self.at];
        // Only the characters of a number; the body's own check has read it as one.
        std::str::from_utf8(number).ok()?.parse::<f64>().ok()?;
        self.out.extend_from_slice(number);
        Some(())
    }

    /// Copies a string as written, quotes included; its bytes in `out`.
    fn string(&mut self) -> Option<Range<usize>> {
        let start = self.out.len();
        let from = self.at;
        self.at += 1;
        loop {
            let rest = &self.body[self.at..];
            // Control characters are not looked for: the body's own check refused them.
            let stop = memchr::memchr2(b'"', b'\\', rest)?;
            self.at += stop + 1;
            if rest[stop] == b'"' {
                break;
            }
            // An escape: the byte after the backslash is part of it, even a quote.
            self.peek()?;
            self.at += 1;
        }
        self.out.extend_from_slice(&self.body[from..self.at]);
        Some(start..self.out.len())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.out.push(b'[');
        self.space();
        if self.peek() == Some(b']') {
            self.at += 1;
            self.out.push(b']');
            return Some(());
        }
        loop {
            self.value(depth)?;
            self.space();
            match self.peek()? {
                b',' => {
                    self.at += 1;
                    self.out.push(b',');
                }
                b']' => {
                    self.at += 1;
                    self.out.push(b']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Writes an object's fields as they come, noting where each key and field lie in
    /// `out`; then, unless they came in key order, writes them again in that order.
    fn object(&mut self, depth: usize, ignored: &[&str]) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.out.push(b'{');
        let start = self.out.len();
        // Each field's key (quotes included) and whole text, as ranges of `out`.
        let mut fields: Vec<(Range<usize>, Range<usize>)> = Vec::new();
        self.space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            self.out.push(b'}');
            return Some(());
        }
        loop {
            self.space();
            if self.peek() != Some(b'"') {
                return None;
            }
            let before_comma = self.out.len();
            if !fields.is_empty() {
                self.out.push(b',');
            }
            let field_start = self.out.len();
            let key = self.string()?;
            self.expect(b':')?;
            self.out.push(b':');
            self.value(depth)?;
            let name = &self.out[key.start + 1..key.end - 1];
            if ignored.iter().any(|i| i.as_bytes() == name) {
                self.out.truncate(before_comma);
            } else {
                fields.push((key, field_start..self.out.len()));
            }
            self.space();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
        }
        let in_order = fields
            .windows(2)
            .all(|pair| self.out[pair[0].0.clone()] <= self.out[pair[1].0.clone()]);
        if !in_order {
            let written = self.out.split_off(start);
            let at = |range: &Range<usize>| range.start - start..range.end - start;
            fields.sort_by(|a, b| written[at(&a.0)].cmp(&written[at(&b.0)]));
            for (i, (_, field)) in fields.iter().enumerate() {
                if i > 0 {
                    self.out.push(b',');
                }
                self.out.extend_from_slice(&written[at(field)]);
            }
        }
        self.out.push(b'}');
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn form(text: &str) -> String {
        String::from_utf8(canonical(text.as_bytes(), &[]).unwrap()).unwrap()
    }

    #[test]
    fn whitespace_and_key_order_do_not_matter() {
        let compact = r#"{"a":1,"b":[true,null,"x"],"c":{"d":2.5,"e":"y \" }"}}"#;
        assert_eq!(form(compact), compact);
        assert_eq!(
            form(
                " { \"c\" : { \"e\":\"y \\\" }\", \"d\":2.5 },\n \"b\":[ true, null, \"x\" ], \"a\":1 } "
            ),
            compact
        );
    }

    #[test]
    fn what_differs_in_value_or_structure_differs() {
        let pairs = [
            (r#"{"a":{"b":1},"c":2}"#, r#"{"a":{"b":1,"c":2}}"#),
            (r#"{"a":["b","c"]}"#, r#"{"a":["bc"]}"#),
            (r#"{"a":"1"}"#, r#"{"a":1}"#),
            (r#"{"a":[]}"#, r#"{"a":{}}"#),
            (r#"{"a":null}"#, r#"{}"#),
            (r#"{"a":"A"}"#, r#"{"a":"B"}"#),
        ];
        for (one, other) in pairs {
            assert_ne!(form(one), form(other), "{one} vs {other}");
        }
    }

    #[test]
    fn only_one_well_formed_json_object_has_a_form() {
        for text in [
            "[1]",
            "\"a\"",
            "{",
            "{} {}",
            "{\"a\":}",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{a:1}",
            "{\"a\":tru}",
            "{\"a\":\"x}",
            "{\"a\":[1,]}",
            "{\"a\":--}",
        ] {
            assert_eq!(canonical(text.as_bytes(), &[]), None, "{text}");
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(canonical(deep.as_bytes(), &[]), None, "too deep");
    }

    #[test]
    fn top_level_fields_named_are_left_out_and_nested_ones_kept() {
        let form = |text: &str| canonical(text.as_bytes(), &["stream", "user"]);
        assert_eq!(
            form(r#"{"stream":true,"a":1,"user":"u","b":{"stream":1}}"#),
            form(r#"{"a":1,"b":{"stream":1}}"#),
        );
        assert_eq!(form(r#"{"stream":true}"#), form("{}"));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z\u{e9}\"\\\\ ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// `value` as JSON text with every object's keys in reverse order and spaces around.
    fn reversed(value: &Value) -> String {
        match value {
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(reversed).collect();
                format!("[ {} ]", items.join(" , "))
            }
            Value::Object(map) => {
                let fields: Vec<String> = map
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("{} :\t{}", Value::from(k.as_str()), reversed(v)))
                    .collect();
                format!("{{\n{}\n}}", fields.join(",\n"))
            }
            other => other.to_string(),
        }
    }

    proptest! {
        /// The form of any writing of a tree is serde_json's compact text of it (whose
        /// maps are sorted by key), so two bodies share a form exactly when serde_json
        /// reads them as the same tree.
        #[test]
        fn a_form_is_the_sorted_compact_text(
            fields in prop::collection::btree_map("[a-d]{1,2}", json_value(), 0..4),
        ) {
            let value = Value::Object(fields.into_iter().collect());
            let compact = value.to_string();
            prop_assert_eq!(form(&reversed(&value)), compact.clone());
            prop_assert_eq!(form(&serde_json::to_string_pretty(&value).unwrap()), compact);
        }
    }
}
