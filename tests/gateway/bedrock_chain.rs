//! Where a Bedrock step's AWS credentials come from, run for real: the `switchyard` binary as
//! a process with the environment each case gives it, in front of a fake Bedrock that checks
//! every SigV4 signature and issues credentials as STS (web identity) and ECS do.
//!
//! Every process is cut off from the machine's own AWS setup: its shared config and
//! credentials files are paths that do not exist, EC2 instance metadata is off, `HOME` is the
//! test's own directory, and no `AWS_*` variable reaches it but the case's.

use std::time::Duration;

use serde_json::Value;
use switchyard::fake::{Behavior, FakeHandle, FakeUpstream};

use super::process::{Served, TempDir, serve_without};
use super::support::*;

const KEY_ID: &str = "AKIDCHAINTEST0000001";
const SECRET: &str = "chainSecretKey/K7MDENG+bPxRfiCYCHAINTEST";
const TOKEN: &str = "IQoJb3JpZ2luX2VjECHAINSESSIONTOKENFORTESTS";
const WEB_IDENTITY_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.fake-oidc-token-for-switchyard.c2ln";
const ROLE_ARN: &str = "arn:aws:iam::123456789012:role/switchyard-bedrock";
const MODEL: &str = "us.anthropic.claude-3-5-haiku-20241022-v1:0";

/// A fake Bedrock that takes only `KEY_ID`'s signatures with `TOKEN`; given a lifetime, it
/// also issues those credentials, for that long, to `WEB_IDENTITY_TOKEN` (STS) and to any
/// container (ECS).
async fn bedrock_fake(issued_for: Option<Duration>) -> FakeHandle {
    let fake = FakeUpstream::new("bedrock").aws_credentials(KEY_ID, SECRET, Some(TOKEN));
    let fake = match issued_for {
        Some(lifetime) => fake.aws_credential_issuer(WEB_IDENTITY_TOKEN, lifetime),
        None => fake,
    };
    fake.start().await.unwrap()
}

/// A gateway on an ephemeral port with Bedrock provider `b` at `fake` (`extra` lines its
/// own), ahead of the routes the caller adds.
fn bedrock_config(fake: &FakeHandle, extra: &str) -> TestGateway {
    TestGateway::new()
        .with("[server]\nlisten = \"127.0.0.1:0\"\ndrain_delay = \"0s\"\n")
        .with("[[providers]]\nname = \"b\"\nkind = \"bedrock\"\n")
        .set("base_url", fake.root_url())
        .set("region", "us-west-2")
        .with(extra)
}

/// The gateway as a process on `config`, with only the AWS setup that `aws` gives it.
fn serve_isolated(dir: &TempDir, config: &TestGateway, aws: &[(&str, &str)]) -> Served {
    let path = dir.0.join("switchyard.toml");
    std::fs::write(&path, config.text()).unwrap();
    let absent = |name: &str| dir.0.join(name).display().to_string();
    let (config_file, credentials_file) = (absent("no-aws-config"), absent("no-aws-credentials"));
    let home = dir.0.display().to_string();
    let mut env = vec![
        ("AWS_CONFIG_FILE", config_file.as_str()),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials_file.as_str()),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("HOME", home.as_str()),
        // Debug, so that a credential logged at any level this side of trace is caught.
        ("SWITCHYARD_LOG", "debug"),
    ];
    env.extend_from_slice(aws);
    let inherited: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.starts_with("AWS_"))
        .collect();
    let removed: Vec<&str> = inherited.iter().map(String::as_str).collect();
    serve_without(&dir.0, &path, &env, &removed)
}

/// The web identity setup of EKS (IRSA), with `token` in its token file and STS at `fake`.
fn web_identity(dir: &TempDir, fake: &FakeHandle, token: &str) -> Vec<(&'static str, String)> {
    let token_file = dir.0.join("web-identity-token");
    std::fs::write(&token_file, token).unwrap();
    vec![
        (
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            token_file.display().to_string(),
        ),
        ("AWS_ROLE_ARN", ROLE_ARN.to_owned()),
        ("AWS_ROLE_SESSION_NAME", "switchyard-test".to_owned()),
        // STS at the fake. No `AWS_REGION`: the gateway gives the chain the provider's
        // `region` (without it, and without an endpoint override, STS's client had none).
        ("AWS_ENDPOINT_URL_STS", fake.root_url()),
    ]
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect()
}

