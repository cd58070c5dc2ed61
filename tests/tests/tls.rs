//! TLS end to end: handshakes, a client certificate's identity mapped to
//! RBAC on the real API server, certificate rotation under an open watch,
//! and grpcurl through reflection with a bearer token.

use std::path::Path;

use base64::Engine;

use anyhow::Result;
use kube_fanout::security::AuthOptions;
use kube_fanout_client::Client;
use kube_fanout_listener::tls::TlsFiles;
use kube_fanout_proto::v1::{ListResourcesRequest, kube_fanout_client::KubeFanoutClient};
use kube_fanout_tests::{
    clients::over_tls,
    controlplane::{ControlPlane, user_token},
    fanout::Fanout,
    pki::{Ca, Pair},
    rbac::{grant, group, rule},
    support::{
        create_configmap, create_namespace, next_change, read_snapshot, run, tool, watch_list,
    },
};
use tonic::Code;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

async fn connect(
    fanout: &Fanout,
    ca: &str,
    certificate: Option<&Pair>,
    token: Option<&str>,
) -> Result<Client, kube_fanout_client::ClientError> {
    over_tls(fanout.addr, ca, certificate, token)
        .connect()
        .await
}

/// With TLS on, the kubelet's plaintext gRPC probe gets readiness from the
/// health listener, which serves nothing else; the gRPC port itself
/// refuses plaintext.
async fn plaintext_health_is_served_apart(fanout: &Fanout) -> Result<()> {
    let plaintext = |addr| async move {
        tonic::transport::Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await
            .map_err(anyhow::Error::from)
    };
    let probe = fanout.health_addr.expect("a health listener was asked for");
    let ready = HealthClient::new(plaintext(probe).await?)
        .check(HealthCheckRequest {
            service: "kubefanout.v1.KubeFanout".into(),
        })
        .await?;
    assert_eq!(ready.into_inner().status(), ServingStatus::Serving);
    let other = KubeFanoutClient::new(plaintext(probe).await?)
        .list_resources(ListResourcesRequest::default())
        .await
        .expect_err("the health listener serves only health");
    assert_eq!(other.code(), Code::Unimplemented, "{other:?}");
    let tls_port = HealthClient::new(plaintext(fanout.addr).await?)
        .check(HealthCheckRequest::default())
        .await;
    assert!(tls_port.is_err(), "plaintext on the TLS port: {tls_port:?}");
    Ok(())
}

