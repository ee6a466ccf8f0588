//! Azure OpenAI: OpenAI's format at deployment URLs, with the `api-key` header.
//!
//! `base_url` is the resource endpoint (`https://{resource}.openai.azure.com`) and a step's
//! `model` names the deployment: chat goes to
//! `{base_url}/openai/deployments/{model}/chat/completions?api-version={api_version}` and
//! embeddings to `.../embeddings?api-version=...`. Bodies and answers are OpenAI's, so the
//! translation is the OpenAI family's.

use bytes::Bytes;
use http::StatusCode;

use super::stream::StreamTranslator;
use http::header::HeaderName;

use super::{
    Adapter, ClientRequest, Decoded, Operation, Rejection, Target, UpstreamRequest, openai,
};

const API_KEY: HeaderName = HeaderName::from_static("api-key");

/// Azure OpenAI.
pub struct AzureAdapter;

impl Adapter for AzureAdapter {
    fn request(
        &self,
        target: &Target<'_>,
        request: &ClientRequest,
        stream: bool,
    ) -> Result<UpstreamRequest, Rejection> {
        let body = openai::encode(request, target.model, stream)?;
        let url = url(target, request.operation)?;
        let mut built = UpstreamRequest::post(url, body, stream);
        if let Some(key) = target.key {
            built = built.secret_header(API_KEY, key.secret.expose());
        }
        Ok(built)
    }

    fn decode(&self, request: &ClientRequest, body: &Bytes) -> Option<Decoded> {
        openai::decode(request, body)
    }

    fn error_body(
        &self,
        request: &ClientRequest,
        status: StatusCode,
        body: &[u8],
    ) -> Option<Bytes> {
        openai::error_body(request, status, body)
    }

    fn stream(&self, request: &ClientRequest) -> Box<dyn StreamTranslator> {
        openai::translator(request)
    }
}

fn url(target: &Target<'_>, operation: Operation) -> Result<String, Rejection> {
    let path = match operation {
        Operation::Chat => "chat/completions",
        Operation::Completions => "completions",
        Operation::Embeddings => "embeddings",
        Operation::CountTokens => return Err(super::only_for(operation)),
        Operation::Responses => "responses",
    };
    let mut url = format!(
        "{}/openai/deployments/{}/{path}",
        target.provider.base_url,
        super::path_segment(target.model)
    );
    url.push_str("?api-version=");
    url.push_str(&super::path_segment(&target.provider.api_version));
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::keys::{KeyLease, Secret};
    use crate::providers::ClientFormat;
    use serde_json::Map;

    #[test]
    fn builds_the_deployment_url_with_api_key_and_version() {
        let config = Config::parse(
            "[[providers]]\nname = \"az\"\nkind = \"azure\"\nbase_url = \"https://res.openai.azure.com\"\napi_version = \"2024-10-21\"\n",
        )
        .unwrap();
        let key = KeyLease {
            id: "k".into(),
            secret: Secret::new("azure-secret"),
            aws: None,
        };
        let target = Target {
            provider: &config.providers[0],
            key: Some(&key),
            model: "gpt-4o-deploy",
        };
        let request = ClientRequest {
            format: ClientFormat::OpenAi,
            operation: Operation::Chat,
            body: serde_json::from_str(r#"{"model":"smart","messages":[]}"#).unwrap(),
            anthropic_beta: None,
            forwarded: Vec::new(),
        };
        let built = AzureAdapter.request(&target, &request, false).unwrap();
        assert_eq!(
            built.uri,
            "https://res.openai.azure.com/openai/deployments/gpt-4o-deploy/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(built.headers["api-key"], "azure-secret");
        assert!(built.headers.get("authorization").is_none());

        let legacy = ClientRequest::new(
            ClientFormat::OpenAi,
            Operation::Completions,
            serde_json::from_str::<crate::providers::RequestBody>(
                r#"{"model":"smart","prompt":"Hi"}"#,
            )
            .unwrap(),
        );
        let built = AzureAdapter.request(&target, &legacy, false).unwrap();
        assert_eq!(
            built.uri,
            "https://res.openai.azure.com/openai/deployments/gpt-4o-deploy/completions?api-version=2024-10-21"
        );
        let count = ClientRequest::new(ClientFormat::Anthropic, Operation::CountTokens, Map::new());
        assert!(AzureAdapter.request(&target, &count, false).is_err());
    }
}