/// A chat request for route `r`, sent to the gateway at `url`.
async fn ask(client: &reqwest::Client, url: &str) -> reqwest::Response {
    client
        .post(format!("{url}/v1/chat/completions"))
        .json(&chat("r"))
        .send()
        .await
        .unwrap()
}

/// `count` chat requests sent at once; their statuses.
async fn ask_at_once(client: &reqwest::Client, url: &str, count: usize) -> Vec<u16> {
    let sent: Vec<_> = (0..count)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move { ask(&client, &url).await.status().as_u16() })
        })
        .collect();
    let mut statuses = Vec::with_capacity(count);
    for request in sent {
        statuses.push(request.await.unwrap());
    }
    statuses
}

/// Stops the gateway as an operator would (so it flushes its log); every log line it wrote
/// after it said where it listens.
fn log_of(mut served: Served) -> Vec<String> {
    served.signal("TERM");
    let _ = served.child.wait();
    // The process has exited, so its stderr has ended and the reader's channel closes.
    served.lines.iter().collect()
}

fn assert_no_secret_in(log: &[String]) {
    for line in log {
        for secret in [SECRET, TOKEN, WEB_IDENTITY_TOKEN] {
            assert!(!line.contains(secret), "a credential in the log: {line}");
        }
    }
}

/// Whether the fake's first Bedrock request was signed by `KEY_ID` with `TOKEN` (the fake
/// checked the signature itself).
fn signed_by_the_account(fake: &FakeHandle) -> bool {
    let requests = fake.requests();
    let Some(request) = requests.first() else {
        return false;
    };
    request.headers["authorization"].contains(&format!("Credential={KEY_ID}/"))
        && request.headers["x-amz-security-token"] == TOKEN
}

#[tokio::test]
async fn the_providers_own_variables_sign_and_never_show_in_the_log() {
    let fake = bedrock_fake(None).await;
    let dir = TempDir::new();
    let config = bedrock_config(
        &fake,
        "access_key_id_env = \"MY_KEY_ID\"\nsecret_access_key_env = \"MY_SECRET\"\n\
         session_token_env = \"MY_TOKEN\"\n",
    )
    .route("r", &[("b", MODEL)], "");
    let env = [
        ("MY_KEY_ID", KEY_ID),
        ("MY_SECRET", SECRET),
        ("MY_TOKEN", TOKEN),
    ];
    let served = serve_isolated(&dir, &config, &env);
    let response = ask(&client(), &served.url).await;
    assert_eq!(response.status(), 200);
    assert!(signed_by_the_account(&fake));
    assert_no_secret_in(&log_of(served));
}

#[tokio::test]
async fn the_standard_variables_sign_through_the_default_chain() {
    let fake = bedrock_fake(None).await;
    let dir = TempDir::new();
    let config = bedrock_config(&fake, "").route("r", &[("b", MODEL)], "");
    let env = [
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", TOKEN),
    ];
    let served = serve_isolated(&dir, &config, &env);
    assert_eq!(ask(&client(), &served.url).await.status(), 200);
    assert!(signed_by_the_account(&fake));
    assert_no_secret_in(&log_of(served));
}

#[tokio::test]
async fn a_web_identity_is_exchanged_at_sts_for_credentials() {
    let fake = bedrock_fake(Some(Duration::from_secs(3600))).await;
    let dir = TempDir::new();
    let config = bedrock_config(&fake, "").route("r", &[("b", MODEL)], "");
    let env = web_identity(&dir, &fake, WEB_IDENTITY_TOKEN);
    let served = serve_isolated(&dir, &config, &borrowed(&env));
    let client = client();
    for _ in 0..3 {
        assert_eq!(ask(&client, &served.url).await.status(), 200);
    }
    assert!(signed_by_the_account(&fake));
    assert_eq!(
        fake.credentials_issued(),
        1,
        "an hour's credentials are reused"
    );
    assert_no_secret_in(&log_of(served));
}

