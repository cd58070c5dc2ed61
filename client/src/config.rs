//! Where and how to connect: server addresses, TLS, the bearer token, and
//! the rule that a token goes in plaintext only to this machine.

use std::{fmt, net::IpAddr, path::PathBuf, time::Duration};

use tonic::{
    codec::CompressionEncoding,
    transport::{ClientTlsConfig, Endpoint},
};

use crate::{error::ClientError, token::BearerToken};

/// How long one connection attempt may take before the next address is
/// tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how to connect.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    addresses: Vec<String>,
    tls: Option<ClientTlsConfig>,
    token: Option<Credential>,
    insecure_plaintext_token: bool,
    compression: Option<CompressionEncoding>,
}

/// Where the bearer token comes from.
#[derive(Clone)]
enum Credential {
    Token(String),
    File(PathBuf),
}

// A token is a credential: never print it.
impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Token(_) => f.write_str("Token(<redacted>)"),
            Credential::File(path) => write!(f, "File({})", path.display()),
        }
    }
}

impl ClientConfig {
    /// Servers to use, in order of preference: `host:port`,
    /// `http://host:port` or `https://host:port`. When one goes away the
    /// next is used.
    pub fn new<S: Into<String>>(addresses: impl IntoIterator<Item = S>) -> Self {
        ClientConfig {
            addresses: addresses.into_iter().map(Into::into).collect(),
            ..ClientConfig::default()
        }
    }

    /// Uses TLS with these settings (CA, server name) for every address.
    /// Without it, `https://` addresses use the system's root certificates
    /// and other addresses are plaintext.
    pub fn tls(mut self, tls: ClientTlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sends `authorization: Bearer TOKEN` with every request.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(Credential::Token(token.into()));
        self
    }

    /// Sends the token in `path` with every request, reading the file
    /// again whenever it changes (a projected ServiceAccount token).
    pub fn bearer_token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token = Some(Credential::File(path.into()));
        self
    }

    /// Sends the bearer token even over plaintext to an address that is
    /// not loopback, where anyone on the path reads it and can replay it
    /// to kube-fanout (and, for a token of the API server's own audience,
    /// to the API server). Without it, [`build`](Self::build) refuses a
    /// token with a plaintext address other than 127.0.0.0/8, ::1 or
    /// localhost.
    pub fn insecure_plaintext_token(mut self) -> Self {
        self.insecure_plaintext_token = true;
        self
    }

    /// Asks the server to compress what it sends with `encoding` (gzip or
    /// zstd), negotiated per call: worth it for large snapshots over slow
    /// links, at the CPU cost of compressing on the server and
    /// decompressing here (BENCHMARKS.md has the figures). Requests, which
    /// are small, are sent as they are. Off by default.
    pub fn accept_compressed(mut self, encoding: CompressionEncoding) -> Self {
        self.compression = Some(encoding);
        self
    }

    /// Checks the settings and loads the token: what
    /// [`build`](Self::build) makes a client of.
    pub(crate) fn settings(self) -> Result<Settings, ClientError> {
        if self.addresses.is_empty() {
            return Err(ClientError::NoAddress);
        }
        let endpoints = self
            .addresses
            .iter()
            .map(|addr| endpoint(addr, self.tls.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if self.token.is_some() && !self.insecure_plaintext_token {
            refuse_plaintext_token(&self.addresses, &endpoints)?;
        }
        let token = match &self.token {
            Some(Credential::Token(token)) => BearerToken::new(token)?,
            Some(Credential::File(path)) => BearerToken::from_file(path)?,
            None => BearerToken::default(),
        };
        Ok(Settings {
            endpoints,
            token,
            compression: self.compression,
        })
    }
}

/// Checked settings: the addresses and what each call carries. Every clone
/// of a client shares one.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The servers, in order of preference; never empty.
    pub(crate) endpoints: Vec<Endpoint>,
    /// Sent with every call.
    pub(crate) token: BearerToken,
    /// What the server is asked to compress with.
    pub(crate) compression: Option<CompressionEncoding>,
}

