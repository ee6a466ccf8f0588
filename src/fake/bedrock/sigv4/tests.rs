//! The check against AWS's SigV4 test suite (tests/fixtures/sigv4): each case's signed request,
//! read as the fake would receive it, must give the suite's canonical request, string to sign
//! and signature byte for byte, and pass [`verify`]; changed, it must not.

use super::*;

fn fixture(case: &str, file: &str) -> Option<String> {
    let path = format!(
        "{}/tests/fixtures/sigv4/{case}/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).ok()
}

/// A request as the suite writes one: `METHOD target [HTTP/1.1]`, `Name:value` lines, a blank
/// line and the body.
struct Received {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn parse(text: &str) -> Received {
        let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
        let mut lines = head.lines();
        let (method, target) = lines.next().unwrap().split_once(' ').unwrap();
        let target = target.strip_suffix(" HTTP/1.1").unwrap_or(target);
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let headers = lines
            .filter(|line| !line.is_empty())
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap();
                (name.to_owned(), value.to_owned())
            })
            .collect();
        Received {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            headers,
            body: body.as_bytes().to_vec(),
        }
    }

    fn signed(case: &str) -> Received {
        Received::parse(&fixture(case, "header-signed-request.txt").unwrap())
    }

    fn request(&self) -> Request<'_> {
        Request {
            method: &self.method,
            path: &self.path,
            query: &self.query,
            headers: &self.headers,
            body: &self.body,
        }
    }

    fn authorization(&self) -> &str {
        let (_, value) = self
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
            .unwrap();
        value.trim()
    }

    fn now(&self) -> i64 {
        seconds(&header(&self.request(), "x-amz-date").unwrap()).unwrap()
    }
}

/// A case's credentials, region, service and time, from its `context.json`.
struct Context {
    credentials: Credentials,
    region: String,
    service: String,
    timestamp: String,
}

