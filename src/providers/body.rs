//! A client's request body: its bytes as they came, where each top-level field's value lies
//! in them, and the whole JSON tree only when a translation asks for it.
//!
//! The gateway reads a handful of fields (`model`, `stream`, `stream_options`, `max_tokens`,
//! an endpoint's required ones) and, when the client's format is the step's, sends the
//! client's own bytes with `model` spliced in. Building a tree of a 100 KB conversation, and
//! writing it out again, would cost ten times the rest of the request, so it happens only
//! for steps that translate (through [`Deref`] to the tree, parsed once on first use).

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::OnceLock;

use bytes::Bytes;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::outbound::OutBody;

/// What kind of JSON value a field holds, read from its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonKind {
    /// `{...}`
    Object,
    /// `[...]`
    Array,
    /// `"..."`
    String,
    /// `true` or `false`
    Bool,
    /// `null`
    Null,
    /// Any number.
    Number,
}

/// A top-level field's name and the byte range of its value in the body.
type Field = (FieldName, Range<usize>);

/// A top-level field's name: where it lies in the body, or, when it holds an escape, its
/// text with the escape undone. A chat body has half a dozen fields, and a copy of each
/// name was an allocation on every request.
#[derive(Clone, Debug)]
enum FieldName {
    At(Range<usize>),
    Unescaped(Box<str>),
}

/// A client's JSON object body, read only as far as the gateway needs.
pub struct RequestBody {
    raw: Bytes,
    /// Each top-level field's name and the byte range of its value in `raw`, in order.
    fields: Vec<Field>,
    /// A name occurs more than once: a splice could leave the other one in place.
    duplicates: bool,
    /// The whole body as a tree, parsed on first use by a translation; why not, when the
    /// bytes cannot make one (see [`RequestBody::unreadable`]).
    tree: OnceLock<Result<Map<String, Value>, String>>,
}

impl RequestBody {
    /// Checks that `raw` is one JSON object (all of it, nested values included) and notes
    /// where its top-level fields lie, without building any of their values.
    pub fn parse(raw: Bytes) -> Result<RequestBody, serde_json::Error> {
        RequestBody::parse_with(raw, true)
    }

    /// [`RequestBody::parse`] by serde_json alone, for the fuzzer to hold the fast check to.
    #[doc(hidden)]
    pub fn parse_by_serde(raw: Bytes) -> Result<RequestBody, serde_json::Error> {
        RequestBody::parse_with(raw, false)
    }

    fn parse_with(raw: Bytes, fast: bool) -> Result<RequestBody, serde_json::Error> {
        let text = match simdutf8::basic::from_utf8(&raw) {
            Ok(text) => text,
            // The fast check does not say where; std's does, and bad bytes are rare.
            Err(_) => std::str::from_utf8(&raw).map_err(|e| {
                <serde_json::Error as serde::de::Error>::custom(format!(
                    "invalid UTF-8 at byte {}",
                    e.valid_up_to()
                ))
            })?,
        };
        // The body is checked as UTF-8 once, above: parsed as text, the raw values borrow
        // from it without being checked again (parsed as bytes, each one would be).
        let (found, unicode_escapes) = match fast.then(|| scan::top_level_fields(text)).flatten() {
            Some(scanned) => (scanned.fields, scanned.unicode_escapes),
            // Not one the fast check vouches for: serde_json decides, and says why.
            None => (top_level_by_serde(text)?, true),
        };
        // The fast check saw every escape: with no `\u` among them, there is nothing to find.
        let lone = if unicode_escapes {
            lone_surrogate(&raw)
        } else {
            None
        };
        if let Some(at) = lone {
            return Err(<serde_json::Error as serde::de::Error>::custom(format!(
                "lone surrogate in a \\u escape at byte {at}"
            )));
        }
        let mut duplicates = false;
        for (at, (name, _)) in found.iter().enumerate() {
            duplicates |= found[..at].iter().any(|(seen, _)| seen == name);
        }
        // A borrowed name is a slice of `text`, which is `raw`: its place there is its offset.
        let start = text.as_ptr() as usize;
        let fields = found
            .into_iter()
            .map(|(name, value)| match name {
                Cow::Borrowed(name) => {
                    let at = name.as_ptr() as usize - start;
                    (FieldName::At(at..at + name.len()), value)
                }
                Cow::Owned(name) => (FieldName::Unescaped(name.into_boxed_str()), value),
            })
            .collect();
        Ok(RequestBody {
            raw,
            fields,
            duplicates,
            tree: OnceLock::new(),
        })
    }

    /// Each top-level field's name and value range, and whether a name repeats: what the
    /// fuzzer compares between [`RequestBody::parse`] and [`RequestBody::parse_by_serde`].
    #[doc(hidden)]
    pub fn layout(&self) -> (Vec<(&str, Range<usize>)>, bool) {
        let fields = self
            .fields
            .iter()
            .map(|field| {
                let name = std::str::from_utf8(self.name(field)).unwrap_or_default();
                (name, field.1.clone())
            })
            .collect();
        (fields, self.duplicates)
    }

