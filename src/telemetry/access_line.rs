//! The access log line (one per request, target `switchyard::requests`), written without
//! the general formatter's cost.
//!
//! tracing-subscriber's text format writes each field through `write!` with styled names,
//! which costs about 16k instructions for the access line's eleven fields even with colour
//! off: more than routing the request. [`AccessLine`] writes the same bytes directly (a test
//! holds it to the default format's output) and hands every other event, and every line
//! in colour or inside a span, to the default format.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, Format, Full, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

mod clock;

pub use clock::UtcMicros;

/// The target the access line is logged under.
pub const TARGET: &str = "switchyard::requests";

/// The text format: the default one, with the access line written directly.
pub struct AccessLine<T = UtcMicros> {
    timer: T,
    default: Format<Full, T>,
}

impl AccessLine {
    /// The default text format without targets, as the gateway logs, with its clock: the
    /// default one's text, written for less.
    pub fn new() -> AccessLine {
        AccessLine::with_timer(UtcMicros)
    }
}

impl Default for AccessLine {
    fn default() -> AccessLine {
        AccessLine::new()
    }
}

impl<T: FormatTime + Clone> AccessLine<T> {
    /// The same with another clock (tests fix it).
    pub fn with_timer(timer: T) -> AccessLine<T> {
        AccessLine {
            default: format::format()
                .with_target(false)
                .with_timer(timer.clone()),
            timer,
        }
    }
}

impl<S, N, T> FormatEvent<S, N> for AccessLine<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let in_span = ctx
            .event_scope()
            .is_some_and(|mut scope| scope.next().is_some());
        if meta.target() != TARGET || writer.has_ansi_escapes() || in_span {
            return self.default.format_event(ctx, writer, event);
        }
        // As the default format writes them: the time, the level padded to five, the fields.
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        writer.write_char(' ')?;
        writer.write_str(level(meta.level()))?;
        writer.write_char(' ')?;
        // The fields go into a buffer of their own and reach `writer` (a `dyn` writer) in
        // one call: written to it piece by piece they cost ~370 instructions each.
        let mut fields = Fields {
            line: String::with_capacity(LINE_CAPACITY),
            first: true,
        };
        event.record(&mut fields);
        fields.line.push('\n');
        writer.write_str(&fields.line)
    }
}

fn level(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// Room for a typical access line's fields, so the buffer is allocated once.
const LINE_CAPACITY: usize = 256;

/// Writes `name=value` pairs as the default format's field visitor does: the message
/// first and bare, strings quoted as `Debug` quotes them, the rest in `Debug`.
struct Fields {
    line: String,
    first: bool,
}

impl Fields {
    /// The separating space and the field's name, unless it is the message.
    fn start(&mut self, field: &Field) {
        if !std::mem::replace(&mut self.first, false) {
            self.line.push(' ');
        }
        if field.name() != "message" {
            self.line.push_str(field.name());
            self.line.push('=');
        }
    }

    /// An integer, as `Debug` writes it.
    fn integer(&mut self, field: &Field, value: impl itoa::Integer) {
        self.start(field);
        self.line.push_str(itoa::Buffer::new().format(value));
    }

    /// Anything else, through its `Debug`.
    fn debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.start(field);
        // Writing into a `String` cannot fail.
        let _ = write!(self.line, "{value:?}");
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.start(field);
            self.line.push_str(value);
        } else if value
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
        {
            // What `Debug` would write for it: nothing to escape, so no escaping pass.
            self.start(field);
            self.line.push('"');
            self.line.push_str(value);
            self.line.push('"');
        } else {
            self.debug(field, &value);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.start(field);
        self.line.push_str(if value { "true" } else { "false" });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.integer(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.integer(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.debug(field, value);
    }
}

#[cfg(test)]
mod tests;
