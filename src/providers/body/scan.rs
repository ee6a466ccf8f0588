//! A fast check that a body is one JSON object, which finds its top-level fields on the way.
//!
//! serde_json checks a string's bytes one 8-byte word at a time, and a chat body's strings are
//! broken up by `\n` and `\"` escapes: with it, a 128 KB request cost about 1.09M
//! instructions, over half of them in that loop. Finding a string's plain runs with `memchr2`
//! (SIMD) brought the check to about 510k of a 128 KB request's 818k; finding them in bit
//! masks of the whole body (see [`super::specials`]), to 313k of 575k.
//!
//! This check only ever says yes or "ask serde_json": anything it does not accept goes to
//! serde_json, which decides and says why. So it must never accept a body serde_json
//! refuses, nor find other fields; the `request` fuzz target checks both on every input.

use std::borrow::Cow;
use std::ops::Range;

use super::specials;

/// serde_json refuses nesting past 128 levels; deeper than this, it decides.
const MAX_DEPTH: usize = 100;

/// Each top-level field's name and the byte range of its value, in order.
pub(super) type Fields<'a> = Vec<(Cow<'a, str>, Range<usize>)>;

/// What the check found in a body it vouches for.
pub(super) struct Scanned<'a> {
    pub fields: Fields<'a>,
    /// Whether any string holds a `\u` escape: without one, no lone surrogate can hide.
    pub unicode_escapes: bool,
}

/// `text`'s top-level fields, when it is one JSON object this check can vouch for.
pub(super) fn top_level_fields(text: &str) -> Option<Scanned<'_>> {
    let bytes = text.as_bytes();
    let mut scan = Scan {
        bytes,
        at: 0,
        specials: specials::masks(bytes),
        unicode_escapes: false,
    };
    let mut fields = Vec::new();
    scan.expect(b'{')?;
    if scan.token()? == b'}' {
        scan.at += 1;
    } else {
        loop {
            scan.token()?;
            let name = scan.string()?;
            scan.expect(b':')?;
            scan.token()?;
            let start = scan.at;
            scan.value(1)?;
            fields.push((field_name(text, name)?, start..scan.at));
            if scan.after_member(b'}')? {
                break;
            }
        }
    }
    // Nothing but whitespace after the object.
    scan.token().is_none().then_some(Scanned {
        fields,
        unicode_escapes: scan.unicode_escapes,
    })
}

/// A string's contents as a name: borrowed, or with its escapes undone by serde_json.
fn field_name(text: &str, (contents, escaped): (Range<usize>, bool)) -> Option<Cow<'_, str>> {
    if !escaped {
        return text.get(contents).map(Cow::Borrowed);
    }
    let quoted = text.get(contents.start.checked_sub(1)?..contents.end + 1)?;
    serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
}

struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Where the body's `"`, `\` and control bytes are (see [`specials::masks`]).
    specials: Vec<u64>,
    unicode_escapes: bool,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }

    /// The next byte that is not whitespace, left in place; `None` at the end.
    fn token(&mut self) -> Option<u8> {
        loop {
            let byte = self.peek()?;
            if !matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(byte);
            }
            self.at += 1;
        }
    }

    /// The next token, which must be `byte`: taken.
    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.token()? == byte).then(|| self.at += 1)
    }

    /// After a member or element: `,` (more follow) or `close` (the last one), taken.
    /// Whether it was the last.
    fn after_member(&mut self, close: u8) -> Option<bool> {
        let byte = self.token()?;
        self.at += 1;
        match byte {
            b',' => Some(false),
            _ if byte == close => Some(true),
            _ => None,
        }
    }

    /// One value of any kind, `depth` containers deep.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.token()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A member's value or an array's element: a string, the most common, read here; any
    /// other kind through [`Scan::value`], a real call since it is recursive (six registers
    /// saved and restored). Pinned inline, as `string` and `specials::next` are, so every
    /// build gets the code the gateway's thin-LTO build chose by itself: built without that
    /// inlining, `bench/body.rs` counted a fifth more than the gateway runs.
    #[inline(always)]
    fn element(&mut self, depth: usize) -> Option<()> {
        if self.token()? == b'"' {
            return self.string().map(drop);
        }
        self.value(depth)
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        if self.token()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.token()?;
            self.string()?;
            self.expect(b':')?;
            self.element(depth)?;
            if self.after_member(b'}')? {
                return Some(());
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        if self.token()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.element(depth)?;
            if self.after_member(b']')? {
                return Some(());
            }
        }
    }

    /// A string, from its opening quote: the range of its contents, and whether it has
    /// escapes. The text is UTF-8 already; JSON forbids only raw control characters.
    #[inline(always)]
    fn string(&mut self) -> Option<(Range<usize>, bool)> {
        if !self.eat(b'"') {
            return None;
        }
        // Walked in a local: `self.at` written back once, at the end, not at every escape.
        let (bytes, start) = (self.bytes, self.at);
        let mut at = start;
        let mut escaped = false;
        loop {
            at = specials::next(&self.specials, at)?;
            match *bytes.get(at)? {
                b'"' => {
                    self.at = at + 1;
                    return Some((start..at, escaped));
                }
                b'\\' => escaped = true,
                // A raw control byte.
                _ => return None,
            }
            match *bytes.get(at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                b'u' => {
                    self.unicode_escapes = true;
                    let hex = bytes.get(at + 2..at + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    at += 6;
                }
                _ => return None,
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes.get(self.at..self.at + word.len())? == word;
        self.at += word.len();
        found.then_some(())
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, as RFC 8259 has it.
    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.eat(b'.') && self.digits() == 0 {
            return None;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }
}