fn endpoint(addr: &str, tls: Option<&ClientTlsConfig>) -> Result<Endpoint, ClientError> {
    let url = if addr.contains("://") {
        addr.to_owned()
    } else if tls.is_some() {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    let invalid = |source| ClientError::Address {
        addr: addr.to_owned(),
        source,
    };
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(invalid)?
        .connect_timeout(CONNECT_TIMEOUT)
        // A peer that vanished without closing the connection (a deleted
        // pod) is noticed within seconds, not at the next TCP timeout.
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let tls = match tls {
        Some(tls) => Some(tls.clone()),
        None if url.starts_with("https://") => Some(ClientTlsConfig::new().with_native_roots()),
        None => None,
    };
    match tls {
        Some(tls) => endpoint.tls_config(tls).map_err(|source| ClientError::Tls {
            addr: addr.to_owned(),
            source,
        }),
        None => Ok(endpoint),
    }
}

/// A token goes over TLS, or in plaintext only to this machine.
fn refuse_plaintext_token(addresses: &[String], endpoints: &[Endpoint]) -> Result<(), ClientError> {
    for (addr, endpoint) in addresses.iter().zip(endpoints) {
        let uri = endpoint.uri();
        if uri.scheme_str() != Some("https") && !uri.host().is_some_and(is_loopback) {
            return Err(ClientError::PlaintextToken { addr: addr.clone() });
        }
    }
    Ok(())
}

/// Whether `host` (as a URI writes it, an IPv6 address in brackets) is
/// this machine: 127.0.0.0/8, ::1 (IPv4-mapped included) or localhost.
fn is_loopback(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A runtime for connect_lazy; nothing connects.
    #[tokio::test]
    async fn a_token_goes_in_plaintext_only_to_loopback_unless_insecure() {
        let build = |addr: &str| ClientConfig::new([addr]).bearer_token("t").build();
        for local in [
            "127.0.0.1:50051",
            "127.3.4.5:1",
            "http://127.0.0.1:50051",
            "[::1]:50051",
            "http://[::1]:50051",
            "[::ffff:127.0.0.1]:1",
            "localhost:50051",
            "http://LocalHost:1",
        ] {
            build(local).unwrap_or_else(|e| panic!("{local}: {e}"));
        }
        for remote in [
            "10.0.0.1:50051",
            "http://kf.fanout.svc:50051",
            "[2001:db8::1]:50051",
            "localhost.example.com:1",
            "128.0.0.1:1",
        ] {
            let err = build(remote).unwrap_err();
            assert!(
                matches!(&err, ClientError::PlaintextToken { addr } if addr == remote),
                "{remote}: {err}"
            );
            assert!(
                err.to_string().contains("--insecure-plaintext-token"),
                "{err}"
            );
        }
        // One remote plaintext address among TLS ones is enough to refuse.
        let mixed = ClientConfig::new(["https://a:1", "b:1"])
            .bearer_token("t")
            .build()
            .unwrap_err();
        assert!(matches!(mixed, ClientError::PlaintextToken { addr } if addr == "b:1"));
        // TLS, no token, or the explicit opt-out: allowed.
        ClientConfig::new(["https://kf.fanout.svc:50051"])
            .bearer_token("t")
            .build()
            .unwrap();
        ClientConfig::new(["kf.fanout.svc:50051"])
            .tls(ClientTlsConfig::new())
            .bearer_token("t")
            .build()
            .unwrap();
        ClientConfig::new(["kf.fanout.svc:50051"]).build().unwrap();
        ClientConfig::new(["kf.fanout.svc:50051"])
            .bearer_token("t")
            .insecure_plaintext_token()
            .build()
            .unwrap();
    }

    #[test]
    fn addresses_without_a_scheme_follow_the_tls_setting() {
        let plain = endpoint("127.0.0.1:50051", None).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = endpoint("fanout:443", Some(&ClientTlsConfig::new())).unwrap();
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        assert!(matches!(
            ClientConfig::new(Vec::<String>::new()).build(),
            Err(ClientError::NoAddress)
        ));
        assert!(matches!(
            ClientConfig::new(["http://bad host"]).build(),
            Err(ClientError::Address { .. })
        ));
    }
}
