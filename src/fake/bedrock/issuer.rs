//! The fake's AWS credential endpoints, so that a gateway's credential chain can be tested
//! against real HTTP rather than a stub:
//!
//! - STS `AssumeRoleWithWebIdentity` (what EKS's IRSA does): `POST /` with a form body, as
//!   aws-sdk-sts sends it to `AWS_ENDPOINT_URL_STS`. The web identity token must be the one
//!   configured, else 400 `InvalidIdentityToken`; the answer is STS's XML.
//! - The ECS container credentials endpoint: `GET /ecs-credentials`, for
//!   `AWS_CONTAINER_CREDENTIALS_FULL_URI`, answered with the JSON aws-config reads. It checks
//!   no authorization token (EKS Pod Identity's agent would).
//!
//! Both issue the credentials the fake's Bedrock verifier accepts, expiring `lifetime` from
//! the moment they are issued; a test shortens the lifetime to make a gateway refresh them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use http::Method;

use super::AwsAccount;
use super::sigv4::Credentials;

/// Where the fake answers ECS's container credentials.
pub const ECS_PATH: &str = "/ecs-credentials";

/// The namespace of STS's answers.
const STS_XMLNS: &str = "https://sts.amazonaws.com/doc/2011-06-15/";

/// The subject STS reports for the fake's token: a Kubernetes service account, as EKS's are.
const SUBJECT: &str = "system:serviceaccount:default:switchyard";

/// Which of its endpoints a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// STS's query API (`POST /`, `Action=…`).
    Sts,
    /// ECS's container credentials (`GET /ecs-credentials`).
    Container,
}

/// An answer: a status, its content type, and its body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// Whether it issued credentials.
    pub granted: bool,
}

/// Issues AWS credentials for a web identity token, or to any container that asks.
pub struct AwsIssuer {
    web_identity_token: String,
    lifetime: Mutex<Duration>,
    /// What it hands out: the Bedrock account's credentials, when the fake has one.
    credentials: Credentials,
}

impl AwsIssuer {
    /// An issuer that takes `web_identity_token` and hands out `account`'s credentials (made-up
    /// ones that nothing verifies without one), valid for `lifetime`.
    pub fn new(
        web_identity_token: &str,
        lifetime: Duration,
        account: Option<&AwsAccount>,
    ) -> AwsIssuer {
        let credentials = account.map_or_else(
            || Credentials {
                access_key_id: "ASIAFAKEISSUED000001".into(),
                secret_access_key: "fake-issued-secret-access-key".into(),
                session_token: None,
            },
            |account| account.credentials.clone(),
        );
        AwsIssuer {
            web_identity_token: web_identity_token.to_owned(),
            lifetime: Mutex::new(lifetime),
            credentials,
        }
    }

    /// Changes how long the credentials issued from now on last.
    pub fn set_lifetime(&self, lifetime: Duration) {
        *self.lifetime.lock().unwrap_or_else(|e| e.into_inner()) = lifetime;
    }

    /// The endpoint a request is for, if it is for one of these.
    pub fn endpoint(method: &Method, path: &str, body: &[u8]) -> Option<Endpoint> {
        match (method, path) {
            (&Method::GET, ECS_PATH) => Some(Endpoint::Container),
            (&Method::POST, "/") if form(body).contains_key("Action") => Some(Endpoint::Sts),
            _ => None,
        }
    }

    /// Answers a request for `endpoint`.
    pub fn answer(&self, endpoint: Endpoint, body: &[u8]) -> Answer {
        match endpoint {
            Endpoint::Sts => self
                .assume_role(&form(body))
                .unwrap_or_else(|refused| refused),
            Endpoint::Container => Answer {
                status: 200,
                content_type: "application/json",
                body: self.container(),
                granted: true,
            },
        }
    }

    fn expiration(&self) -> String {
        let lifetime = *self.lifetime.lock().unwrap_or_else(|e| e.into_inner());
        humantime::format_rfc3339_seconds(SystemTime::now() + lifetime).to_string()
    }

    /// The session token it hands out: the account's, else a made-up one (STS always
    /// issues one, and ECS's answer must carry one).
    fn session_token(&self) -> &str {
        self.credentials
            .session_token
            .as_deref()
            .unwrap_or("fake-issued-session-token")
    }

