//! AWS Signature Version 4, checked by hand: the fake recomputes a request's signature from
//! the spec alone, never with the `aws-sigv4` crate the gateway signs with, so the two agree
//! only if both follow AWS. AWS's own test suite (tests/fixtures/sigv4) proves this side.
//!
//! [`signing`] is the pure core: from a request as received and the parts of its
//! `Authorization` header, the canonical request, the string to sign and the signature.
//! [`verify`] adds the checks around it (key, scope, time, session token, payload hash).

use ring::hmac;
use sha2::{Digest, Sha256};

/// How far `x-amz-date` may be from the fake's clock, either way.
const CLOCK_SKEW_SECONDS: i64 = 5 * 60;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// A request as the fake received it: what its signature covers.
pub struct Request<'a> {
    pub method: &'a str,
    /// The path as it arrived, percent-encoded once by the client.
    pub path: &'a str,
    /// The query as it arrived, without its `?` (empty when there is none).
    pub query: &'a str,
    /// Every header in the order received (a repeated name repeats); names in any case.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// The one identity the fake knows.
#[derive(Clone)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Temporary credentials' token, which each request must then carry, signed.
    pub session_token: Option<String>,
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…,
/// Signature=…` header.
#[derive(Debug, PartialEq, Eq)]
pub struct Authorization<'a> {
    pub access_key_id: &'a str,
    /// `YYYYMMDD`, from the credential scope.
    pub date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    /// Lowercase names, in the header's order.
    pub signed_headers: Vec<&'a str>,
    /// Lowercase hex.
    pub signature: &'a str,
}

/// What a signature is computed from, and the key that signs it.
pub struct Signing {
    pub canonical_request: String,
    pub string_to_sign: String,
    key: hmac::Key,
}

impl Signing {
    /// Whether `signature` (hex) is this request's; `hmac::verify` compares in constant time.
    pub fn matches(&self, signature: &str) -> bool {
        unhex(signature).is_some_and(|given| {
            hmac::verify(&self.key, self.string_to_sign.as_bytes(), &given).is_ok()
        })
    }

    /// The signature, in hex.
    #[cfg(test)]
    pub fn signature(&self) -> String {
        hex(hmac::sign(&self.key, self.string_to_sign.as_bytes()).as_ref())
    }
}

/// Why a request is refused, each as AWS names it.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization` header: `MissingAuthenticationTokenException`.
    Missing,
    /// An `Authorization` header that cannot be read, or leaves out what must be signed:
    /// `IncompleteSignatureException`.
    Incomplete(String),
    /// An access key id (or session token) the fake does not know: `UnrecognizedClientException`.
    UnknownKey,
    /// Out of time, wrong scope, or a signature that does not match:
    /// `InvalidSignatureException`.
    Invalid(String),
}

impl Authorization<'_> {
    /// Reads an `Authorization` header's value.
    pub fn parse(value: &str) -> Result<Authorization<'_>, Refusal> {
        let incomplete = |what: &str| {
            Refusal::Incomplete(format!(
                "Authorization header requires '{what}' parameter. Authorization={value}"
            ))
        };
        let rest = value
            .strip_prefix(ALGORITHM)
            .filter(|rest| rest.starts_with(' '))
            .ok_or_else(|| {
                Refusal::Incomplete(format!("Unsupported authorization type: {value}"))
            })?;
        let field = |name: &str| {
            rest.split(',')
                .map(str::trim)
                .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
        };
        let credential = field("Credential").ok_or_else(|| incomplete("Credential"))?;
        let signed_headers = field("SignedHeaders").ok_or_else(|| incomplete("SignedHeaders"))?;
        let signature = field("Signature").ok_or_else(|| incomplete("Signature"))?;
        let scope: Vec<&str> = credential.split('/').collect();
        let [access_key_id, date, region, service, "aws4_request"] = scope[..] else {
            return Err(Refusal::Incomplete(format!(
                "Credential should be scoped to a valid region, not to '{credential}'."
            )));
        };
        Ok(Authorization {
            access_key_id,
            date,
            region,
            service,
            signed_headers: signed_headers.split(';').collect(),
            signature,
        })
    }
}

/// Checks `request`'s signature for `service` against `credentials`, at `now` (seconds since
/// the Unix epoch).
pub fn verify(
    request: &Request,
    credentials: &Credentials,
    service: &str,
    now: i64,
) -> Result<(), Refusal> {
    let authorization = header(request, "authorization").ok_or(Refusal::Missing)?;
    let authorization = Authorization::parse(&authorization)?;
    if authorization.access_key_id != credentials.access_key_id {
        return Err(Refusal::UnknownKey);
    }
    for needed in ["host", "x-amz-date"] {
        if !authorization.signed_headers.contains(&needed) {
            return Err(Refusal::Incomplete(format!(
                "'{needed}' must be a 'SignedHeader' in the AWS Authorization."
            )));
        }
    }
    let amz_date = header(request, "x-amz-date").unwrap_or_default();
    let signed_at = seconds(&amz_date).ok_or_else(|| {
        Refusal::Incomplete(format!("X-Amz-Date '{amz_date}' is not a valid date."))
    })?;
    check_time(&amz_date, signed_at, now)?;
    if amz_date.get(..8) != Some(authorization.date) || authorization.service != service {
        return Err(Refusal::Invalid(format!(
            "Credential should be scoped to a valid date and to the service '{service}'."
        )));
    }
    if let Some(token) = &credentials.session_token {
        let sent = header(request, "x-amz-security-token");
        if sent.as_deref() != Some(token) {
            return Err(Refusal::UnknownKey);
        }
        if !authorization
            .signed_headers
            .contains(&"x-amz-security-token")
        {
            return Err(Refusal::Invalid(
                "'x-amz-security-token' must be a 'SignedHeader'.".into(),
            ));
        }
    }
    if let Some(claimed) = header(request, "x-amz-content-sha256")
        && claimed != hex(&Sha256::digest(request.body))
    {
        return Err(Refusal::Invalid(
            "The provided 'x-amz-content-sha256' header does not match what was computed.".into(),
        ));
    }
    let signing = signing(request, &authorization, &credentials.secret_access_key);
    if signing.matches(authorization.signature) {
        return Ok(());
    }
    Err(Refusal::Invalid(format!(
        "The request signature we calculated does not match the signature you provided. \
         Check your AWS Secret Access Key and signing method. Consult the service documentation \
         for details.\n\nThe Canonical String for this request should have been\n'{}'\n\n\
         The String-to-Sign should have been\n'{}'\n",
        signing.canonical_request, signing.string_to_sign
    )))
}

