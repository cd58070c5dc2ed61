//! The reflector's requests to the API server: LIST pages as text and WATCH
//! streams as lines of JSON, never decoded into typed objects here.
//!
//! kube's `Client` does the transport (TLS, auth, kubeconfig); this module
//! reads error statuses itself because the reflector needs more of them
//! than kube keeps: the status causes (to spot "too large resource
//! version") and the `Retry-After` header of a 429.

use std::{pin::Pin, time::Duration};

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use kube::client::Body;
use serde::Deserialize;
use tokio::io::AsyncBufReadExt;
use tokio_stream::wrappers::LinesStream;
use tokio_util::io::StreamReader;

/// A watch response: one JSON event per line.
pub(crate) type Lines = Pin<Box<dyn Stream<Item = Result<String, std::io::Error>> + Send>>;

/// An error status from the API server (a `metav1.Status`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct ApiStatus {
    /// The HTTP code.
    #[serde(default)]
    pub code: u16,
    /// The machine-readable reason, e.g. `Expired`.
    #[serde(default)]
    pub reason: String,
    /// The human-readable message.
    #[serde(default)]
    pub message: String,
    /// More detail, with causes.
    #[serde(default)]
    pub details: Option<StatusDetails>,
    /// The `Retry-After` header of the response, if any.
    #[serde(skip)]
    pub retry_after: Option<Duration>,
}

/// `metav1.StatusDetails`, the part the reflector reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StatusDetails {
    /// Why it failed, in parts.
    #[serde(default)]
    pub causes: Vec<StatusCause>,
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct StatusCause {
    /// Machine-readable, e.g. `ResourceVersionTooLarge`.
    #[serde(default)]
    pub reason: String,
    /// Human-readable.
    #[serde(default)]
    pub message: String,
}

/// Why a request to the API server failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// The API server answered with an error status.
    #[error("the API server answered {} {}: {}", .0.code, .0.reason, .0.message)]
    Status(ApiStatus),
    /// The API server could not be reached, or the connection broke.
    #[error("cannot reach the API server: {0}")]
    Transport(#[source] kube::Error),
    /// A response body broke off or is not what was asked for.
    #[error("bad response from the API server: {0}")]
    Body(#[source] std::io::Error),
}

impl UpstreamError {
    fn status(&self) -> Option<&ApiStatus> {
        match self {
            UpstreamError::Status(s) => Some(s),
            _ => None,
        }
    }

    /// 410 Gone / reason Expired: the resourceVersion is older than etcd
    /// (or the watch cache) keeps.
    pub(crate) fn is_expired(&self) -> bool {
        self.status()
            .is_some_and(|s| s.code == 410 || s.reason == "Expired" || s.reason == "Gone")
    }

    /// The resourceVersion is newer than the server has: the
    /// `ResourceVersionTooLarge` cause, or the older Timeout forms that only
    /// said so in a message.
    pub(crate) fn is_too_large_resource_version(&self) -> bool {
        const TOO_LARGE: &str = "Too large resource version";
        let Some(s) = self.status() else {
            return false;
        };
        let causes = s
            .details
            .as_ref()
            .map(|d| d.causes.as_slice())
            .unwrap_or_default();
        if causes.iter().any(|c| c.reason == "ResourceVersionTooLarge") {
            return true;
        }
        (s.code == 504 || s.reason == "Timeout")
            && (causes.iter().any(|c| c.message == TOO_LARGE) || s.message.contains(TOO_LARGE))
    }

    /// 404 Not Found: the API server does not serve the type (any more,
    /// or yet).
    pub(crate) fn is_not_found(&self) -> bool {
        self.status().is_some_and(|s| s.code == 404)
    }

    /// 429 Too Many Requests.
    pub(crate) fn is_too_many_requests(&self) -> bool {
        self.status().is_some_and(|s| s.code == 429)
    }

    /// 500 Internal Server Error.
    pub(crate) fn is_internal(&self) -> bool {
        self.status().is_some_and(|s| s.code == 500)
    }

    /// The connection was refused: the API server is most likely down or
    /// restarting, and the watch can resume where it was once it is back.
    pub(crate) fn is_connection_refused(&self) -> bool {
        let UpstreamError::Transport(err) = self else {
            return false;
        };
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = source {
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
            {
                return true;
            }
            source = e.source();
        }
        false
    }

    /// How long the server asked to wait, if it did.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        self.status().and_then(|s| s.retry_after)
    }

    /// An ERROR event of a watch stream.
    pub(crate) fn from_watch_error(object: &str) -> Self {
        UpstreamError::Status(serde_json::from_str(object).unwrap_or_else(|_| ApiStatus {
            message: object.to_owned(),
            ..ApiStatus::default()
        }))
    }
}

