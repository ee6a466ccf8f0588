//! `[otel]`, with the OpenTelemetry specification's environment variables as its defaults:
//! the file says what it sets, and the environment fills in the rest.

use std::time::Duration;

use super::Errors;
use crate::config::raw::RawOtel;
use crate::config::{OtelConfig, OtelProtocol, SemConv};
use crate::secret::Secret;

/// `[otel]`; `env` reads an environment variable (the process's, or a test's own).
pub(super) fn otel(
    errors: &mut Errors,
    raw: RawOtel,
    env: &dyn Fn(&str) -> Option<String>,
) -> OtelConfig {
    let defaults = OtelConfig::default();
    // Either name, the traces' own first, as the specification orders them.
    let either =
        |traces: &str, all: &str| env(traces).or_else(|| env(all)).filter(|v| !v.is_empty());
    let protocol_name = raw.protocol.or_else(|| {
        either(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        )
    });
    let protocol = match protocol_name.as_deref() {
        None | Some("http/protobuf") => OtelProtocol::HttpProtobuf,
        Some("grpc") => OtelProtocol::Grpc,
        Some(other) => {
            errors.add(
                "otel.protocol",
                format!("`{other}` is not one of `http/protobuf`, `grpc`"),
            );
            OtelProtocol::HttpProtobuf
        }
    };
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none");
    let endpoint = match raw.endpoint {
        Some(base) => Some(signal_url(&base, protocol)),
        None => match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").filter(|v| !v.is_empty()) {
            // The traces' own variable is the whole URL already.
            Some(url) => Some(url),
            None => env("OTEL_EXPORTER_OTLP_ENDPOINT")
                .filter(|v| !v.is_empty())
                .map(|base| signal_url(&base, protocol)),
        },
    }
    .filter(|_| !disabled);
    if let Some(url) = &endpoint {
        match url::Url::parse(url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
                if parsed.query().is_some() || !parsed.username().is_empty() {
                    errors.add(
                        "otel.endpoint",
                        "must not carry credentials or a query: use otel.headers_env",
                    );
                }
            }
            _ => errors.add(
                "otel.endpoint",
                "is not an http:// or https:// URL like http://127.0.0.1:4318",
            ),
        }
    }
    // The specification's header variables may be meant for other software on the host:
    // read only when spans go somewhere.
    let mut headers = match endpoint {
        Some(_) => env_headers(errors, env),
        None => Vec::new(),
    };
    for (name, variable) in raw.headers_env.unwrap_or_default() {
        let field = format!("otel.headers_env.{name}");
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            errors.add(field, "is not a header name");
            continue;
        }
        match env(&variable).filter(|v| !v.is_empty()) {
            Some(value) if http::HeaderValue::from_str(&value).is_ok() => {
                let name = name.to_ascii_lowercase();
                headers.retain(|(have, _)| *have != name);
                headers.push((name, Secret::new(value)));
            }
            // Only the variable's name is repeated, never its value.
            Some(_) => errors.add(field, format!("`{variable}` is not a header value")),
            None => errors.add(
                field,
                format!("the environment variable `{variable}` is not set"),
            ),
        }
    }
    let sample_ratio = match raw.sample_ratio {
        Some(ratio) => ratio,
        None => env_ratio(env).unwrap_or(defaults.sample_ratio),
    };
    if !(0.0..=1.0).contains(&sample_ratio) {
        errors.add("otel.sample_ratio", "must be between 0 and 1");
    }
    let max_queue_spans = raw.max_queue_spans.unwrap_or(defaults.max_queue_spans);
    if max_queue_spans == 0 {
        errors.add("otel.max_queue_spans", "must be greater than 0");
    }
    let timeout = match raw.timeout {
        Some(text) => errors.duration("otel.timeout", Some(&text), defaults.timeout),
        // The specification's timeout variables are whole milliseconds.
        None => either(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        )
        .filter(|_| endpoint.is_some())
        .and_then(|ms| ms.trim().parse().ok())
        .map(Duration::from_millis)
        // Out of range from the environment: the default, rather than a load error naming
        // a field the file never set.
        .filter(|t| !t.is_zero() && *t <= Duration::from_secs(60))
        .unwrap_or(defaults.timeout),
    };
    if timeout.is_zero() || timeout > Duration::from_secs(60) {
        errors.add("otel.timeout", "must be between 1ms and 60s");
    }
    let max_content_bytes = raw.max_content_bytes.unwrap_or(defaults.max_content_bytes);
    if max_content_bytes == 0 {
        errors.add(
            "otel.max_content_bytes",
            "must be greater than 0 (capture_content = false captures none)",
        );
    }
    let semconv = match raw.semconv.as_deref() {
        None | Some("1.37") => SemConv::V1_37,
        Some("1.36") => SemConv::V1_36,
        Some(other) => {
            errors.add(
                "otel.semconv",
                format!("`{other}` is not one of `1.37`, `1.36`"),
            );
            SemConv::V1_37
        }
    };
    OtelConfig {
        endpoint,
        protocol,
        headers,
        service_name: raw.service_name,
        resource: raw.resource.unwrap_or_default().into_iter().collect(),
        sample_ratio,
        max_queue_spans,
        timeout,
        capture_content: raw.capture_content.unwrap_or(false),
        max_content_bytes,
        semconv,
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (else `OTEL_EXPORTER_OTLP_HEADERS`): `name=value`
/// pairs, comma-separated, values percent-encoded, as the specification writes them. A pair
/// that cannot be read is refused by the variable's name, never with its value.
fn env_headers(errors: &mut Errors, env: &dyn Fn(&str) -> Option<String>) -> Vec<(String, Secret)> {
    let (variable, list) = match env("OTEL_EXPORTER_OTLP_TRACES_HEADERS").filter(|v| !v.is_empty())
    {
        Some(list) => ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", list),
        None => match env("OTEL_EXPORTER_OTLP_HEADERS").filter(|v| !v.is_empty()) {
            Some(list) => ("OTEL_EXPORTER_OTLP_HEADERS", list),
            None => return Vec::new(),
        },
    };
    let mut headers = Vec::new();
    for (index, pair) in list.split(',').filter(|p| !p.trim().is_empty()).enumerate() {
        let read = pair.split_once('=').and_then(|(name, value)| {
            let name = name.trim().to_ascii_lowercase();
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .ok()?
                .into_owned();
            let valid = http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                && http::HeaderValue::from_str(&value).is_ok();
            valid.then(|| (name, Secret::new(value)))
        });
        match read {
            Some(header) => headers.push(header),
            None => errors.add(
                "otel",
                format!(
                    "`{variable}`: pair {} is not a `name=value` header",
                    index + 1
                ),
            ),
        }
    }
    headers
}

/// The traces' URL at a base endpoint: OTLP/HTTP's `/v1/traces` path added, as the
/// specification adds it to `OTEL_EXPORTER_OTLP_ENDPOINT`; gRPC's as it is.
fn signal_url(base: &str, protocol: OtelProtocol) -> String {
    match protocol {
        OtelProtocol::Grpc => base.to_owned(),
        OtelProtocol::HttpProtobuf if base.ends_with("/v1/traces") => base.to_owned(),
        OtelProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
    }
}

/// `OTEL_TRACES_SAMPLER_ARG`, when `OTEL_TRACES_SAMPLER` is a ratio sampler.
fn env_ratio(env: &dyn Fn(&str) -> Option<String>) -> Option<f64> {
    let sampler = env("OTEL_TRACES_SAMPLER")?;
    match sampler.as_str() {
        "always_on" | "parentbased_always_on" => Some(1.0),
        "always_off" | "parentbased_always_off" => Some(0.0),
        "traceidratio" | "parentbased_traceidratio" => {
            env("OTEL_TRACES_SAMPLER_ARG").and_then(|arg| arg.parse().ok())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str, vars: &[(&str, &str)]) -> Result<OtelConfig, Vec<String>> {
        let raw: RawOtel = toml::from_str(text).unwrap();
        let mut errors = Errors::default();
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let config = otel(&mut errors, raw, &env);
        match errors.found.is_empty() {
            true => Ok(config),
            false => Err(errors.found.iter().map(|e| e.to_string()).collect()),
        }
    }

    #[test]
    fn off_unless_an_endpoint_is_named_in_the_file_or_the_environment() {
        assert_eq!(resolve("", &[]).unwrap().endpoint, None);
        let filed = resolve("endpoint = \"http://collector:4318/\"", &[]).unwrap();
        assert_eq!(
            filed.endpoint.as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        let base = resolve("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap();
        assert_eq!(base.endpoint.as_deref(), Some("http://c:4318/v1/traces"));
        let own = [
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ];
        assert_eq!(
            resolve("", &own).unwrap().endpoint.as_deref(),
            Some("http://t:4318/custom")
        );
        let grpc = resolve("endpoint = \"http://c:4317\"\nprotocol = \"grpc\"", &[]).unwrap();
        assert_eq!(
            (grpc.endpoint.as_deref(), grpc.protocol),
            (Some("http://c:4317"), OtelProtocol::Grpc)
        );
        let disabled = [("OTEL_SDK_DISABLED", "true")];
        assert_eq!(
            resolve("endpoint = \"http://c:4318\"", &disabled)
                .unwrap()
                .endpoint,
            None
        );
    }

    #[test]
    fn headers_come_from_the_environment_and_never_show() {
        let config = resolve(
            "endpoint = \"http://c:4318\"\nheaders_env = { \"x-honeycomb-team\" = \"HC_KEY\" }",
            &[("HC_KEY", "hc-secret-1")],
        )
        .unwrap();
        assert_eq!(config.headers[0].0, "x-honeycomb-team");
        assert_eq!(config.headers[0].1.expose(), "hc-secret-1");
        assert!(!format!("{config:?}").contains("hc-secret-1"));
        let errors = resolve("headers_env = { \"x-key\" = \"UNSET_VAR\" }", &[]).unwrap_err();
        assert_eq!(
            errors,
            ["otel.headers_env.x-key: the environment variable `UNSET_VAR` is not set"]
        );
    }

    #[test]
    fn bad_values_are_refused_by_field() {
        let errors = resolve(
            "endpoint = \"ftp://c\"\nprotocol = \"http/json\"\nsample_ratio = 1.5\ntimeout = \"0s\"",
            &[],
        )
        .unwrap_err();
        assert_eq!(
            errors,
            [
                "otel.protocol: `http/json` is not one of `http/protobuf`, `grpc`",
                "otel.endpoint: is not an http:// or https:// URL like http://127.0.0.1:4318",
                "otel.sample_ratio: must be between 0 and 1",
                "otel.timeout: must be between 1ms and 60s"
            ]
        );
        let keyed = resolve("endpoint = \"https://c/v1/traces?key=s3cret\"", &[]).unwrap_err();
        assert_eq!(
            keyed,
            ["otel.endpoint: must not carry credentials or a query: use otel.headers_env"]
        );
    }

    #[test]
    fn the_sampler_variables_set_the_ratio_when_the_file_does_not() {
        let vars = [
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ];
        assert_eq!(resolve("", &vars).unwrap().sample_ratio, 0.25);
        assert_eq!(
            resolve("sample_ratio = 0.5", &vars).unwrap().sample_ratio,
            0.5
        );
    }

    #[test]
    fn the_specifications_header_and_timeout_variables_apply_and_the_file_wins() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=hc%20key,x-other=2"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ];
        let config = resolve(
            "endpoint = \"http://c:4318\"\nheaders_env = { \"x-other\" = \"MINE\" }",
            &[vars[0], vars[1], ("MINE", "from-file")],
        )
        .unwrap();
        let headers: Vec<(&str, &str)> = config
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.expose()))
            .collect();
        assert_eq!(headers, [("x-team", "hc key"), ("x-other", "from-file")]);
        assert_eq!(config.timeout, Duration::from_millis(2500));
        let traces_own = [
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=1"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-b=2"),
        ];
        let endpoint = "endpoint = \"http://c:4318\"";
        assert_eq!(resolve(endpoint, &traces_own).unwrap().headers[0].0, "x-a");
        let broken = [("OTEL_EXPORTER_OTLP_HEADERS", "x-a=1,no-equals-secret")];
        assert!(
            resolve("", &broken).is_ok(),
            "read only when spans go somewhere"
        );
        let errors = resolve(endpoint, &broken).unwrap_err();
        assert_eq!(
            errors,
            ["otel: `OTEL_EXPORTER_OTLP_HEADERS`: pair 2 is not a `name=value` header"]
        );
    }

    #[test]
    fn content_is_off_unless_asked_and_the_conventions_version_is_named() {
        let default = resolve("", &[]).unwrap();
        assert!(!default.capture_content);
        assert_eq!(default.semconv, SemConv::V1_37);
        let on = resolve(
            "capture_content = true\nmax_content_bytes = 100\nsemconv = \"1.36\"",
            &[],
        )
        .unwrap();
        assert_eq!(
            (on.capture_content, on.max_content_bytes, on.semconv),
            (true, 100, SemConv::V1_36)
        );
        let errors = resolve("max_content_bytes = 0\nsemconv = \"2\"", &[]).unwrap_err();
        assert_eq!(
            errors,
            [
                "otel.max_content_bytes: must be greater than 0 (capture_content = false captures none)",
                "otel.semconv: `2` is not one of `1.37`, `1.36`"
            ]
        );
    }
}
