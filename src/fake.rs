//! A scriptable fake provider over real HTTP, for tests, the demo and the benchmark.
//!
//! It speaks OpenAI chat completions and the Responses API, Anthropic messages, Gemini
//! generateContent (JSON and SSE, chosen by the request's path), Bedrock's Converse (JSON and
//! AWS's event stream) and InvokeModel for embeddings, and the other embeddings shapes; given
//! AWS credentials, it also issues them as STS and ECS do. Each request takes the next behaviour of
//! its script: a status, headers, a delay, a stream of chunks with pauses, a dropped
//! connection or a malformed body. It counts calls, records what it received, and tracks
//! open connections and cancelled streams so tests can wait on events instead of sleeping.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use switchyard::fake::{Behavior, FakeUpstream};
//! let fake = FakeUpstream::new("primary")
//!     .then(Behavior::status(500))
//!     .then(Behavior::ok())
//!     .start()
//!     .await?;
//! println!("base_url = {}", fake.base_url());
//! # Ok(()) }
//! ```

mod answer;
mod bedrock;
mod behavior;
mod google;
mod responses;
mod server;

pub use behavior::{Behavior, FakeToolCall, Script, ScriptMode};
pub use server::{FakeHandle, FakeStats, RecordedRequest};

use std::net::SocketAddr;
use std::time::Duration;

/// Builds a fake upstream.
pub struct FakeUpstream {
    name: String,
    script: Script,
    required_key: Option<String>,
    http2_max_streams: Option<u32>,
    google: Option<google::GoogleIssuer>,
    aws: Option<bedrock::AwsAccount>,
    /// The web identity token and lifetime of [`FakeUpstream::aws_credential_issuer`].
    aws_issuer: Option<(String, Duration)>,
}

impl FakeUpstream {
    /// A fake that answers every request with a healthy completion until scripted otherwise.
    pub fn new(name: &str) -> FakeUpstream {
        FakeUpstream {
            name: name.to_owned(),
            script: Script::default(),
            required_key: None,
            http2_max_streams: None,
            google: None,
            aws: None,
            aws_issuer: None,
        }
    }

    /// Appends a behaviour for the next request.
    pub fn then(mut self, behavior: Behavior) -> FakeUpstream {
        self.script.behaviors.push(behavior);
        self
    }

    /// Replaces the whole script.
    pub fn script(mut self, script: Script) -> FakeUpstream {
        self.script = script;
        self
    }

    /// Starts the script over after its last behaviour, instead of repeating that one.
    pub fn cycle(mut self) -> FakeUpstream {
        self.script.mode = ScriptMode::Cycle;
        self
    }

    /// Answers 401 (echoing the key it got, as some providers do) unless the request carries
    /// `key` as a bearer token, `x-api-key`, `api-key` or `x-goog-api-key`.
    pub fn require_key(mut self, key: &str) -> FakeUpstream {
        self.required_key = Some(key.to_owned());
        self
    }

    /// Google auth, as Vertex has it: `POST /token` grants a token for a JWT assertion whose
    /// RS256 signature verifies with `public_key` (PKCS#1 `RSAPublicKey` DER), valid for
    /// `lifetime`; every other request must carry one, unexpired, or is answered 401.
    pub fn google_auth(
        mut self,
        public_key: Vec<u8>,
        lifetime: std::time::Duration,
    ) -> FakeUpstream {
        self.google = Some(google::GoogleIssuer::new(public_key, lifetime));
        self
    }

    /// AWS auth, as Bedrock has it: every Bedrock request must be signed (SigV4, service
    /// `bedrock`, any region) with these credentials, and carry `session_token` when given,
    /// or is refused as AWS refuses it (403 `UnrecognizedClientException` for another key,
    /// `InvalidSignatureException` for a wrong signature or a time more than 5 minutes off).
    pub fn aws_credentials(
        mut self,
        access_key_id: &str,
        secret_access_key: &str,
        session_token: Option<&str>,
    ) -> FakeUpstream {
        self.aws = Some(bedrock::AwsAccount::new(
            access_key_id,
            secret_access_key,
            session_token,
        ));
        self
    }

    /// AWS's credential endpoints, handing out the credentials of
    /// [`FakeUpstream::aws_credentials`], each set valid for `lifetime` from its issue
    /// ([`FakeHandle::set_credential_lifetime`] changes that):
    ///
    /// - STS `AssumeRoleWithWebIdentity` at the root (`POST /`, for `AWS_ENDPOINT_URL_STS`),
    ///   for `web_identity_token` only; another is refused with 400 `InvalidIdentityToken`;
    /// - ECS container credentials at `GET /ecs-credentials` (for
    ///   `AWS_CONTAINER_CREDENTIALS_FULL_URI`).
    ///
    /// These requests take no behaviour of the script and are not recorded;
    /// [`FakeHandle::credentials_issued`] counts what they issued.
    pub fn aws_credential_issuer(
        mut self,
        web_identity_token: &str,
        lifetime: Duration,
    ) -> FakeUpstream {
        self.aws_issuer = Some((web_identity_token.to_owned(), lifetime));
        self
    }

    /// Allows an HTTP/2 client at most `streams` streams at once on a connection (its
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; hyper's default is 200).
    pub fn http2_max_streams(mut self, streams: u32) -> FakeUpstream {
        self.http2_max_streams = Some(streams);
        self
    }

    /// Starts on an ephemeral loopback port.
    pub async fn start(self) -> std::io::Result<FakeHandle> {
        self.start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts on `addr`.
    pub async fn start_on(self, addr: SocketAddr) -> std::io::Result<FakeHandle> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let aws_issuer = self
            .aws_issuer
            .map(|(token, lifetime)| bedrock::AwsIssuer::new(&token, lifetime, self.aws.as_ref()));
        let auth = server::Auth {
            required_key: self.required_key,
            google: self.google,
            aws: self.aws,
            aws_issuer,
        };
        Ok(server::spawn(
            listener,
            self.name,
            self.script,
            self.http2_max_streams,
            auth,
        ))
    }
}