    /// STS's answer to `AssumeRoleWithWebIdentity`; a refusal is the `Err`.
    fn assume_role(&self, form: &HashMap<String, String>) -> Result<Answer, Answer> {
        let field = |name: &str| form.get(name).map(String::as_str);
        match field("Action") {
            Some("AssumeRoleWithWebIdentity") => {}
            Some(other) => {
                let said = format!("Could not find operation {other} for version 2011-06-15");
                return Err(sts_error("InvalidAction", &said));
            }
            None => return Err(sts_error("MissingAction", "Missing Action")),
        }
        let required = |name: &str| {
            field(name).filter(|v| !v.is_empty()).ok_or_else(|| {
                let said = format!(
                    "1 validation error detected: Value null at '{name}' failed to satisfy constraint: Member must not be null"
                );
                sts_error("ValidationError", &said)
            })
        };
        let role_arn = required("RoleArn")?;
        let session = required("RoleSessionName")?;
        if required("WebIdentityToken")? != self.web_identity_token {
            return Err(sts_error(
                "InvalidIdentityToken",
                "The web identity token that was passed could not be validated by AWS. \
                 Get a new identity token from the identity provider and then retry the request.",
            ));
        }
        let (account, role) = role_of(role_arn)
            .ok_or_else(|| sts_error("ValidationError", "Request ARN is invalid"))?;
        let assumed = format!("arn:aws:sts::{account}:assumed-role/{role}/{session}");
        let body = format!(
            "<AssumeRoleWithWebIdentityResponse xmlns=\"{STS_XMLNS}\">\
             <AssumeRoleWithWebIdentityResult>\
             <Credentials>\
             <AccessKeyId>{}</AccessKeyId>\
             <SecretAccessKey>{}</SecretAccessKey>\
             <SessionToken>{}</SessionToken>\
             <Expiration>{}</Expiration>\
             </Credentials>\
             <SubjectFromWebIdentityToken>{SUBJECT}</SubjectFromWebIdentityToken>\
             <Audience>sts.amazonaws.com</Audience>\
             <AssumedRoleUser>\
             <Arn>{}</Arn>\
             <AssumedRoleId>AROAFAKEROLEID000001:{}</AssumedRoleId>\
             </AssumedRoleUser>\
             <Provider>oidc.eks.fake.amazonaws.com</Provider>\
             </AssumeRoleWithWebIdentityResult>\
             <ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata>\
             </AssumeRoleWithWebIdentityResponse>",
            escape(&self.credentials.access_key_id),
            escape(&self.credentials.secret_access_key),
            escape(self.session_token()),
            self.expiration(),
            escape(&assumed),
            escape(session),
            uuid::Uuid::now_v7(),
        );
        Ok(Answer {
            status: 200,
            content_type: "text/xml",
            body,
            granted: true,
        })
    }

    fn container(&self) -> String {
        serde_json::json!({
            "Code": "Success",
            "Type": "AWS-HMAC",
            "LastUpdated": humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            "AccessKeyId": self.credentials.access_key_id,
            "SecretAccessKey": self.credentials.secret_access_key,
            "Token": self.session_token(),
            "Expiration": self.expiration(),
        })
        .to_string()
    }
}

fn form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// The account and role name of `arn:aws:iam::{account}:role/{path/}{name}`.
fn role_of(arn: &str) -> Option<(&str, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(_partition), Some("iam"), Some(""), Some(account), Some(resource)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let name = resource.strip_prefix("role/")?.rsplit('/').next()?;
    let numeric = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
    (numeric && !name.is_empty()).then_some((account, name))
}

/// STS's error answer: 400, `ErrorResponse` XML naming `code`.
fn sts_error(code: &str, message: &str) -> Answer {
    let body = format!(
        "<ErrorResponse xmlns=\"{STS_XMLNS}\"><Error><Type>Sender</Type><Code>{code}</Code>\
         <Message>{}</Message></Error><RequestId>{}</RequestId></ErrorResponse>",
        escape(message),
        uuid::Uuid::now_v7(),
    );
    Answer {
        status: 400,
        content_type: "text/xml",
        body,
        granted: false,
    }
}

