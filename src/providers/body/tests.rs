use super::*;

fn parsed(text: &str) -> RequestBody {
    RequestBody::parse(Bytes::copy_from_slice(text.as_bytes())).unwrap()
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn only_one_whole_json_object_parses() {
    for bad in [
        "[1]",
        "\"x\"",
        "1",
        "{",
        "{\"a\":1} x",
        "{\"a\":[1,}",
        "",
        "{\"a\":\"\u{0}\"}",
    ] {
        assert!(RequestBody::parse(Bytes::from(bad)).is_err(), "{bad:?}");
    }
    // Nested values are checked too, though none of them is built.
    assert!(RequestBody::parse(Bytes::from_static(b"{\"m\":[{\"a\":tru}]}")).is_err());
    assert!(RequestBody::parse(Bytes::from_static(b"{\"m\":\"\xff\"}")).is_err());
    // Checked once up front, and said so with where.
    let error = RequestBody::parse(Bytes::from_static(b"{\"m\":\"ok\xff\"}")).err();
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("invalid UTF-8 at byte 8"), "{message}");
    // Past the SIMD check's first blocks, in a truncated 4-byte character, too.
    let mut long = format!("{{\"m\":\"{}", "é".repeat(400)).into_bytes();
    let at = long.len();
    long.extend_from_slice(b"\xf0\x9f\x98\"}");
    let error = RequestBody::parse(Bytes::from(long)).err();
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains(&format!("invalid UTF-8 at byte {at}")),
        "{message}"
    );
}

