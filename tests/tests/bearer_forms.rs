//! The authorization header, form by form, against the real API server:
//! each form is sent to the API server and to kube-fanout with the same
//! token, and kube-fanout must read it as the API server's bearer-token
//! authenticator does. A form the API server authenticates is the token's
//! user on both; a form it ignores (the request is anonymous there) is a
//! request without credentials here (kube-fanout serves no anonymous
//! requests); a token it does not accept is not accepted here either.

use anyhow::{Context, Result, bail};
use http::{HeaderMap, HeaderValue, header::AUTHORIZATION};
use kube_fanout::security::{AuthOptions, Security};
use kube_fanout_client::proto::ListRequest;
use kube_fanout_tests::{
    controlplane::{ControlPlane, pem_der, user_token},
    fanout::Fanout,
    rbac::{grant, rule, until_api_server_lists, user},
    support::{configmaps, create_namespace},
};
use tonic::{Code, metadata::MetadataMap};

/// What a request with a given authorization header was taken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// As the token's user (the only one allowed to list).
    TokensUser,
    /// As if it carried no credential: anonymous on the API server.
    NoCredential,
    /// A token that is not accepted.
    NotAccepted,
}

/// The forms, with what the API server does with each (asserted as well,
/// so that a test run where both sides read every form alike but wrongly
/// fails too). `T` stands for alice's token.
const FORMS: &[(&[u8], Read)] = &[
    (b"Bearer T", Read::TokensUser),
    (b"bearer T", Read::TokensUser),
    (b"BEARER T", Read::TokensUser),
    (b" Bearer T", Read::TokensUser),
    (b"\tBearer T\t", Read::TokensUser),
    (b"Bearer T ", Read::TokensUser),
    (b"Bearer T trailing words", Read::TokensUser),
    (b"Bearer  T", Read::NoCredential),
    (b"Bearer   T", Read::NoCredential),
    (b"Bearer\tT", Read::NoCredential),
    (b"Bearer", Read::NoCredential),
    (b"Bearer ", Read::NoCredential),
    (b"", Read::NoCredential),
    (b"Basic YWxpY2U6VA==", Read::NoCredential),
    (b"Token T", Read::NoCredential),
    (b"\xa0Bearer T", Read::NoCredential),
    (b"Bearer T\tmore", Read::NotAccepted),
    (b"Bearer TT", Read::NotAccepted),
    (b"Bearer not-a-token", Read::NotAccepted),
];

/// The form with `T` replaced by `token`.
fn header(form: &[u8], token: &str) -> Result<HeaderValue> {
    let mut value = Vec::new();
    for &b in form {
        if b == b'T' {
            value.extend_from_slice(token.as_bytes());
        } else {
            value.push(b);
        }
    }
    Ok(HeaderValue::from_bytes(&value)?)
}

/// How the API server reads `value`: a List of configmaps in `a`, which
/// only alice may make; an anonymous request is refused naming
/// `system:anonymous`.
async fn api_server_reads(cp: &ControlPlane, value: &HeaderValue) -> Result<Read> {
    let mut config = kube::Config::new(cp.server_url.parse()?);
    config.root_cert = Some(vec![pem_der(&cp.ca_pem)?]);
    let client = kube::Client::try_from(config)?;
    let request = http::Request::get("/api/v1/namespaces/a/configmaps")
        .header(AUTHORIZATION, value.clone())
        .body(Vec::new())?;
    let response = client.send(request.map(Into::into)).await?;
    let status = response.status();
    let body = body_text(response).await?;
    Ok(match status.as_u16() {
        200 => Read::TokensUser,
        401 => Read::NotAccepted,
        403 if body.contains("system:anonymous") => Read::NoCredential,
        other => bail!("the API server answered {other}: {body}"),
    })
}

async fn body_text(response: http::Response<kube::client::Body>) -> Result<String> {
    use http_body_util::BodyExt;
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// How kube-fanout reads `value`: the same List.
async fn fanout_reads(fanout: &Fanout, value: &HeaderValue) -> Result<Read> {
    let mut client = fanout.client().await?;
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, value.clone());
    let mut request = tonic::Request::new(ListRequest {
        resource: Some(configmaps()),
        namespace: "a".into(),
        ..ListRequest::default()
    });
    *request.metadata_mut() = MetadataMap::from_headers(headers);
    Ok(match client.grpc().list(request).await {
        Ok(_) => Read::TokensUser,
        Err(s)
            if s.code() == Code::Unauthenticated && s.message().starts_with("no credentials") =>
        {
            Read::NoCredential
        }
        Err(s) if s.code() == Code::Unauthenticated && s.message().contains("not accepted") => {
            Read::NotAccepted
        }
        Err(s) => bail!("kube-fanout answered {:?}: {}", s.code(), s.message()),
    })
}

#[tokio::test]
async fn every_authorization_header_form_is_read_as_the_api_server_reads_it() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, "a").await?;
    grant(
        &cp.client,
        "a",
        "alice-lists",
        vec![rule(&["list"], "configmaps")],
        vec![user("alice")],
    )
    .await?;
    let token = user_token("alice");
    until_api_server_lists(&cp, &token, "a", &Default::default()).await?;
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.security = Security {
            auth: Some(AuthOptions::default()),
            ..Security::default()
        };
    })
    .await?;
    fanout.wait_synced().await?;

    let mut differences = Vec::new();
    for &(form, expected) in FORMS {
        let value = header(form, &token)?;
        let shown = String::from_utf8_lossy(form);
        let api = api_server_reads(&cp, &value)
            .await
            .with_context(|| format!("{shown:?} on the API server"))?;
        let ours = fanout_reads(&fanout, &value)
            .await
            .with_context(|| format!("{shown:?} on kube-fanout"))?;
        if api != expected || ours != api {
            differences.push(format!(
                "{shown:?}: the API server {api:?} (expected {expected:?}), kube-fanout {ours:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    fanout.stop().await
}
