//! Client certificates of the shapes where kube-fanout and the API server
//! once differed, each sent to both with the same credentials: a negative
//! serial number (Go refuses it since 1.23: the API server's handshake
//! fails), a version 1 certificate without extensions (Go takes it), and
//! an expired certificate with a valid bearer token (the API server asks
//! for certificates without requiring them and verifies them in its
//! authenticator, so the token decides). The generated shapes are
//! compared with Go itself in tests/tests/x509_differential.rs; these go
//! through the real handshakes.

use anyhow::{Context, Result, bail};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::ListParams;
use kube_fanout::security::AuthOptions;
use kube_fanout_listener::tls::TlsFiles;
use kube_fanout_proto::v1::{ListRequest, kube_fanout_client::KubeFanoutClient};
use kube_fanout_tests::{
    clients::rustls_config_presenting,
    controlplane::{ControlPlane, Options, user_token},
    fanout::Fanout,
    pki::{
        Ca, Pair, Shape,
        subject::{cn, name},
    },
    rbac::{grant, rule, until_api_server_lists, user},
    support::{configmaps, create_namespace},
};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Endpoint;

/// Who a request was taken for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// This user.
    User(String),
    /// The TLS handshake failed: no answer at all.
    HandshakeRefused,
    /// Some other refusal.
    Refused(String),
}

/// A control plane and a kube-fanout that both trust `clients` for client
/// certificates, with alice (a static token user) and "carol" (a
/// certificate's CN) allowed to list configmaps in `a`.
struct Servers {
    cp: ControlPlane,
    fanout: Fanout,
    serving: Ca,
    clients: Ca,
    _dir: tempfile::TempDir,
}

impl Servers {
    async fn start() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let (serving, clients) = (Ca::new("serving")?, Ca::new("clients")?);
        let client_ca = dir.path().join("client-ca.crt");
        std::fs::write(&client_ca, clients.pem())?;
        let cp = ControlPlane::start_with(Options {
            extra_args: vec![format!("--client-ca-file={}", client_ca.display())],
            ..Options::default()
        })
        .await?;
        create_namespace(&cp.client, "a").await?;
        grant(
            &cp.client,
            "a",
            "readers",
            vec![rule(&["list"], "configmaps")],
            vec![user("alice"), user("carol")],
        )
        .await?;
        until_api_server_lists(&cp, &user_token("alice"), "a", &ListParams::default()).await?;
        let (cert, key) = serving.serving()?.write_to(dir.path())?;
        let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
            o.security.tls = Some(TlsFiles {
                cert,
                key,
                client_ca: Some(client_ca),
            });
            o.security.auth = Some(AuthOptions::default());
        })
        .await?;
        fanout.wait_synced().await?;
        Ok(Servers {
            cp,
            fanout,
            serving,
            clients,
            _dir: dir,
        })
    }

    /// A TLS connection to `addr` presenting `certificate` (as it is),
    /// trusting `ca`, offering `alpn`.
    async fn tls(
        addr: std::net::SocketAddr,
        ca: &str,
        alpn: &[u8],
        certificate: &Pair,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let config =
            rustls_config_presenting(ca, alpn, certificate).map_err(std::io::Error::other)?;
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = ServerName::try_from("localhost").expect("a name");
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
    }

    /// Who the API server takes `certificate` (and `token`) for: its own
    /// SelfSubjectReview, over a connection that presents the certificate
    /// as it is.
    async fn api_server_sees(&self, certificate: &Pair, token: Option<&str>) -> Result<Seen> {
        let addr = self.cp.server_url.trim_start_matches("https://").parse()?;
        let body = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;
        let authorization = token
            .map(|t| format!("authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "POST /apis/authentication.k8s.io/v1/selfsubjectreviews HTTP/1.1\r\nhost: localhost\r\n{authorization}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let exchange = async {
            let mut stream = Self::tls(addr, &self.cp.ca_pem, b"http/1.1", certificate).await?;
            stream.write_all(request.as_bytes()).await?;
            let mut response = Vec::new();
            // The server may close without close_notify once it answered.
            if let Err(err) = stream.read_to_end(&mut response).await
                && response.is_empty()
            {
                return Err(err);
            }
            Ok(response)
        };
        let Ok(response) = exchange.await else {
            return Ok(Seen::HandshakeRefused);
        };
        let response = String::from_utf8_lossy(&response);
        let (head, body) = response.split_once("\r\n\r\n").context("no HTTP header")?;
        if !head.starts_with("HTTP/1.1 201") {
            return Ok(Seen::Refused(
                head.lines().next().unwrap_or_default().to_owned(),
            ));
        }
        let review: SelfSubjectReview = serde_json::from_str(body)?;
        Ok(Seen::User(
            review
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username)
                .context("a SelfSubjectReview without a user")?,
        ))
    }

    /// Who kube-fanout takes `certificate` (and `token`) for: a List of
    /// configmaps in `a`, which only alice and carol may make, over a
    /// connection that presents the certificate as it is.
    async fn fanout_sees(&self, certificate: &Pair, token: Option<&str>) -> Result<Seen> {
        let (addr, ca, pair) = (self.fanout.addr, self.serving.pem(), certificate.clone());
        let connector = tower::service_fn(move |_: http::Uri| {
            let (ca, pair) = (ca.clone(), pair.clone());
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(Self::tls(addr, &ca, b"h2", &pair).await?))
            }
        });
        let channel = match Endpoint::from_static("http://localhost")
            .connect_with_connector(connector)
            .await
        {
            Ok(channel) => channel,
            Err(_) => return Ok(Seen::HandshakeRefused),
        };
        let mut request = tonic::Request::new(ListRequest {
            resource: Some(configmaps()),
            namespace: "a".into(),
            ..ListRequest::default()
        });
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse()?);
        }
        Ok(match KubeFanoutClient::new(channel).list(request).await {
            // Allowed: one of the two readers; the certificate's CN is carol.
            Ok(_) if token.is_some() => Seen::User("alice".into()),
            Ok(_) => Seen::User("carol".into()),
            // The client's own status for a connection the server closed
            // at the handshake (TLS 1.3 clients learn it at their first
            // request), not one kube-fanout sent.
            Err(s) if s.metadata().get("content-type").is_none() => Seen::HandshakeRefused,
            Err(s) => Seen::Refused(s.message().to_owned()),
        })
    }
}

