//! SigV4 signatures for Bedrock requests, made by `aws-sigv4` as AWS's SDKs make them: the
//! path double-encoded (the model id in it is encoded once already), the body hashed, and
//! `host`, `content-type`, `x-amz-date` and any session token signed.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use http::HeaderValue;
use http::header::HOST;

use crate::providers::UpstreamRequest;

/// The service name Bedrock's runtime signs under.
pub const SERVICE: &str = "bedrock";

/// Why a request could not be signed: its URI has no host, or a header value is not text.
#[derive(Debug, thiserror::Error)]
#[error("the request could not be signed: {0}")]
pub struct SignError(String);

/// Signs `request` in place for `region` at `time`: adds `host`, `x-amz-date`,
/// `authorization` and, for temporary credentials, `x-amz-security-token`.
pub fn sign_request(
    request: &mut UpstreamRequest,
    credentials: &Credentials,
    region: &str,
    time: SystemTime,
) -> Result<(), SignError> {
    sign_for(request, credentials, (region, SERVICE), time)
}

/// [`sign_request`] for any `(region, service)`: AWS's test suite signs for `service`.
fn sign_for(
    request: &mut UpstreamRequest,
    credentials: &Credentials,
    (region, service): (&str, &str),
    time: SystemTime,
) -> Result<(), SignError> {
    let uri: http::Uri = request
        .uri
        .parse()
        .map_err(|e: http::uri::InvalidUri| SignError(e.to_string()))?;
    let host = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .ok_or_else(|| SignError("the URI has no host".into()))?;
    // Signed and sent as one value, rather than left to the client and the signer to agree on.
    let host = HeaderValue::from_str(&host).map_err(|e| SignError(e.to_string()))?;
    request.headers.insert(HOST, host);
    let body = request.body.to_bytes();
    let mut signed = Vec::with_capacity(2);
    for name in ["host", "content-type"] {
        if let Some(value) = request.headers.get(name) {
            let value = value.to_str().map_err(|e| SignError(e.to_string()))?;
            signed.push((name, value));
        }
    }
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SignError(e.to_string()))?
        .into();
    let signable = SignableRequest::new(
        request.method.as_str(),
        &request.uri,
        signed.into_iter(),
        SignableBody::Bytes(&body),
    )
    .map_err(|e| SignError(e.to_string()))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| SignError(e.to_string()))?
        .into_parts();
    let (headers, _query) = instructions.into_parts();
    for header in headers {
        let mut value =
            HeaderValue::from_str(header.value()).map_err(|e| SignError(e.to_string()))?;
        // The signature and the session token never show in `Debug`.
        value.set_sensitive(header.sensitive() || header.name() == "authorization");
        let name = http::HeaderName::from_bytes(header.name().as_bytes())
            .map_err(|e| SignError(e.to_string()))?;
        request.headers.insert(name, value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::outbound::OutBody;

    fn fixture(case: &str, file: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/sigv4/{case}/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Cases of AWS's SigV4 test suite (tests/fixtures/sigv4) through this signing path: the
    /// request as `request.txt` has it, signed for `service` in us-east-1 at the suite's time
    /// with its credentials, must carry the signature AWS publishes.
    #[test]
    fn signs_the_aws_suite_cases_as_aws_does() {
        let time = httpdate::parse_http_date("Sun, 30 Aug 2015 12:36:00 GMT").unwrap();
        let cases = [
            ("get-vanilla", "GET", "/", None),
            ("post-vanilla", "POST", "/", None),
            (
                "get-vanilla-query-order-key-case",
                "GET",
                "/?Param2=value2&Param1=value1",
                None,
            ),
            (
                "get-vanilla-with-session-token",
                "GET",
                "/",
                Some("6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"),
            ),
        ];
        for (case, method, path, token) in cases {
            let mut request = UpstreamRequest::post(
                format!("https://example.amazonaws.com{path}"),
                OutBody::default(),
                false,
            );
            request.method = method.parse().unwrap();
            request.headers.clear();
            let credentials = Credentials::new(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                token.map(str::to_owned),
                None,
                "test",
            );
            sign_for(&mut request, &credentials, ("us-east-1", "service"), time).unwrap();
            let authorization = request.headers["authorization"].to_str().unwrap();
            let signature = authorization.rsplit_once("Signature=").unwrap().1;
            assert_eq!(
                signature,
                fixture(case, "header-signature.txt").trim(),
                "{case}"
            );
            assert!(!format!("{:?}", request.headers).contains(signature));
        }
    }

    #[test]
    fn a_bedrock_request_signs_its_content_type_host_and_date() {
        let time = httpdate::parse_http_date("Sun, 30 Aug 2015 12:36:00 GMT").unwrap();
        let mut request = UpstreamRequest::post(
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse".into(),
            bytes::Bytes::from_static(b"{}"),
            false,
        );
        let credentials = Credentials::new("AKID", "SECRET", None, None, "test");
        sign_request(&mut request, &credentials, "us-east-1", time).unwrap();
        let authorization = request.headers["authorization"].to_str().unwrap();
        assert!(authorization.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature="
        ), "{authorization}");
        assert_eq!(
            request.headers["host"],
            "bedrock-runtime.us-east-1.amazonaws.com"
        );
        assert_eq!(request.headers["x-amz-date"], "20150830T123600Z");
    }
}
