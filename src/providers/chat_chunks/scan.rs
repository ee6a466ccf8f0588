//! Reading a streamed chunk's kind in one pass, without building it: the passthrough's
//! per-event cost.
//!
//! A passthrough forwards each chunk's bytes as they came and only needs to know whether it
//! is content, a finish, usage, an error, or malformed. [`scan_chunk`] walks the JSON once,
//! checking that it is well formed and noting the two fields that matter for a content
//! chunk (`choices[].finish_reason`, and `usage` when it is `null`). It answers only when
//! it is sure the full parse would say the same, and otherwise leaves the chunk to it: a
//! `usage` or `error` field with a value, an escaped key, a repeated field, a `choices`
//! that is not an array of objects, deep nesting.

/// What a chunk is, when the scan is sure.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scanned {
    /// Content (or role), with no usage.
    Content,
    /// A choice carries a finish reason; no usage.
    Finish,
}

/// Deeper nesting than this is left to the full parse (which has its own limit).
const MAX_DEPTH: usize = 64;

/// The bytes that end a run of plain string content: the quote, the backslash, and the
/// control characters a JSON string may not hold.
static STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        stops[byte] = true;
        byte += 1;
    }
    stops[b'"' as usize] = true;
    stops[b'\\' as usize] = true;
    stops
};