/// `text` as XML character data (no value goes in an attribute).
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = "arn:aws:iam::123456789012:role/eks/switchyard-bedrock";

    fn issuer() -> AwsIssuer {
        let account = AwsAccount::new("AKIDISSUED", "issued-secret", Some("issued-token"));
        AwsIssuer::new("the-oidc-token", Duration::from_secs(900), Some(&account))
    }

    fn assume(token: &str) -> Vec<u8> {
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", "AssumeRoleWithWebIdentity")
            .append_pair("Version", "2011-06-15")
            .append_pair("RoleArn", ROLE)
            .append_pair("RoleSessionName", "gateway<1>")
            .append_pair("WebIdentityToken", token)
            .finish()
            .into_bytes()
    }

    /// The text of the first `<tag>` in `xml`.
    fn element<'a>(xml: &'a str, tag: &str) -> &'a str {
        let open = format!("<{tag}>");
        let start = xml.find(&open).unwrap() + open.len();
        let end = start + xml[start..].find(&format!("</{tag}>")).unwrap();
        &xml[start..end]
    }

    #[test]
    fn requests_find_their_endpoints() {
        let body = assume("t");
        assert_eq!(
            AwsIssuer::endpoint(&Method::POST, "/", &body),
            Some(Endpoint::Sts)
        );
        assert_eq!(
            AwsIssuer::endpoint(&Method::GET, ECS_PATH, b""),
            Some(Endpoint::Container)
        );
        assert_eq!(AwsIssuer::endpoint(&Method::POST, "/", b"{}"), None);
        assert_eq!(AwsIssuer::endpoint(&Method::GET, "/", &body), None);
    }

    #[test]
    fn the_right_token_gets_the_accounts_credentials_in_stss_xml() {
        let answer = issuer().answer(Endpoint::Sts, &assume("the-oidc-token"));
        assert_eq!((answer.status, answer.granted), (200, true));
        let xml = &answer.body;
        assert!(
            xml.starts_with(
                "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials>"
            ),
            "{xml}"
        );
        assert_eq!(element(xml, "AccessKeyId"), "AKIDISSUED");
        assert_eq!(element(xml, "SecretAccessKey"), "issued-secret");
        assert_eq!(element(xml, "SessionToken"), "issued-token");
        let expires = humantime::parse_rfc3339(element(xml, "Expiration")).unwrap();
        let left = expires.duration_since(SystemTime::now()).unwrap();
        assert!(left <= Duration::from_secs(900) && left > Duration::from_secs(800));
        assert_eq!(
            element(xml, "Arn"),
            "arn:aws:sts::123456789012:assumed-role/switchyard-bedrock/gateway&lt;1&gt;"
        );
        assert!(!element(xml, "RequestId").is_empty());
    }

    #[test]
    fn a_wrong_token_or_request_is_refused_as_sts_refuses_it() {
        let issuer = issuer();
        let wrong = issuer.answer(Endpoint::Sts, &assume("someone-elses-token"));
        assert_eq!((wrong.status, wrong.granted), (400, false));
        assert!(wrong.body.starts_with("<ErrorResponse"), "{}", wrong.body);
        assert_eq!(element(&wrong.body, "Code"), "InvalidIdentityToken");
        let other = issuer.answer(Endpoint::Sts, b"Action=GetCallerIdentity");
        assert_eq!(element(&other.body, "Code"), "InvalidAction");
        let no_role = String::from_utf8(assume("the-oidc-token"))
            .unwrap()
            .replace("RoleArn", "Other");
        let refused = issuer.answer(Endpoint::Sts, no_role.as_bytes());
        assert_eq!(element(&refused.body, "Code"), "ValidationError");
        assert!(refused.body.contains("'RoleArn'"), "{}", refused.body);
        for arn in ["arn:aws:iam::12:role/x", "arn:aws:s3:::bucket", "role/x"] {
            assert_eq!(role_of(arn), None, "{arn}");
        }
    }

    #[test]
    fn a_container_gets_the_json_aws_config_reads() {
        let issuer = issuer();
        issuer.set_lifetime(Duration::from_secs(30));
        let answer = issuer.answer(Endpoint::Container, b"");
        assert_eq!((answer.status, answer.granted), (200, true));
        let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(json["AccessKeyId"], "AKIDISSUED");
        assert_eq!(json["SecretAccessKey"], "issued-secret");
        assert_eq!(json["Token"], "issued-token");
        let expires = humantime::parse_rfc3339(json["Expiration"].as_str().unwrap()).unwrap();
        assert!(expires <= SystemTime::now() + Duration::from_secs(31));
        let anonymous = AwsIssuer::new("t", Duration::from_secs(60), None);
        let made_up: serde_json::Value =
            serde_json::from_str(&anonymous.answer(Endpoint::Container, b"").body).unwrap();
        assert_eq!(made_up["Token"], "fake-issued-session-token");
    }
}