#[tokio::test]
async fn a_container_gets_its_credentials_from_the_ecs_endpoint() {
    let fake = bedrock_fake(Some(Duration::from_secs(3600))).await;
    let dir = TempDir::new();
    let config = bedrock_config(&fake, "").route("r", &[("b", MODEL)], "");
    let uri = format!("{}/ecs-credentials", fake.root_url());
    let served = serve_isolated(
        &dir,
        &config,
        &[("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri)],
    );
    assert_eq!(ask(&client(), &served.url).await.status(), 200);
    assert!(signed_by_the_account(&fake));
    assert_eq!(fake.credentials_issued(), 1);
    assert_no_secret_in(&log_of(served));
}

/// Credentials that expire within the gateway's refresh margin are due at every use: a crowd
/// that finds them due costs one issuance, and so does each request after it; an hour's
/// credentials are then reused by a crowd of 50.
///
/// For the crowd to find the same credentials due, it must be waiting before the refresh
/// ends. So it is held at a first step (a fake that fails it, once all 50 are there), and
/// the refresh's STS answer is held until STS has the request. Nothing is left to the
/// clock; what is left to the scheduler is that the 49 released with the first reach the
/// credentials before that one STS answer has been sent, read and stored.
#[tokio::test]
async fn credentials_due_for_refresh_cost_one_issuance_per_crowd() {
    let fake = bedrock_fake(Some(Duration::from_secs(30))).await;
    let gate = scripted("gate", [Behavior::status(401)]).await;
    let dir = TempDir::new();
    let config = bedrock_config(&fake, "").provider("gate", &gate).route(
        "r",
        &[("gate", "m"), ("b", MODEL)],
        "",
    );
    let env = web_identity(&dir, &fake, WEB_IDENTITY_TOKEN);
    let served = serve_isolated(&dir, &config, &borrowed(&env));
    let client = client();

    gate.hold();
    fake.hold();
    let crowd = {
        let (client, url) = (client.clone(), served.url.clone());
        tokio::spawn(async move { ask_at_once(&client, &url, 50).await })
    };
    gate.wait_until(|s| s.calls == 50).await;
    gate.release();
    fake.wait_until(|s| s.credential_requests == 1).await;
    fake.release();
    assert!(crowd.await.unwrap().iter().all(|&status| status == 200));
    assert_eq!(fake.credentials_issued(), 1, "50 requests, one refresh");

    assert_eq!(ask(&client, &served.url).await.status(), 200);
    assert_eq!(fake.credentials_issued(), 2, "still due: refreshed again");

    fake.set_credential_lifetime(Duration::from_secs(3600));
    assert_eq!(ask(&client, &served.url).await.status(), 200);
    assert_eq!(fake.credentials_issued(), 3);
    let statuses = ask_at_once(&client, &served.url, 50).await;
    assert!(statuses.iter().all(|&status| status == 200));
    assert_eq!(
        fake.credentials_issued(),
        3,
        "an hour's credentials are not due"
    );
    assert_eq!(fake.calls(), 102, "every request reached Bedrock");
    assert_no_secret_in(&log_of(served));
}

#[tokio::test]
async fn a_refused_web_identity_is_no_key_and_the_chain_moves_on() {
    let fake = bedrock_fake(Some(Duration::from_secs(3600))).await;
    let openai = scripted("openai", []).await;
    let dir = TempDir::new();
    let config = bedrock_config(&fake, "").provider("openai", &openai).route(
        "r",
        &[("b", MODEL), ("openai", "gpt")],
        "",
    );
    let env = web_identity(&dir, &fake, "someone-elses-token");
    let served = serve_isolated(&dir, &config, &borrowed(&env));
    let response = ask(&client(), &served.url).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-switchyard-step"), "1");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(content(&answer), "Hello from openai!");
    let stats = fake.stats();
    assert_eq!(
        (stats.credential_requests, stats.credentials_issued),
        (1, 0),
        "STS refused the token once, and was not asked again"
    );
    assert_eq!(fake.calls(), 0, "no Bedrock request went unsigned");
    // The line of the step skipped as `no_key`, with STS's reason.
    let log = log_of(served);
    let skipped = [
        "step skipped: no credentials",
        "provider=b",
        "InvalidIdentityToken",
    ];
    assert!(
        log.iter()
            .any(|line| skipped.iter().all(|word| line.contains(word))),
        "{log:#?}"
    );
    assert_no_secret_in(&log);
}