fn check_time(amz_date: &str, signed_at: i64, now: i64) -> Result<(), Refusal> {
    if signed_at < now - CLOCK_SKEW_SECONDS {
        let (earliest, now) = (amz(now - CLOCK_SKEW_SECONDS), amz(now));
        return Err(Refusal::Invalid(format!(
            "Signature expired: {amz_date} is now earlier than {earliest} ({now} - 5 min.)"
        )));
    }
    if signed_at > now + CLOCK_SKEW_SECONDS {
        let (latest, now) = (amz(now + CLOCK_SKEW_SECONDS), amz(now));
        return Err(Refusal::Invalid(format!(
            "Signature not yet current: {amz_date} is still later than {latest} ({now} + 5 min.)"
        )));
    }
    Ok(())
}

/// The canonical request and string to sign of `request` as `authorization` describes its
/// signing, and the key `secret` signs it with.
pub fn signing(request: &Request, authorization: &Authorization, secret: &str) -> Signing {
    let canonical_request = canonical_request(request, &authorization.signed_headers);
    let amz_date = header(request, "x-amz-date").unwrap_or_default();
    let scope = format!(
        "{}/{}/{}/aws4_request",
        authorization.date, authorization.region, authorization.service
    );
    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = signing_key(
        secret,
        authorization.date,
        authorization.region,
        authorization.service,
    );
    Signing {
        canonical_request,
        string_to_sign,
        key,
    }
}

/// Method, URI, query, the signed headers and their names, and the payload's hash.
fn canonical_request(request: &Request, signed_headers: &[&str]) -> String {
    let headers: String = signed_headers
        .iter()
        .map(|name| format!("{name}:{}\n", header(request, name).unwrap_or_default()))
        .collect();
    let payload_hash = header(request, "x-amz-content-sha256")
        .unwrap_or_else(|| hex(&Sha256::digest(request.body)));
    format!(
        "{}\n{}\n{}\n{headers}\n{}\n{payload_hash}",
        request.method,
        canonical_uri(request.path),
        canonical_query(request.query),
        signed_headers.join(";"),
    )
}

/// The path with its dot segments and empty segments removed, then each segment encoded
/// again: services other than S3 sign the path encoded twice, the client's encoding and this.
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            kept => segments.push(kept),
        }
    }
    let mut uri: String = segments.iter().map(|s| format!("/{}", encode(s))).collect();
    let trailing = ["/", "/.", "/.."].iter().any(|end| path.ends_with(end));
    if uri.is_empty() || trailing {
        uri.push('/');
    }
    uri
}

/// Each name and value decoded, encoded AWS's way, and the pairs sorted.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| percent_encoding::percent_decode_str(s).collect::<Vec<u8>>();
            (encode_bytes(&decode(name)), encode_bytes(&decode(value)))
        })
        .collect();
    pairs.sort();
    let pairs: Vec<String> = pairs
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    pairs.join("&")
}

/// A header's canonical value: every value it came with, trimmed, inner runs of spaces made
/// one, joined by commas. `None` when the request has no such header.
fn header(request: &Request, name: &str) -> Option<String> {
    let values: Vec<String> = request
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// The key for one day, region and service: HMAC-SHA256 chained from `"AWS4" + secret`.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let mut key = format!("AWS4{secret}").into_bytes();
    for part in [date, region, service, "aws4_request"] {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), part.as_bytes());
        key = tag.as_ref().to_vec();
    }
    hmac::Key::new(hmac::HMAC_SHA256, &key)
}

/// URI-encodes as SigV4 does: all but `A-Z a-z 0-9 - _ . ~`, as `%XX` in upper case.
fn encode(text: &str) -> String {
    encode_bytes(text.as_bytes())
}

fn encode_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// Seconds since the Unix epoch of an `x-amz-date` (`YYYYMMDDTHHMMSSZ`).
pub fn seconds(amz_date: &str) -> Option<i64> {
    let bytes = amz_date.as_bytes();
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = amz_date.get(range)?;
        digits.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
        digits.parse().ok()
    };
    let (year, month, day) = (number(0..4)?, number(4..6)?, number(6..8)?);
    let (hour, minute, second) = (number(9..11)?, number(11..13)?, number(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let days = crate::calendar::days_from_civil(year, month, day)?;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// The `x-amz-date` of a time in seconds since the Unix epoch.
pub fn amz(seconds: i64) -> String {
    // A test clock's seconds: always within chrono's range of years.
    let (year, month, day) =
        crate::calendar::civil_from_days(seconds.div_euclid(86_400)).unwrap_or((1970, 1, 1));
    let time = seconds.rem_euclid(86_400);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        time / 3_600,
        time / 60 % 60,
        time % 60
    )
}

#[cfg(test)]
mod tests;