/// The chunk's kind, or `None` when the full parse must decide.
pub(super) fn scan_chunk(data: &[u8]) -> Option<Scanned> {
    let mut cursor = Cursor { bytes: data, at: 0 };
    let scanned = cursor.chunk()?;
    cursor.skip_space();
    (cursor.at == cursor.bytes.len()).then_some(scanned)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// The top-level object: its `choices`, and a `usage` that may only be `null`.
    fn chunk(&mut self) -> Option<Scanned> {
        let (mut choices, mut usage) = (None, false);
        self.object(|cursor, key| {
            match key {
                b"choices" if choices.is_none() => choices = Some(cursor.choices()?),
                b"usage" if !usage => {
                    usage = true;
                    cursor.null()?;
                }
                // An error, even `null`, or a field seen twice: the full parse decides.
                b"choices" | b"usage" | b"error" => return None,
                _ => cursor.value(1)?,
            }
            Some(())
        })?;
        match choices? {
            (0, _) => None,
            (_, true) => Some(Scanned::Finish),
            (_, false) => Some(Scanned::Content),
        }
    }

    /// `choices`: how many, and whether any has a finish reason.
    fn choices(&mut self) -> Option<(usize, bool)> {
        self.skip_space();
        self.expect(b'[')?;
        let (mut count, mut finished) = (0, false);
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            return Some((0, false));
        }
        loop {
            self.skip_space();
            let mut reason = None;
            self.object(|cursor, key| {
                match key {
                    b"finish_reason" if reason.is_none() => {
                        cursor.skip_space();
                        let null = cursor.bytes.get(cursor.at..cursor.at + 4) == Some(b"null");
                        cursor.value(2)?;
                        reason = Some(!null);
                    }
                    b"finish_reason" => return None,
                    _ => cursor.value(2)?,
                }
                Some(())
            })?;
            count += 1;
            finished |= reason == Some(true);
            self.skip_space();
            match self.next()? {
                b',' => continue,
                b']' => return Some((count, finished)),
                _ => return None,
            }
        }
    }

    /// An object, handing each key (unescaped only) to `field`, which reads its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.skip_space();
        self.expect(b'{')?;
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skip_space();
            self.expect(b'"')?;
            let (start, escaped) = self.string()?;
            if escaped {
                return None;
            }
            let key = &self.bytes[start..self.at - 1];
            self.skip_space();
            self.expect(b':')?;
            field(self, key)?;
            self.skip_space();
            match self.next()? {
                b',' => continue,
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }

    /// Any JSON value, checked and skipped.
    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_space();
        match self.peek()? {
            b'{' => self.object(|cursor, _| cursor.value(depth + 1)),
            b'[' => {
                self.at += 1;
                self.skip_space();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.value(depth + 1)?;
                    self.skip_space();
                    match self.next()? {
                        b',' => continue,
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'"' => {
                self.at += 1;
                self.string().map(|_| ())
            }
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            _ => self.number(),
        }
    }

    fn null(&mut self) -> Option<()> {
        self.skip_space();
        self.literal(b"null")
    }

    /// A string's contents, its opening quote already read: where they start, and whether
    /// they hold an escape. The cursor ends past the closing quote.
    fn string(&mut self) -> Option<(usize, bool)> {
        let start = self.at;
        let mut escaped = false;
        loop {
            // One table lookup per byte to the next byte that matters: a chunk's strings
            // are short, where a vectorised search costs more to start than it saves.
            let rest = self.bytes.get(self.at..)?;
            let stop = rest.iter().position(|&byte| STOPS[usize::from(byte)])?;
            let byte = *rest.get(stop)?;
            self.at += stop + 1;
            match byte {
                b'"' => return Some((start, escaped)),
                b'\\' => {
                    escaped = true;
                    match self.next()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let hex = self.bytes.get(self.at..self.at + 4)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 4;
                        }
                        _ => return None,
                    }
                }
                // JSON strings hold no raw control characters.
                _ => return None,
            }
        }
    }

    /// A number in JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digit()?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digit()?;
            self.digits();
        }
        Some(())
    }

    fn digit(&mut self) -> Option<()> {
        self.next().filter(u8::is_ascii_digit).map(|_| ())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes.get(self.at..self.at + word.len())?;
        (found == word).then(|| self.at += word.len())
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::chat_chunks::{ChunkKind, probe_chunk_in_full};

    /// Whenever the scan answers, the full parse says the same.
    fn agrees(data: &str) -> Option<Scanned> {
        let scanned = scan_chunk(data.as_bytes());
        if let Some(kind) = &scanned {
            let full = probe_chunk_in_full(data.as_bytes());
            let expected = match kind {
                Scanned::Content => Some((ChunkKind::Content, None)),
                Scanned::Finish => Some((ChunkKind::Finish, None)),
            };
            assert_eq!(full, expected, "{data}");
        }
        scanned
    }

    #[test]
    fn reads_content_and_finish_chunks() {
        let content = r#"{"id":"c","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"hi \"there\" \u00e9\n"},"finish_reason":null,"logprobs":null}],"usage":null}"#;
        assert_eq!(agrees(content), Some(Scanned::Content));
        let finish =
            r#" {"choices":[{"delta":{},"finish_reason":"stop"}], "x":[1,-2.5e+3,true,false,{}]} "#;
        assert_eq!(agrees(finish), Some(Scanned::Finish));
    }

    #[test]
    fn leaves_anything_unusual_to_the_full_parse() {
        for data in [
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"choices":[{"finish_reason":null}],"usage":{"prompt_tokens":1}}"#,
            r#"{"error":{"message":"x"}}"#,
            r#"{"error":null,"choices":[{}]}"#,
            r#"{"choices":[{}],"choices":[{}]}"#,
            r#"{"choices":[{"finish_reason":null,"finish_reason":"stop"}]}"#,
            r#"{"ch\u006fices":[{}]}"#,
            r#"{"choices":null}"#,
            r#"{"choices":[1]}"#,
            r#"{"choices":[]}"#,
            r#"{"model":"m"}"#,
            r#"{"choices":[{"delta": nope}]}"#,
            r#"{"choices":[{}]} x"#,
            r#"{"choices":[{}],"n":01}"#,
            r#"{"choices":[{}],"n":1.}"#,
            r#"{"choices":[{}],"s":"tab	in"}"#,
            r#"{"choices":[{}],"s":"\x"}"#,
            r#"{"choices":[{}],}"#,
            "[DONE]",
            "",
        ] {
            assert_eq!(agrees(data), None, "{data}");
        }
    }

    proptest::proptest! {
        /// Over chunks made of the parts that matter, the scan never disagrees.
        #[test]
        fn never_disagrees_with_the_full_parse(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "{", "}", "[", "]", ",", ":", " ", "\"choices\"", "\"usage\"", "\"error\"",
                "\"finish_reason\"", "\"delta\"", "null", "\"stop\"", "1", "-0.5e3", "true",
                "\"a\\\"b\"", "\"\\u00e9\"", "{}", "[]",
            ]), 0..24),
        ) {
            agrees(&parts.concat());
        }
    }
}