#[test]
fn reads_top_level_fields_without_building_them() {
    let body = parsed(
        r#" { "model" : "gpt" , "stream":true, "messages":[ ],"n":2,"o":{"a":1},"s":null }"#,
    );
    assert_eq!(body.raw_field("model"), Some(r#""gpt""#));
    assert_eq!(body.field_as::<String>("model").as_deref(), Some("gpt"));
    assert_eq!(body.field_kind("stream"), Some(JsonKind::Bool));
    assert_eq!(body.field_kind("messages"), Some(JsonKind::Array));
    assert!(body.is_empty_array("messages"));
    assert_eq!(body.field_kind("n"), Some(JsonKind::Number));
    assert_eq!(body.field_kind("o"), Some(JsonKind::Object));
    assert_eq!(body.field_kind("s"), Some(JsonKind::Null));
    assert_eq!(body.field_kind("absent"), None);
    assert!(body.tree.get().is_none(), "nothing read the tree");
    assert_eq!(
        body.get("n"),
        Some(&Value::from(2)),
        "the tree, on first use"
    );
}

#[test]
fn a_repeated_name_reads_as_its_last_value_and_is_never_spliced() {
    let body = parsed(r#"{"model":"a","model":"b"}"#);
    assert_eq!(body.field_as::<String>("model").as_deref(), Some("b"));
    assert_eq!(body.get("model"), Some(&Value::from("b")));
    assert!(body.with_fields(&[("model", "\"c\"")]).is_none());
}

#[test]
fn escaped_names_are_the_names_they_spell() {
    let body = parsed(r#"{"mo\u0064el":"a"}"#);
    assert_eq!(body.field_as::<String>("model").as_deref(), Some("a"));
    let out = body.with_fields(&[("model", "\"b\"")]).unwrap();
    assert_eq!(json(&out.to_bytes()), serde_json::json!({"model": "b"}));
}

#[test]
fn a_splice_changes_only_the_fields_it_sets() {
    let text = "{\"messages\":[{\"role\":\"user\",\"content\":\"model: \\\"x\\\" caf\u{e9} \\u00e9\",\"model\":\"inner\"}],\n  \"model\" :\t\"route\" , \"temperature\":0.20}";
    let body = parsed(text);
    let out = body.with_fields(&[("model", "\"gpt-4o\"")]).unwrap();
    // The client's bytes are shared, not copied: before the value, the value, after it.
    assert_eq!(format!("{out:?}"), "[97, 8, 22]");
    assert_eq!(
        std::str::from_utf8(&out.to_bytes()).unwrap(),
        text.replace("\"route\"", "\"gpt-4o\""),
        "every other byte as it came, nested `model` keys included"
    );
}

#[test]
fn absent_fields_are_added_at_the_front() {
    let body = parsed(r#"  {"model":"a","messages":[]}"#);
    let out = body
        .with_fields(&[
            ("model", "\"b\""),
            ("max_tokens", "1024"),
            ("stream", "true"),
        ])
        .unwrap();
    assert_eq!(
        std::str::from_utf8(&out.to_bytes()).unwrap(),
        r#"  {"max_tokens":1024,"stream":true,"model":"b","messages":[]}"#
    );
    let empty = parsed("{ }")
        .with_fields(&[("a", "1"), ("b", "2")])
        .unwrap();
    assert_eq!(json(&empty.to_bytes()), serde_json::json!({"a": 1, "b": 2}));
}

#[test]
fn a_body_built_in_code_keeps_its_tree() {
    let mut tree = Map::new();
    tree.insert("model".into(), Value::from("m"));
    let body = RequestBody::from(tree.clone());
    assert_eq!(*body, tree);
    assert_eq!(body.raw_field("model"), Some("\"m\""));
}

#[test]
fn whatever_the_tree_refuses_is_refused_up_front() {
    // serde_json's raw values skip over a check a tree makes: a lone surrogate escape. A body
    // a translation could not read is a 400 here, never an empty conversation sent on.
    for bad in [
        r#"{"a":"\ud800"}"#,
        r#"{"a":"x\udc00y"}"#,
        r#"{"a":"\ud800\u0041"}"#,
        r#"{"m":[{"c":"\uDBFF"}]}"#,
        r#"{"a\udfff":1}"#,
    ] {
        assert!(
            serde_json::from_str::<Map<String, Value>>(bad).is_err(),
            "{bad}: serde_json refuses it as a tree"
        );
        assert!(RequestBody::parse(Bytes::from(bad)).is_err(), "{bad}");
    }
    for good in [
        r#"{"a":"\ud83d\ude00"}"#,
        r#"{"a":"\\ud800"}"#,
        r#"{"a":"\\\\\ud83d\ude00"}"#,
        r#"{"a":1e300,"b":"e400"}"#,
        r#"{"a":12345678901234567890123}"#,
    ] {
        let tree: Map<String, Value> = serde_json::from_str(good).unwrap();
        assert_eq!(parsed(good).tree(), &tree, "{good}");
    }
}

#[test]
fn a_tree_the_bytes_cannot_make_is_reported_not_read_as_empty() {
    // A number past a float's range is valid JSON that raw values take and a tree refuses;
    // checking every number up front would cost each request, so a translation finds out.
    let body = parsed(r#"{"model":"m","messages":[{"role":"user","content":"hi","n":1e400}]}"#);
    assert_eq!(body.raw_field("model"), Some("\"m\""));
    assert_eq!(body.unreadable(), None, "nothing asked for the tree yet");
    let _ = body.tree();
    let why = body.unreadable().expect("the tree could not be built");
    assert!(why.contains("number out of range"), "{why}");
    assert_eq!(parsed(r#"{"a":1}"#).unreadable(), None);
    let read = parsed(r#"{"a":1}"#);
    let _ = read.tree();
    assert_eq!(read.unreadable(), None);
}

/// The fast check and serde_json agree: the same fields, or both refuse with serde_json's
/// words.
fn assert_both_read(text: &[u8]) {
    let fast = RequestBody::parse(Bytes::copy_from_slice(text));
    let serde = RequestBody::parse_by_serde(Bytes::copy_from_slice(text));
    match (fast, serde) {
        (Ok(fast), Ok(serde)) => {
            assert_eq!(
                fast.layout(),
                serde.layout(),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
        (Err(fast), Err(serde)) => assert_eq!(fast.to_string(), serde.to_string()),
        (fast, serde) => panic!(
            "{:?}: fast {:?}, serde_json {:?}",
            String::from_utf8_lossy(text),
            fast.err().map(|e| e.to_string()),
            serde.err().map(|e| e.to_string())
        ),
    }
}

#[test]
fn the_fast_check_reads_what_serde_json_reads() {
    let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
    let cases = [
        r#"{}"#,
        " \t\r\n{ } \n",
        r#"{"model":"gpt","messages":[{"role":"user","content":"hi\nthere \"you\" \\ \/ \b\f\r\t \u00e9 \uD83D\uDE00"}]}"#,
        r#"{"a":-0,"b":0.5,"c":-12.25e+10,"d":1E-3,"e":1e400,"f":[true,false,null],"g":{}}"#,
        r#"{"m\u006fdel":"x","model":"y"}"#,
        r#"{"a":"é ünï ✓ 😀"}"#,
        r#"{"a":01}"#,
        r#"{"a":1.}"#,
        r#"{"a":.5}"#,
        r#"{"a":1e}"#,
        r#"{"a":-}"#,
        r#"{"a":+1}"#,
        r#"{"a":[1,]}"#,
        r#"{"a":1,}"#,
        r#"{"a" 1}"#,
        r#"{"a":tru}"#,
        r#"{"a":nul}"#,
        r#"{"a":"\x"}"#,
        r#"{"a":"\u12G4"}"#,
        r#"{"a":"\u12"}"#,
        "{\"a\":\"tab\there\"}",
        "{\"a\":\"nul\u{0}\"}",
        "{\"a\":\"del\u{7f}\"}",
        r#"{"a":"\uD800"}"#,
        r#"{"\uD800":1}"#,
        // Where an unpaired surrogate is reported: the high one, or what follows it.
        r#"{"a":"\ud83d\u00e9"}"#,
        r#"{"a":"\ud83d\ud83d\ude00"}"#,
        r#"{"a":"\ud83d x\ude00"}"#,
        r#"{"a":"\ud83d\\ude00"}"#,
        r#"{"a":"\\\ud83d\ude00\udc00"}"#,
        r#"{"a":"\u00e9\ude00","b":"\ud83d"}"#,
        r#"{"a":"unterminated}"#,
        r#"{"a":1}{"b":2}"#,
        r#"{"a":1} x"#,
        r#"[1]"#,
        r#""a""#,
        "",
        "{",
        "\u{feff}{}",
        r#"{a:1}"#,
        r#"{'a':1}"#,
    ];
    for case in cases {
        assert_both_read(case.as_bytes());
    }
    for depth in [1, 98, 99, 100, 101, 126, 127, 128, 129, 200] {
        assert_both_read(deep(depth).as_bytes());
    }
}

#[test]
fn the_fast_check_takes_ordinary_bodies_itself() {
    // Were it to hand every body to serde_json, the agreement above would prove nothing.
    let body = r#" {"mod\u0065l":"m", "messages":[{"content":"a\nb"}], "n":-1.5e3 } "#;
    let scanned = scan::top_level_fields(body).unwrap();
    assert!(scanned.unicode_escapes);
    let fields = scanned.fields;
    let names: Vec<&str> = fields.iter().map(|(name, _)| &**name).collect();
    assert_eq!(names, ["model", "messages", "n"]);
    assert_eq!(&body[fields[2].1.clone()], "-1.5e3");
    assert!(
        scan::top_level_fields(&format!("{{\"a\":{}{}}}", "[".repeat(99), "]".repeat(99)))
            .is_some()
    );
    assert!(scan::top_level_fields(r#"{"a":01}"#).is_none());
    let plain = scan::top_level_fields(r#"{"a":"\\u0041 is not an escape"}"#).unwrap();
    assert!(!plain.unicode_escapes, "an escaped backslash then `u`");
}

proptest::proptest! {
    /// Bodies spliced from JSON's pieces, well formed or not, read the same both ways.
    #[test]
    fn any_token_soup_reads_the_same_both_ways(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "{", "}", "[", "]", ":", ",", " ", "\n", "\"", "\\", "\\u", "\\n", "\\\"", "00", "0",
            "1", "-", ".", "e", "+", "true", "fals", "null", "a", "é", "\u{1}", "\"k\":", "{\"a\":",
            "\"v\"", "D83D", "\\uDE00",
        ]), 0..40),
    ) {
        let text = format!("{{\"m\":{}}}", pieces.concat());
        assert_both_read(text.as_bytes());
        assert_both_read(pieces.concat().as_bytes());
    }

    /// Strings long enough to span blocks, with runs of backslashes wherever the blocks cut
    /// them, read the same both ways; without a flaw, by the fast check itself.
    #[test]
    fn escapes_across_blocks_read_the_same_both_ways(
        offset in 0usize..64,
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "\\\\", "\\\\\\\\", "\\\"", "\\n", "\\u00e9", "\\ud83d\\ude00", "\\/",
            "\\\\\\\"", "plain text of a message, ", "é",
        ]), 0..60),
        flaw in proptest::option::of((
            proptest::sample::select(vec!["\\", "\\x", "\"", "\n", "\\u12", "\\\u{1}"]),
            0usize..60,
        )),
    ) {
        let mut pieces = pieces;
        if let Some((flaw, at)) = flaw {
            pieces.insert(at.min(pieces.len()), flaw);
        }
        let text = format!("{{\"pad\":\"{}\",\"m\":\"{}\"}}", "p".repeat(offset), pieces.concat());
        assert_both_read(text.as_bytes());
        if flaw.is_none() {
            proptest::prop_assert!(scan::top_level_fields(&text).is_some(), "{}", text);
        }
    }
}

/// The search for lone surrogates before it looked for surrogates only: it visited every
/// `\u` escape. Kept as the reference the search is held to.
fn lone_surrogate_visiting_every_escape(raw: &[u8]) -> Option<usize> {
    let mut awaiting_low = false;
    let mut last_end = 0;
    for at in memchr::memmem::find_iter(raw, b"\\u") {
        let run = raw[..=at].iter().rev().take_while(|&&b| b == b'\\').count();
        if run % 2 == 0 {
            continue;
        }
        let unit = raw
            .get(at + 2..at + 6)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())?;
        let adjacent = at == last_end;
        match unit {
            0xD800..=0xDBFF if awaiting_low => return Some(at),
            0xD800..=0xDBFF => awaiting_low = true,
            0xDC00..=0xDFFF if awaiting_low && adjacent => awaiting_low = false,
            0xDC00..=0xDFFF => return Some(at),
            _ if awaiting_low => return Some(at),
            _ => {}
        }
        last_end = at + 6;
        if awaiting_low && raw.get(last_end..last_end + 2) != Some(b"\\u") {
            return Some(at);
        }
    }
    None
}

proptest::proptest! {
    /// Looking for surrogates only finds the lone one the visit of every escape found, at
    /// the same byte.
    #[test]
    fn surrogates_alone_say_what_every_escape_said(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "\\ud83d", "\\ude00", "\\uD800", "\\uDBFF", "\\uDC00", "\\udfff", "\\uD83D",
            "\\u00e9", "\\ud7ff", "\\ud55c", "\\ue000", "\\\\", "ud83d", "x", " ",
        ]), 0..24),
    ) {
        // Every piece is a whole escape or plain text, so the body is JSON, as `parse`
        // asks of it before it looks for lone surrogates.
        let raw = format!("{{\"a\":\"{}\"}}", pieces.concat());
        proptest::prop_assert!(serde_json::from_str::<serde::de::IgnoredAny>(&raw).is_ok());
        proptest::prop_assert_eq!(
            lone_surrogate(raw.as_bytes()),
            lone_surrogate_visiting_every_escape(raw.as_bytes()),
            "{}", raw
        );
    }
}
