//! The reader's own tests: what it must read, and one refusal for each rule it keeps.

use super::*;

const VALID: &str = r#"# HELP http_requests Requests, by \"code\" \\ path.\nMore.
# TYPE http_requests counter
http_requests_total{code="200",path="a\"b\\c\nd"} 1027 1395066363000
http_requests_total{} 3 # {trace_id="KOO5S4vxi0o"} 0.67 1520879607.789
http_requests_created 1.5e9
# TYPE latency_seconds histogram
# UNIT latency_seconds seconds
latency_seconds_sum{route="r"} 0.25
latency_seconds_count{route="r"} 2
latency_seconds_bucket{route="r",le="0.1"} 1
latency_seconds_bucket{route="r",le="+Inf"} 2
# TYPE up gauge
up -Inf
up_other{a="x"} NaN
# TYPE build info
build_info{version="1.0"} 1
# EOF"#;

/// Asserts that `text` is refused on `line` with a message that contains `says`.
fn fails(text: &str, line: usize, says: &str) {
    match parse(text) {
        Ok(families) => panic!("read as valid: {families:?}\n{text}"),
        Err(e) => assert!(
            e.line == line && e.message.contains(says),
            "{e}, not line {line}: {says}"
        ),
    }
}

#[test]
fn a_valid_exposition_reads_back_whole() {
    let families = parse(VALID).unwrap();
    let kinds: Vec<_> = families
        .iter()
        .map(|f| (f.name.as_str(), f.kind.as_str()))
        .collect();
    let expected = [
        ("http_requests", "counter"),
        ("latency_seconds", "histogram"),
        ("up", "gauge"),
        ("up_other", "unknown"),
        ("build", "info"),
    ];
    assert_eq!(kinds, expected);
    let requests = &families[0];
    let help = "Requests, by \"code\" \\ path.\nMore.";
    assert_eq!(requests.help.as_deref(), Some(help));
    assert_eq!(requests.samples[0].labels["path"], "a\"b\\c\nd");
    assert_eq!(requests.samples[0].timestamp, Some(1395066363000.0));
    let names: Vec<_> = requests.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "http_requests_total",
            "http_requests_total",
            "http_requests_created"
        ]
    );
    assert_eq!(requests.samples[2].value, 1.5e9);
    assert_eq!(families[1].unit.as_deref(), Some("seconds"));
    assert_eq!(families[1].samples[3].labels["le"], "+Inf");
    assert_eq!(families[2].samples[0].value, f64::NEG_INFINITY);
    assert!(families[3].samples[0].value.is_nan());

    // No newline after EOF, empty metadata, and an undefined escape kept as written.
    let bare = parse("# HELP a \n# UNIT a \na{b=\"\\d\"} .5e-3\n# EOF").unwrap();
    assert_eq!((&bare[0].help, &bare[0].unit), (&None, &None));
    let sample = &bare[0].samples[0];
    assert_eq!((sample.labels["b"].as_str(), sample.value), ("\\d", 0.0005));

    // Two points of one histogram, each of samples that share its timestamp.
    let point = |t| format!("h_bucket{{le=\"+Inf\"}} 1 {t}\nh_count 1 {t}\nh_sum 0.5 {t}\n");
    let timed = format!("# TYPE h histogram\n{}{}# EOF\n", point(5), point(6));
    let times: Vec<_> = parse(&timed).unwrap()[0]
        .samples
        .iter()
        .map(|s| s.timestamp)
        .collect();
    assert_eq!(times, [5.0, 5.0, 5.0, 6.0, 6.0, 6.0].map(Some));
}

#[test]
fn the_exposition_ends_with_one_eof_and_has_no_empty_line() {
    fails("a 1\n", 1, "does not end with `# EOF`");
    fails("a 1\n# EOF\n# EOF\n", 2, "not the last line");
    fails("a 1\n# EOF\na 2\n", 2, "not the last line");
    fails("a 1\n# EOF\n\n", 2, "not the last line");
    fails("a 1\n\nb 1\n# EOF\n", 2, "empty line");
    fails("a 1\r\n# EOF\n", 1, "not a number");
}