    /// `field`'s name, as bytes of the body or of its unescaped text.
    fn name<'a>(&'a self, (name, _): &'a Field) -> &'a [u8] {
        match name {
            FieldName::At(range) => self.raw.get(range.clone()).unwrap_or_default(),
            FieldName::Unescaped(text) => text.as_bytes(),
        }
    }

    /// The fields named `name`, in order.
    fn named<'a>(&'a self, name: &'a str) -> impl DoubleEndedIterator<Item = &'a Field> {
        self.fields
            .iter()
            .filter(move |field| self.name(field) == name.as_bytes())
    }

    /// The body's bytes as the client sent them.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// A top-level field's value as JSON text; the last one when the name repeats, as a
    /// JSON object reads.
    pub fn raw_field(&self, name: &str) -> Option<&str> {
        // The range came from a `&str` the parser checked, so it is UTF-8 on char bounds.
        std::str::from_utf8(self.raw_bytes(name)?).ok()
    }

    /// A top-level field's value as JSON bytes, unchecked: for reading its first bytes,
    /// where `raw_field` would check a whole conversation as UTF-8 again.
    fn raw_bytes(&self, name: &str) -> Option<&[u8]> {
        let (_, range) = self.named(name).next_back()?;
        self.raw.get(range.clone())
    }

    /// The kind of a top-level field's value.
    pub fn field_kind(&self, name: &str) -> Option<JsonKind> {
        let first = self.raw_bytes(name)?.first()?;
        Some(match first {
            b'{' => JsonKind::Object,
            b'[' => JsonKind::Array,
            b'"' => JsonKind::String,
            b't' | b'f' => JsonKind::Bool,
            b'n' => JsonKind::Null,
            _ => JsonKind::Number,
        })
    }

    /// A top-level field read as `T`; `None` when absent or of another type.
    pub fn field_as<'a, T: Deserialize<'a>>(&'a self, name: &str) -> Option<T> {
        serde_json::from_str(self.raw_field(name)?).ok()
    }

    /// Whether a top-level field holds an empty array (`[]`, spaces allowed).
    pub fn is_empty_array(&self, name: &str) -> bool {
        self.raw_bytes(name)
            .and_then(|raw| raw.strip_prefix(b"["))
            .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"]"))
    }

    /// The client's bytes with top-level fields set: each `(name, json)` replaces that
    /// field's value, or is added when absent. `None` when a name repeats in the body, where
    /// only a rebuilt tree says for sure which value a reader takes.
    pub fn with_fields(&self, set: &[(&str, &str)]) -> Option<OutBody> {
        if self.duplicates {
            return None;
        }
        let mut replaced: Vec<(Range<usize>, &str)> = Vec::with_capacity(set.len());
        let mut added = String::new();
        for &(name, json) in set {
            match self.named(name).next() {
                Some((_, range)) => replaced.push((range.clone(), json)),
                None => {
                    added.push_str(&serde_json::to_string(name).ok()?);
                    added.push(':');
                    added.push_str(json);
                    added.push(',');
                }
            }
        }
        if !added.is_empty() {
            // Added fields go first, right after the brace; the comma only when others follow.
            let open = self.raw.iter().position(|&b| b == b'{')? + 1;
            if self.fields.is_empty() {
                added.pop();
            }
            replaced.push((open..open, added.as_str()));
        }
        replaced.sort_by_key(|(range, _)| range.start);
        // The client's bytes are shared, not copied: only the spliced values are new.
        let mut out = OutBody::with_capacity(replaced.len() * 2 + 1);
        let mut at = 0;
        for (range, json) in &replaced {
            out.push(self.raw.slice(at..range.start));
            out.push(Bytes::copy_from_slice(json.as_bytes()));
            at = range.end;
        }
        out.push(self.raw.slice(at..));
        Some(out)
    }

    /// The whole body as a tree, parsed once on first use; empty when the bytes cannot make
    /// one, which [`RequestBody::unreadable`] then reports.
    pub fn tree(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
        let tree = self
            .tree
            .get_or_init(|| serde_json::from_slice(&self.raw).map_err(|e| e.to_string()));
        tree.as_ref().unwrap_or(&EMPTY)
    }

    /// Why the tree a translation asked for could not be built, if it could not. `parse`
    /// checks the bytes are one JSON object, but not what only a tree checks (a number past a
    /// float's range): doing that for every request would cost what the splice saves, so an
    /// attempt that translated asks here after reading, and never sends an empty body.
    pub fn unreadable(&self) -> Option<&str> {
        self.tree.get()?.as_ref().err().map(String::as_str)
    }

    /// Builds the tree now, for a reader that needs it whole, and says why it could not.
    pub fn tree_error(&self) -> Option<&str> {
        self.tree();
        self.unreadable()
    }
}