#[tokio::test]
async fn tls_mtls_identity_and_rotation_under_an_open_watch() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let admin = cp.client.clone();
    for ns in ["a", "b"] {
        create_namespace(&admin, ns).await?;
    }
    create_configmap(&admin, "a", "first", "v").await?;
    grant(
        &admin,
        "a",
        "readers",
        vec![rule(&["list", "watch"], "configmaps")],
        vec![group("team-x")],
    )
    .await?;

    let dir = tempfile::tempdir()?;
    let (serving_ca, client_ca, stranger_ca) = (
        Ca::new("serving")?,
        Ca::new("clients")?,
        Ca::new("strangers")?,
    );
    let (cert, key) = serving_ca.serving()?.write_to(dir.path())?;
    std::fs::write(dir.path().join("client-ca.crt"), client_ca.pem())?;
    let files = TlsFiles {
        cert,
        key,
        client_ca: Some(dir.path().join("client-ca.crt")),
    };
    let fanout = Fanout::start_with(admin.clone(), &["v1/configmaps"], |o| {
        o.security.tls = Some(files);
        o.security.auth = Some(AuthOptions::default());
        o.health_addr = Some("127.0.0.1:0".parse().expect("an address"));
    })
    .await?;
    fanout.wait_synced().await?;
    plaintext_health_is_served_apart(&fanout).await?;

    // A client certificate: CN the user, O the group that RBAC grants.
    let mut frank = connect(
        &fanout,
        &serving_ca.pem(),
        Some(&client_ca.client("frank", "team-x")?),
        None,
    )
    .await?;
    let mut watch = frank.watch(watch_list("a")).await?;
    let (objects, _) = read_snapshot(&mut watch).await?;
    assert_eq!(objects.keys().collect::<Vec<_>>(), ["first"]);
    let denied = frank
        .watch(watch_list("b"))
        .await
        .expect_err("no grant in b");
    let denied = match denied {
        kube_fanout_client::ClientError::Status(s) => s,
        other => panic!("{other}"),
    };
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(
        denied
            .message()
            .contains(r#"User "frank" cannot watch resource "configmaps" in API group "" in the namespace "b""#),
        "{denied:?}"
    );

    // A certificate from a CA the server does not trust leaves the request
    // to its bearer token, as on the API server (which asks for client
    // certificates without requiring them and verifies them in its
    // authenticator); without a token the request is refused, saying so.
    let certificate = stranger_ca.client("mallory", "team-x")?;
    let mut with_token = connect(
        &fanout,
        &serving_ca.pem(),
        Some(&certificate),
        Some(&user_token("bob")),
    )
    .await?;
    with_token.list_resources().await?;
    let refused = connect(&fanout, &serving_ca.pem(), Some(&certificate), None)
        .await?
        .list_resources()
        .await
        .expect_err("a certificate from another CA alone is refused");
    let refused = match refused {
        kube_fanout_client::ClientError::Status(s) => s,
        other => panic!("{other}"),
    };
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("certificate signed by unknown authority"),
        "{refused:?}"
    );
    let mut plain = Client::connect(&format!("http://{}", fanout.addr)).await?;
    assert!(
        plain.list_resources().await.is_err(),
        "no plaintext on a TLS port"
    );

    // A bearer token over TLS works too (ListResources: authenticated).
    let mut bob = connect(&fanout, &serving_ca.pem(), None, Some(&user_token("bob"))).await?;
    bob.list_resources().await?;

    // Rotation: new files, signed by another CA. New connections get the
    // new certificate; the open watch goes on.
    let rotated_ca = Ca::new("rotated")?;
    rotated_ca.serving()?.write_to(dir.path())?;
    connect(&fanout, &rotated_ca.pem(), None, Some(&user_token("bob")))
        .await?
        .list_resources()
        .await?;
    assert!(
        connect(&fanout, &serving_ca.pem(), None, Some(&user_token("bob")))
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
    create_configmap(&admin, "a", "after-rotation", "v").await?;
    let event = next_change(&mut watch).await?;
    assert!(event.object.contains("after-rotation"), "{}", event.object);

    // Client CA rotation: certificates of the new CA map to users at once,
    // the old CA's are refused on new connections, and frank's open watch
    // (verified under the old CA) goes on.
    let rotated_clients = Ca::new("rotated clients")?;
    std::fs::write(dir.path().join("client-ca.crt"), rotated_clients.pem())?;
    let mut grace = connect(
        &fanout,
        &rotated_ca.pem(),
        Some(&rotated_clients.client("grace", "team-x")?),
        None,
    )
    .await?;
    let mut graces = grace.watch(watch_list("a")).await?;
    let (objects, _) = read_snapshot(&mut graces).await?;
    assert_eq!(
        objects.keys().collect::<Vec<_>>(),
        ["after-rotation", "first"]
    );
    let old_client = async {
        connect(
            &fanout,
            &rotated_ca.pem(),
            Some(&client_ca.client("frank", "team-x")?),
            None,
        )
        .await?
        .watch(watch_list("a"))
        .await?;
        anyhow::Ok(())
    };
    let refused = old_client
        .await
        .expect_err("a certificate of the replaced client CA is refused");
    println!("the replaced client CA's certificate: {refused:#}");
    create_configmap(&admin, "a", "after-ca-rotation", "v").await?;
    let event = next_change(&mut watch).await?;
    assert!(
        event.object.contains("after-ca-rotation"),
        "{}",
        event.object
    );

    // grpcurl over TLS: reflection needs the bearer token, and with it
    // lists the services and calls one.
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, rotated_ca.pem())?;
    let grpcurl = tool("grpcurl")?;
    let addr = fanout.addr.to_string();
    let ca_arg = ca_file.display().to_string();
    let header = format!("authorization: Bearer {}", user_token("bob"));
    let base = ["-cacert", &ca_arg, "-authority", "localhost"];
    let anonymous = run(&grpcurl, &[&base[..], &[&addr, "list"]].concat()).await?;
    assert!(!anonymous.success, "reflection without credentials");
    assert!(
        anonymous.stderr.contains("Unauthenticated"),
        "{}",
        anonymous.stderr
    );
    let listed = run(
        &grpcurl,
        &[&base[..], &["-H", &header, &addr, "list"]].concat(),
    )
    .await?;
    assert!(listed.success, "{}", listed.stderr);
    assert!(
        listed.stdout.contains("kubefanout.v1.KubeFanout"),
        "{}",
        listed.stdout
    );

    // kubectl-fanout --kubeconfig-credentials with the certificate and key
    // embedded in the kubeconfig (base64 *-data), as kind and most
    // installers write them; a user with no credentials is told so.
    let grace = rotated_clients.client("grace", "team-x")?;
    let kubeconfig = |user: &str| {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:1\"}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
             users: [{{name: u, user: {{{user}}}}}]\n"
        )
    };
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let embedded = dir.path().join("embedded.kubeconfig");
    std::fs::write(
        &embedded,
        kubeconfig(&format!(
            "client-certificate-data: {}, client-key-data: {}",
            b64(&grace.cert),
            b64(&grace.key)
        )),
    )?;
    let empty = dir.path().join("empty.kubeconfig");
    std::fs::write(&empty, kubeconfig(""))?;
    let cli = |kubeconfig: &Path| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-fanout-under-test"))
            .args([
                "--server",
                &addr,
                "--kubeconfig-credentials",
                "--ca-file",
                &ca_arg,
            ])
            .args([
                "--tls-server-name",
                "localhost",
                "list",
                "configmaps",
                "-n",
                "a",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBE_FANOUT_SERVER")
            .kill_on_drop(true)
            .output()
    };
    let listed = cli(&embedded).await?;
    let stdout = String::from_utf8_lossy(&listed.stdout);
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success(), "{stderr}");
    assert!(stdout.contains("after-ca-rotation"), "{stdout}");
    let refused = cli(&empty).await?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("has no token, token file or client certificate and key"),
        "{stderr}"
    );
    fanout.stop().await
}
