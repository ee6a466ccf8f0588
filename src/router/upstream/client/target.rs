//! Upstream URIs, parsed once per thread. A chain's steps send to the same few URIs request
//! after request, and parsing one (`Uri` and the origin's `Host`) cost about 1,000
//! instructions a request; a lookup by the string costs a tenth of that.

use foldhash::HashMap;
use http::Uri;
use http::header::HeaderValue;

use super::super::pool::OriginKey;

/// Parsed URIs kept per thread, at most. A route's steps name a handful, but a caller's
/// `provider/model` can put any model in the path (Gemini, Azure), so the set is bounded: it
/// starts over when full.
const MAX_TARGETS: usize = 256;

/// Where a request goes, as the client sends it.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub uri: Uri,
    pub origin: OriginKey,
    /// The `Host` header for an HTTP/1.1 request to `origin`.
    pub host: HeaderValue,
}

/// The URIs this thread has sent to, by their text, apart for HTTP/1.1 and HTTP/2 (an
/// origin's key says which it speaks).
#[derive(Default)]
pub(super) struct Targets {
    by_uri: [HashMap<Box<str>, Target>; 2],
}

impl Targets {
    /// `uri` parsed, from this thread's earlier requests when it has one; `None` when it is not
    /// an http or https URI with a host.
    pub(super) fn get(&mut self, uri: &str, http2: bool) -> Option<Target> {
        let known = &mut self.by_uri[usize::from(http2)];
        if let Some(target) = known.get(uri) {
            return Some(target.clone());
        }
        let parsed = Uri::try_from(uri).ok()?;
        let (origin, host) = OriginKey::of(&parsed, http2)?;
        let target = Target {
            uri: parsed,
            origin,
            host,
        };
        if known.len() >= MAX_TARGETS {
            known.clear();
        }
        known.insert(uri.into(), target.clone());
        Some(target)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_uri.iter().map(|known| known.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client made of a URI before there was a cache.
    fn parsed(uri: &str, http2: bool) -> Option<(Uri, OriginKey, HeaderValue)> {
        let uri = Uri::try_from(uri).ok()?;
        let (origin, host) = OriginKey::of(&uri, http2)?;
        Some((uri, origin, host))
    }

    #[test]
    fn a_known_uri_is_what_parsing_it_again_would_give() {
        let mut targets = Targets::default();
        for uri in [
            "https://api.openai.com/v1/chat/completions",
            "http://127.0.0.1:8080/v1/chat/completions",
            "https://user@example.com:0443/v1/messages",
            "https://example.com:443/models/gemini:generateContent?alt=sse",
        ] {
            for round in 0..2 {
                let target = targets.get(uri, false).expect("a valid URI");
                let (want_uri, want_origin, want_host) = parsed(uri, false).unwrap();
                assert_eq!(target.uri, want_uri, "{uri}, round {round}");
                assert_eq!(target.origin, want_origin, "{uri}, round {round}");
                assert_eq!(target.host, want_host, "{uri}, round {round}");
            }
        }
        assert_eq!(targets.len(), 4);
    }

    #[test]
    fn an_invalid_uri_is_refused_every_time_and_not_kept() {
        let mut targets = Targets::default();
        for uri in ["not a uri", "ftp://example.com/v1", "/v1/chat/completions"] {
            assert!(targets.get(uri, false).is_none(), "{uri}");
            assert!(targets.get(uri, false).is_none(), "{uri}");
        }
        assert_eq!(targets.len(), 0);
    }

    #[test]
    fn the_same_uri_over_http2_is_another_origin() {
        let mut targets = Targets::default();
        let uri = "http://127.0.0.1:9000/v1/chat/completions";
        let http1 = targets.get(uri, false).unwrap();
        let http2 = targets.get(uri, true).unwrap();
        assert!(!http1.origin.http2);
        assert!(http2.origin.http2);
        assert_ne!(http1.origin, http2.origin);
    }

    #[test]
    fn the_set_never_grows_past_its_bound() {
        let mut targets = Targets::default();
        for model in 0..MAX_TARGETS * 3 {
            let uri = format!("https://example.com/v1beta/models/m{model}:generateContent");
            assert!(targets.get(&uri, false).is_some());
            assert!(targets.len() <= MAX_TARGETS, "{} kept", targets.len());
        }
    }
}