/// Where `raw` (valid JSON) has a `\u` escape of a UTF-16 surrogate that is not one half of
/// a pair. The raw values `parse` reads skip over escapes, and a tree refuses these, so a
/// translation could not read the body.
///
/// Only surrogates are looked for (`\ud` and `\uD`, two vectorised searches), not every
/// `\u`: text sent with every non-ASCII character escaped (Python's `json.dumps` does so by
/// default) has an escape every few bytes, and visiting each one took the whole check of a
/// 376 KB body from 3.5M instructions to 17.2M (4.2M now); surrogates are there only for
/// characters past the BMP, emoji mostly.
fn lone_surrogate(raw: &[u8]) -> Option<usize> {
    let is_escape = |at: usize| {
        // An escape only if the backslash is not itself escaped: an odd run of them.
        let run = raw[..=at].iter().rev().take_while(|&&b| b == b'\\').count();
        run % 2 == 1
    };
    let mut surrogates: Vec<usize> = memchr::memmem::find_iter(raw, b"\\ud")
        .chain(memchr::memmem::find_iter(raw, b"\\uD"))
        .filter(|&at| {
            matches!(
                raw.get(at + 3),
                Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            )
        })
        .filter(|&at| is_escape(at))
        .collect();
    surrogates.sort_unstable();
    unpaired(raw, &surrogates)
}

/// The first of `raw`'s surrogate escapes (`surrogates`: where each one's `\u` is, all of
/// them, in order) that is not half of a pair: a low one alone, or a high one not followed
/// at once by a low one (then the escape after it is reported, when there is one).
fn unpaired(raw: &[u8], surrogates: &[usize]) -> Option<usize> {
    let unit = |at: usize| {
        raw.get(at + 2..at + 6)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
    };
    let mut places = surrogates.iter().copied();
    while let Some(at) = places.next() {
        if !(0xD800..=0xDBFF).contains(&unit(at)?) {
            return Some(at);
        }
        // A high surrogate: a low one must follow at once.
        let next = at + 6;
        if raw.get(next..next + 2) != Some(b"\\u") {
            return Some(at);
        }
        // An escape follows; it pairs only if it is a low surrogate (the next place).
        match places.next() {
            Some(low) if low == next && (0xDC00..=0xDFFF).contains(&unit(low)?) => {}
            _ => return Some(next),
        }
    }
    None
}

/// Translations read the body as the tree they always did.
impl Deref for RequestBody {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        self.tree()
    }
}

/// A body built in code (tests, the fuzzer): its bytes are the tree's serialization.
impl From<Map<String, Value>> for RequestBody {
    fn from(tree: Map<String, Value>) -> RequestBody {
        let raw = Bytes::from(serde_json::to_vec(&tree).unwrap_or_default());
        let body = RequestBody::parse(raw).unwrap_or_else(|_| RequestBody {
            raw: Bytes::from_static(b"{}"),
            fields: Vec::new(),
            duplicates: false,
            tree: OnceLock::new(),
        });
        let _ = body.tree.set(Ok(tree));
        body
    }
}

/// Read as a JSON object, as tests and the fuzzer build bodies.
impl<'de> Deserialize<'de> for RequestBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::<String, Value>::deserialize(deserializer).map(RequestBody::from)
    }
}

impl Clone for RequestBody {
    fn clone(&self) -> RequestBody {
        RequestBody {
            raw: self.raw.clone(),
            fields: self.fields.clone(),
            duplicates: self.duplicates,
            tree: self.tree.clone(),
        }
    }
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RequestBody")
            .field(&String::from_utf8_lossy(&self.raw))
            .finish()
    }
}

/// `text`'s top-level fields as serde_json reads them, with its error when it is not one
/// JSON object.
fn top_level_by_serde(text: &str) -> Result<scan::Fields<'_>, serde_json::Error> {
    let TopLevel(found) = serde_json::from_str(text)?;
    let base = text.as_ptr() as usize;
    Ok(found
        .into_iter()
        .map(|(name, value)| {
            // The raw value borrows from `text`: its offset is where it starts there.
            let start = value.get().as_ptr() as usize - base;
            (name, start..start + value.get().len())
        })
        .collect())
}

/// The top level of a JSON object: each field's name and its value left unparsed.
struct TopLevel<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TopLevelVisitor)
    }
}

struct TopLevelVisitor;

impl<'de> Visitor<'de> for TopLevelVisitor {
    type Value = TopLevel<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevel<'de>, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(Name(name)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            fields.push((name, value));
        }
        Ok(TopLevel(fields))
    }
}

/// A field name, borrowed unless it had escapes to undo.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(NameVisitor)
    }
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = Name<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Borrowed(name)))
    }

    fn visit_str<E>(self, name: &str) -> Result<Name<'de>, E> {
        Ok(Name(Cow::Owned(name.to_owned())))
    }
}

mod scan;
mod specials;
#[cfg(test)]
mod tests;