#[test]
fn quotes_newlines_and_backslashes_must_be_escaped() {
    fails("a{b=\"x\"y\"} 1\n# EOF\n", 1, "expected `,`");
    fails("a{b=\"x\n\"} 1\n# EOF\n", 1, "expected `\"`");
    fails("a{b=\"x\\\"} 1\n# EOF\n", 1, "expected `\"`");
    fails("# HELP a say \"hi\"\n# EOF\n", 1, "unescaped `\"` in HELP");
    fails("# HELP a ends \\\n# EOF\n", 1, "ends the line");
}

#[test]
fn names_labels_and_numbers_follow_the_abnf() {
    fails("a{b=\"1\",b=\"2\"} 1\n# EOF\n", 1, "label `b` twice");
    fails("a{b=\"1\",} 1\n# EOF\n", 1, "not a label name");
    fails("a{1b=\"1\"} 1\n# EOF\n", 1, "not a label name");
    fails("a{b='1'} 1\n# EOF\n", 1, "expected `=\"`");
    fails("1a 1\n# EOF\n", 1, "not a metric name");
    fails("a  1\n# EOF\n", 1, "not a number");
    for bad in [
        "1.2.3", "e5", ".", "1e", "0x10", "1_000", "1e999", "inf5", "+nan",
    ] {
        fails(&format!("a {bad}\n# EOF\n"), 1, "not a number");
    }
    fails("a 1 NaN\n# EOF\n", 1, "not a number");
    fails("a 1 \n# EOF\n", 1, "not a number");
}

#[test]
fn nothing_may_trail_a_sample_or_a_descriptor() {
    fails("a 1 2 3\n# EOF\n", 1, "expected `# `");
    fails("a 1 # {} 1 2 3\n# EOF\n", 1, "unexpected ` 3`");
    fails("a{} 1} 1\n# EOF\n", 1, "not a number");
    fails("# TYPE a counter extra\n# EOF\n", 1, "no such type");
    fails("# TYPE a Counter\n# EOF\n", 1, "no such type");
    fails("# UNIT a_s s s\n# EOF\n", 1, "unexpected ` s`");
    fails("# a comment\n# EOF\n", 1, "other than TYPE");
    fails("#TYPE a counter\n# EOF\n", 1, "expected ` `");
}

#[test]
fn families_and_metrics_are_contiguous_and_declared_once() {
    // A sample outside its family's names starts a family, here one the first owns.
    fails("# TYPE a counter\na 1\n# EOF\n", 2, "after family `a`");
    fails(
        "# TYPE a counter\na_total 1\nb 1\na_total 2\n# EOF\n",
        4,
        "after family `a`",
    );
    fails(
        "# TYPE a gauge\n# TYPE b gauge\n# TYPE a gauge\n# EOF\n",
        3,
        "after family `a`",
    );
    fails(
        "# TYPE a_total gauge\n# TYPE a counter\n# EOF\n",
        3,
        "clashes with `a_total`",
    );
    fails(
        "# TYPE a gauge\n# TYPE a gauge\n# EOF\n",
        2,
        "a second TYPE",
    );
    fails(
        "# TYPE a gauge\na 1\n# HELP a late\n# EOF\n",
        3,
        "after its samples",
    );
    fails(
        "# TYPE a_s gauge\n# UNIT a_s ms\n# EOF\n",
        2,
        "does not end with its unit",
    );
    fails(
        "a{x=\"1\"} 1\na{x=\"2\"} 1\na{x=\"1\"} 1 5\n# EOF\n",
        3,
        "interleaved",
    );
    fails("a{x=\"1\"} 1\na{x=\"1\"} 2\n# EOF\n", 2, "twice");
    fails("a 1 5\na 1 4.9\n# EOF\n", 2, "go backwards");
    fails("a 1 5\na 1\n# EOF\n", 2, "with and without timestamps");
    fails("a 1\na 1 5\n# EOF\n", 2, "with and without timestamps");
    fails(
        "# TYPE h histogram\nh_bucket 1\n# EOF\n",
        2,
        "no `le` label",
    );
    fails(
        "# TYPE h histogram\nh_bucket{le=\"big\"} 1\n# EOF\n",
        2,
        "not a number",
    );
}