fn context(case: &str) -> Option<Context> {
    let json: serde_json::Value = serde_json::from_str(&fixture(case, "context.json")?).unwrap();
    let text = |pointer: &str| {
        json.pointer(pointer)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    Some(Context {
        credentials: Credentials {
            access_key_id: text("/credentials/access_key_id").unwrap(),
            secret_access_key: text("/credentials/secret_access_key").unwrap(),
            session_token: text("/credentials/token"),
        },
        region: text("/region").unwrap(),
        service: text("/service").unwrap(),
        timestamp: text("/timestamp").unwrap(),
    })
}

/// The suite's cases with a signed request; `double-url-encode` has no `context.json` nor
/// signature (its secret is not published), so only its canonical request and string to sign
/// are checked.
const CASES: [&str; 15] = [
    "get-vanilla",
    "post-vanilla",
    "get-vanilla-with-session-token",
    "post-header-key-sort",
    "get-header-value-trim",
    "get-header-key-duplicate",
    "get-vanilla-query-order-key-case",
    "get-vanilla-utf8-query",
    "get-utf8",
    "get-space-normalized",
    "get-slash-dot-slash-normalized",
    "get-slashes-normalized",
    "get-relative-relative-normalized",
    "post-x-www-form-urlencoded",
    "double-url-encode",
];

fn trimmed(text: Option<String>) -> String {
    text.unwrap().trim_end_matches('\n').to_owned()
}

#[test]
fn every_suite_case_signs_and_verifies_as_aws_says() {
    for case in CASES {
        let received = Received::signed(case);
        let request = received.request();
        let authorization = Authorization::parse(received.authorization()).unwrap();
        let context = context(case);
        let secret = context
            .as_ref()
            .map_or("", |c| c.credentials.secret_access_key.as_str());
        let signing = signing(&request, &authorization, secret);
        assert_eq!(
            signing.canonical_request,
            trimmed(fixture(case, "header-canonical-request.txt")),
            "{case}: canonical request"
        );
        assert_eq!(
            signing.string_to_sign,
            trimmed(fixture(case, "header-string-to-sign.txt")),
            "{case}: string to sign"
        );
        let Some(context) = context else { continue };
        let signature = trimmed(fixture(case, "header-signature.txt"));
        assert_eq!(signing.signature(), signature, "{case}: signature");
        assert_eq!(authorization.signature, signature, "{case}: as sent");
        assert_eq!(
            (authorization.region, authorization.service),
            (context.region.as_str(), context.service.as_str())
        );
        assert_eq!(
            amz(received.now()),
            context.timestamp.replace(['-', ':'], ""),
            "{case}: time"
        );
        assert_eq!(
            verify(&request, &context.credentials, "service", received.now()),
            Ok(()),
            "{case}: verify"
        );
    }
}

#[test]
fn paths_are_encoded_twice_and_normalized() {
    // The suite's `double-encode-path` signs a time its canonical request does not show, so
    // only its URI is compared.
    let received = Received::signed("double-encode-path");
    let expected = trimmed(fixture(
        "double-encode-path",
        "header-canonical-request.txt",
    ));
    assert_eq!(
        canonical_uri(&received.path),
        expected.lines().nth(1).unwrap()
    );
    assert_eq!(
        canonical_uri("/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"),
        "/model/us.anthropic.claude-3-5-haiku-20241022-v1%253A0/converse-stream"
    );
    assert_eq!(canonical_uri(""), "/");
    assert_eq!(canonical_uri("/a/b/.."), "/a/");
    assert_eq!(canonical_uri("/../a"), "/a");
}

fn credentials(case: &str) -> Credentials {
    context(case).unwrap().credentials
}

fn refusal(received: &Received, credentials: &Credentials, now: i64) -> Refusal {
    verify(&received.request(), credentials, "service", now).unwrap_err()
}

#[test]
fn a_changed_request_or_a_wrong_secret_does_not_verify() {
    let mut received = Received::signed("get-header-value-trim");
    let now = received.now();
    received.headers[1].1 = "value2".into();
    let Refusal::Invalid(message) = refusal(&received, &credentials("get-header-value-trim"), now)
    else {
        panic!("a changed header passed")
    };
    assert!(message.starts_with("The request signature we calculated does not match"));
    assert!(message.contains("my-header1:value2\n"), "{message}");

    let received = Received::signed("get-vanilla");
    let mut wrong = credentials("get-vanilla");
    wrong.secret_access_key.push('x');
    assert!(matches!(
        refusal(&received, &wrong, received.now()),
        Refusal::Invalid(_)
    ));
    let mut post = Received::signed("post-x-www-form-urlencoded");
    post.body = b"Param1=value2".to_vec();
    let Refusal::Invalid(message) = refusal(
        &post,
        &credentials("post-x-www-form-urlencoded"),
        post.now(),
    ) else {
        panic!("a changed body passed")
    };
    assert!(message.contains("x-amz-content-sha256"), "{message}");
}

#[test]
fn keys_scopes_times_and_tokens_are_checked() {
    let received = Received::signed("get-vanilla");
    let now = received.now();
    let mut stranger = credentials("get-vanilla");
    stranger.access_key_id = "AKIDOTHER".into();
    assert_eq!(refusal(&received, &stranger, now), Refusal::UnknownKey);

    let ours = credentials("get-vanilla");
    let Err(Refusal::Invalid(scope)) = verify(&received.request(), &ours, "bedrock", now) else {
        panic!("a request for another service passed")
    };
    assert!(scope.contains("'bedrock'"), "{scope}");

    let Refusal::Invalid(late) = refusal(&received, &ours, now + 301) else {
        panic!("a stale signature passed")
    };
    assert_eq!(
        late,
        "Signature expired: 20150830T123600Z is now earlier than 20150830T123601Z \
         (20150830T124101Z - 5 min.)"
    );
    assert!(matches!(
        refusal(&received, &ours, now - 301),
        Refusal::Invalid(_)
    ));
    assert_eq!(
        verify(&received.request(), &ours, "service", now + 300),
        Ok(())
    );

    let mut anonymous = Received::signed("get-vanilla");
    anonymous
        .headers
        .retain(|(name, _)| name != "Authorization");
    assert_eq!(refusal(&anonymous, &ours, now), Refusal::Missing);

    // Temporary credentials: the token must come, and be signed.
    let with_token = credentials("get-vanilla-with-session-token");
    assert_eq!(refusal(&received, &with_token, now), Refusal::UnknownKey);
    let mut unsigned = Received::signed("get-vanilla");
    let token = with_token.session_token.clone().unwrap();
    unsigned
        .headers
        .push(("X-Amz-Security-Token".into(), token));
    assert!(matches!(
        refusal(&unsigned, &with_token, now),
        Refusal::Invalid(_)
    ));
}

#[test]
fn unreadable_authorizations_are_incomplete() {
    for value in [
        "Bearer abc",
        "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=00",
        "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/service, SignedHeaders=host, Signature=00",
    ] {
        assert!(
            matches!(Authorization::parse(value), Err(Refusal::Incomplete(_))),
            "{value}"
        );
    }
}

#[test]
fn amz_dates_round_trip() {
    let at = seconds("20280229T235959Z").unwrap();
    assert_eq!(amz(at), "20280229T235959Z");
    assert_eq!(amz(at + 1), "20280301T000000Z");
    for bad in [
        "20150830T123600",
        "2015-08-30T12:36:00Z",
        "20151330T123600Z",
    ] {
        assert_eq!(seconds(bad), None, "{bad}");
    }
}
