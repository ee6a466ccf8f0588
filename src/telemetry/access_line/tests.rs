use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

use super::*;

/// A clock that always says the same, so two formats' lines can be compared.
#[derive(Clone)]
struct Fixed;

impl FormatTime for Fixed {
    fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
        writer.write_str("2026-11-30T20:02:37.914501Z")
    }
}

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).unwrap()
    }
}

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Buffer;

    fn make_writer(&'a self) -> Buffer {
        self.clone()
    }
}

/// What `emit` logs, through the default text format and through [`AccessLine`].
fn both(emit: impl Fn()) -> (String, String) {
    let (default, ours) = (Buffer::default(), Buffer::default());
    let subscriber = tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(false)
        .with_timer(Fixed)
        .with_writer(default.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, &emit);
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .event_format(AccessLine::with_timer(Fixed))
        .with_writer(ours.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, &emit);
    (default.text(), ours.text())
}

fn access(route: &str, error: &str, latency_ms: f64) {
    access_with(route, error, latency_ms, (200, -1, 2));
}

/// The access line with its integers given: `(status, step, attempts)`.
fn access_with(
    route: &str,
    error: &str,
    latency_ms: f64,
    (status, step, attempts): (u16, i64, usize),
) {
    tracing::info!(
        target: "switchyard::requests",
        id = %"01a22e0d-5ded-706f-a7f1-f4a7ac0d963d",
        route,
        outcome = "error",
        status,
        step,
        provider = "slow",
        attempts,
        latency_ms,
        stream = true,
        partial = false,
        error,
        "request"
    );
}

#[test]
fn writes_what_the_default_format_writes() {
    for (route, error, latency) in [
        ("slow-stream", "client_disconnected", 214.90278800000002),
        ("r", "", 0.0),
        ("quote\"and\\back", "tab\there", 1e300),
        ("café", "bell\u{7}", -0.5),
    ] {
        let (default, ours) = both(|| access(route, error, latency));
        assert!(default.contains(" INFO request id="), "{default}");
        assert_eq!(ours, default);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any text, any number: the same bytes as the default format.
    #[test]
    fn writes_what_the_default_format_writes_for_any_values(
        route in proptest::prelude::any::<String>(),
        error in "[ -~\t\n\\\\\"é\u{7}]{0,12}",
        latency in proptest::prelude::any::<f64>(),
        integers in proptest::prelude::any::<(u16, i64, usize)>(),
    ) {
        let (default, ours) = both(|| access_with(&route, &error, latency, integers));
        proptest::prop_assert_eq!(ours, default);
    }
}

#[test]
fn leaves_other_events_and_spans_to_the_default_format() {
    let (default, ours) = both(|| tracing::warn!(reason = "x\"y", count = 3, "store down"));
    assert!(default.contains(" WARN store down"), "{default}");
    assert_eq!(ours, default);
    let (default, ours) = both(|| {
        let span = tracing::info_span!("reload", generation = 4);
        let _inside = span.enter();
        access("r", "", 1.5);
    });
    assert!(
        default.contains("reload{generation=4}: request"),
        "{default}"
    );
    assert_eq!(ours, default);
}
