//! `switchyard health`: one GET of the gateway's `/readyz`, for a container's `HEALTHCHECK`.
//! The image is the binary and the libraries it links, with no curl or shell to ask with.
//! Part of the binary, not the library: nothing else needs it.

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http::header::HOST;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;

/// Succeeds when `url` answers a 2xx within `timeout`; otherwise says what it got.
pub async fn check(url: &str, timeout: Duration) -> anyhow::Result<()> {
    tokio::time::timeout(timeout, get(url))
        .await
        .map_err(|_| anyhow!("{url} did not answer within {timeout:?}"))?
}

async fn get(url: &str) -> anyhow::Result<()> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("`{url}` is not a URL"))?;
    // Plain HTTP only: the probe asks the gateway's own listener, in the same container.
    if uri.scheme_str() != Some("http") {
        bail!("`{url}`: only http:// URLs are probed");
    }
    let authority = uri
        .authority()
        .with_context(|| format!("`{url}` names no host"))?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .with_context(|| format!("cannot connect to {authority}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = http::Request::get(path)
        .header(HOST, authority.as_str())
        .body(Empty::<Bytes>::new())?;
    let status = sender.send_request(request).await?.status();
    if status.is_success() {
        Ok(())
    } else {
        bail!("{url} answered {status}")
    }
}