/// Requests for one resource type's collection.
#[derive(Clone)]
pub(crate) struct Upstream {
    client: kube::Client,
    path: String,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("path", &self.path)
            .finish()
    }
}

impl Upstream {
    /// Requests against `path`, e.g. `/api/v1/configmaps`.
    pub(crate) fn new(client: kube::Client, path: String) -> Self {
        Upstream { client, path }
    }

    /// A GET of the collection (a LIST, or a WATCH with `watch=true`).
    async fn send(&self, query: &[(&str, &str)]) -> Result<http::Response<Body>, UpstreamError> {
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query)
            .finish();
        let request = http::Request::get(format!("{}?{}", self.path, query))
            .header(http::header::ACCEPT, "application/json")
            .body(Body::from(Vec::new()))
            .map_err(|e| UpstreamError::Body(std::io::Error::other(e)))?;
        let response = self
            .client
            .send(request)
            .await
            .map_err(UpstreamError::Transport)?;
        if response.status().is_success() {
            return Ok(response);
        }
        let code = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = collect(response.into_body()).await.unwrap_or_default();
        let mut status: ApiStatus = serde_json::from_slice(&body).unwrap_or_else(|_| ApiStatus {
            message: String::from_utf8_lossy(&body).trim().to_owned(),
            ..ApiStatus::default()
        });
        status.code = code;
        status.retry_after = retry_after;
        Err(UpstreamError::Status(status))
    }

    /// One LIST request; the body as text.
    pub(crate) async fn list(&self, query: &[(&str, &str)]) -> Result<String, UpstreamError> {
        let body = collect(self.send(query).await?.into_body()).await?;
        String::from_utf8(body.to_vec()).map_err(|e| {
            UpstreamError::Body(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
    }

    /// One WATCH request; its events, a line each.
    pub(crate) async fn watch(&self, query: &[(&str, &str)]) -> Result<Lines, UpstreamError> {
        let body = self.send(query).await?.into_body();
        let bytes = body.into_data_stream().map_err(std::io::Error::other);
        let lines = LinesStream::new(StreamReader::new(bytes).lines());
        Ok(lines.boxed())
    }
}

async fn collect(body: Body) -> Result<Bytes, UpstreamError> {
    Ok(body
        .collect()
        .await
        .map_err(|e| UpstreamError::Body(std::io::Error::other(e)))?
        .to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: &str) -> UpstreamError {
        UpstreamError::Status(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn recognises_expired_in_its_old_and_new_forms() {
        assert!(status(r#"{"code":410,"reason":"Expired"}"#).is_expired());
        assert!(status(r#"{"code":410,"reason":"Gone"}"#).is_expired());
        assert!(!status(r#"{"code":500,"reason":"InternalError"}"#).is_expired());
    }

    #[test]
    fn recognises_too_large_resource_version_in_every_form() {
        assert!(status(r#"{"code":504,"reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}]}}"#).is_too_large_resource_version());
        assert!(status(r#"{"code":504,"reason":"Timeout","details":{"causes":[{"message":"Too large resource version"}]}}"#).is_too_large_resource_version());
        assert!(status(r#"{"code":504,"reason":"Timeout","message":"Too large resource version: 5, current: 3"}"#).is_too_large_resource_version());
        assert!(
            !status(r#"{"code":504,"reason":"Timeout","message":"slow"}"#)
                .is_too_large_resource_version()
        );
        assert!(
            !status(r#"{"code":400,"message":"Too large resource version"}"#)
                .is_too_large_resource_version()
        );
    }
}

#[cfg(test)]
mod connection_tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_recognised_as_a_refused_connection() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
        config.accept_invalid_certs = true;
        let client = kube::Client::try_from(config).unwrap();
        let err = Upstream::new(client, "/api/v1/configmaps".into())
            .list(&[])
            .await
            .unwrap_err();
        let mut chain = vec![err.to_string()];
        let mut source = std::error::Error::source(&err);
        while let Some(e) = source {
            chain.push(format!("{e:?}"));
            source = e.source();
        }
        assert!(err.is_connection_refused(), "{chain:#?}");
    }
}