/// A certificate for carol of `shape`, signed by the servers' client CA.
fn carol(servers: &Servers, shape: Shape) -> Result<Pair> {
    servers
        .clients
        .client_shaped(&name(&[&[cn("carol")]]), &shape)
}

async fn both_see(servers: &Servers, certificate: &Pair, token: Option<&str>) -> Result<Seen> {
    let api = servers.api_server_sees(certificate, token).await?;
    let ours = servers.fanout_sees(certificate, token).await?;
    if api != ours {
        bail!("the API server sees {api:?}, kube-fanout {ours:?}");
    }
    Ok(api)
}

#[tokio::test]
async fn a_negative_serial_number_fails_the_handshake_as_on_the_api_server() -> Result<()> {
    let servers = Servers::start().await?;
    let negative = Shape {
        serial: vec![0xff, 0x01],
        ..Shape::default()
    };
    let seen = both_see(&servers, &carol(&servers, negative)?, None).await?;
    assert_eq!(seen, Seen::HandshakeRefused);
    // The same certificate with a positive serial is carol on both.
    let seen = both_see(&servers, &carol(&servers, Shape::default())?, None).await?;
    assert_eq!(seen, Seen::User("carol".into()));
    servers.fanout.stop().await
}

#[tokio::test]
async fn a_version_1_certificate_names_its_user_as_on_the_api_server() -> Result<()> {
    let servers = Servers::start().await?;
    let v1 = Shape {
        version1: true,
        ..Shape::default()
    };
    let seen = both_see(&servers, &carol(&servers, v1)?, None).await?;
    assert_eq!(seen, Seen::User("carol".into()));
    servers.fanout.stop().await
}

#[tokio::test]
async fn an_expired_certificate_leaves_the_request_to_its_bearer_token() -> Result<()> {
    let servers = Servers::start().await?;
    let expired = Shape {
        not_before: b"200101000000Z",
        not_after: b"210101000000Z",
        ..Shape::default()
    };
    let certificate = carol(&servers, expired)?;
    let token = user_token("alice");
    let seen = both_see(&servers, &certificate, Some(&token)).await?;
    assert_eq!(seen, Seen::User("alice".into()));
    // Without the token, both refuse it, kube-fanout saying why.
    let api = servers.api_server_sees(&certificate, None).await?;
    assert!(matches!(api, Seen::Refused(_)), "{api:?}");
    match servers.fanout_sees(&certificate, None).await? {
        Seen::Refused(message) => assert!(
            message.contains("certificate has expired or is not yet valid"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    servers.fanout.stop().await
}
