//! The subscriber contract under churn, on a real API server: writers
//! create, relabel and delete ConfigMaps while 100 subscribers with random
//! filters join, hang up and resume at random moments. Every stream must be
//! ordered, unique, reliable and bookmarkable, and every subscriber's state
//! must end equal to the API server's filtered LIST at the same RV.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_fanout_client::proto::{EventType, WatchRequest};
use kube_fanout_core::subscription::Limits;
use kube_fanout_tests::{controlplane::ControlPlane, fanout::Fanout, support::*};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::time::Instant;

const NAMESPACE: &str = "stress";
const SUBSCRIBERS: usize = 100;
const CHURN: Duration = Duration::from_secs(8);
const SELECTORS: [&str; 6] = ["", "app=a", "app in (a,b)", "app!=c", "!app", "app"];

/// What a subscriber believes: name → (object RV, labels).
type View = BTreeMap<String, (u64, BTreeMap<String, String>)>;

fn view_of(objects: impl IntoIterator<Item = ConfigMap>) -> View {
    objects
        .into_iter()
        .map(|cm| {
            let rv = cm
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or("0")
                .parse()
                .unwrap_or(0);
            (
                cm.metadata.name.unwrap_or_default(),
                (rv, cm.metadata.labels.unwrap_or_default()),
            )
        })
        .collect()
}

/// Writes random changes until `until`.
async fn writer(client: kube::Client, seed: u64, until: Instant) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let mut rng = StdRng::seed_from_u64(seed);
    while Instant::now() < until {
        let name = format!("cm-{}", rng.random_range(0..40));
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.clone());
        let app = ["a", "b", "c", ""][rng.random_range(0..4)];
        if !app.is_empty() {
            cm.metadata.labels = Some([("app".to_owned(), app.to_owned())].into());
        }
        let outcome = match rng.random_range(0..3) {
            0 => api.create(&PostParams::default(), &cm).await.map(|_| ()),
            1 => match api.get_opt(&name).await? {
                Some(current) => {
                    cm.metadata.resource_version = current.metadata.resource_version;
                    api.replace(&name, &PostParams::default(), &cm)
                        .await
                        .map(|_| ())
                }
                None => Ok(()),
            },
            _ => api
                .delete(&name, &DeleteParams::default())
                .await
                .map(|_| ()),
        };
        match outcome {
            // Races between writers (exists, not found, conflict) are expected.
            Err(kube::Error::Api(s)) if [404, 409].contains(&s.code) => {}
            other => other?,
        }
    }
    Ok(())
}

/// One subscriber: joins, hangs up and resumes until `until`, then follows
/// until it has seen `final_rv` (sent on `done`), and returns its selector,
/// its view, the last RV it saw, how often it resumed and how many live
/// changes (not snapshot objects) it applied.
async fn subscriber(
    addr: String,
    seed: u64,
    until: Instant,
    final_rv: tokio::sync::watch::Receiver<Option<u64>>,
) -> anyhow::Result<(String, View, u64, usize, usize)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let selector = SELECTORS[rng.random_range(0..SELECTORS.len())].to_owned();
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..3000))).await;
    let mut view = View::new();
    let mut last_rv: Option<u64> = None;
    let (mut resumes, mut changes) = (0, 0);
    loop {
        let request = WatchRequest {
            resource: Some(configmaps()),
            namespace: NAMESPACE.into(),
            label_selector: selector.clone(),
            resource_version: last_rv.map(|rv| rv.to_string()).unwrap_or_default(),
            send_initial_events: last_rv.is_none(),
            allow_bookmarks: true,
            ..WatchRequest::default()
        };
        let mut stream = kube_fanout_client::Client::connect(&addr)
            .await?
            .watch(request)
            .await?;
        if last_rv.is_none() {
            let (snapshot, rv) = read_snapshot(&mut stream).await?;
            view = view_of(snapshot.into_values());
            last_rv = Some(rv.parse()?);
        }
        let hang_up = Instant::now() + Duration::from_millis(rng.random_range(100..2000));
        loop {
            let target = *final_rv.borrow();
            if target.is_some_and(|t| last_rv.is_some_and(|rv| rv >= t)) {
                return Ok((
                    selector,
                    view,
                    last_rv.unwrap_or_default(),
                    resumes,
                    changes,
                ));
            }
            if target.is_none() && Instant::now() >= hang_up && Instant::now() < until {
                resumes += 1;
                break;
            }
            let event =
                match tokio::time::timeout(Duration::from_millis(200), stream.message()).await {
                    Err(_) => continue,
                    Ok(message) => message?.ok_or_else(|| anyhow::anyhow!("the watch ended"))?,
                };
            let rv: u64 = event.resource_version.parse()?;
            let previous = last_rv.unwrap_or_default();
            // Ordered, and bookmarkable: nothing after a bookmark at B is at or below B.
            assert!(
                rv >= previous,
                "[{selector}] RV went back: {rv} after {previous}"
            );
            last_rv = Some(rv);
            if event.r#type() == EventType::Bookmark {
                continue;
            }
            let cm = decode(&event)?;
            let (name, object_rv) = name_and_rv(&cm)?;
            let known = view.get(&name).map(|(v, _)| *v);
            changes += 1;
            match event.r#type() {
                EventType::Added => {
                    assert!(
                        known.is_none(),
                        "[{selector}] ADDED {name} it already had at {known:?}"
                    );
                    view.extend(view_of([cm]));
                }
                EventType::Modified => {
                    // Unique: the same version never arrives twice.
                    assert!(
                        known.is_some_and(|k| k < object_rv),
                        "[{selector}] MODIFIED {name}@{object_rv} over {known:?}"
                    );
                    view.extend(view_of([cm]));
                }
                EventType::Deleted => {
                    assert!(known.is_some(), "[{selector}] DELETED {name} it never had");
                    view.remove(&name);
                }
                other => anyhow::bail!("unexpected {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_subscribers_with_random_filters_joining_and_resuming_see_exactly_the_api_server()
-> anyhow::Result<()> {
    let cp = ControlPlane::start().await?;
    create_namespace(&cp.client, NAMESPACE).await?;
    let fanout = Fanout::start_with(cp.client.clone(), &["v1/configmaps"], |o| {
        o.limits = Limits {
            progress_interval: Duration::from_millis(500),
            ..Limits::default()
        };
        // A hundred subscribers, each on its own connection from 127.0.0.1,
        // plus those being replaced as they resume.
        o.connections.max_connections_per_ip = 0;
    })
    .await?;
    fanout.wait_synced().await?;
    let addr = format!("http://{}", fanout.addr);
    let until = Instant::now() + CHURN;
    let (final_tx, final_rx) = tokio::sync::watch::channel(None);
    let writers: Vec<_> = (0..3)
        .map(|i| tokio::spawn(writer(cp.client.clone(), i, until)))
        .collect();
    let subscribers: Vec<_> = (0..SUBSCRIBERS)
        .map(|i| {
            tokio::spawn(subscriber(
                addr.clone(),
                1000 + i as u64,
                until,
                final_rx.clone(),
            ))
        })
        .collect();
    for w in writers {
        w.await??;
    }
    let api: Api<ConfigMap> = Api::namespaced(cp.client.clone(), NAMESPACE);
    let final_rv: u64 = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default()
        .parse()?;
    final_tx.send(Some(final_rv))?;

    let (mut compared, mut resumes) = (0, 0);
    for s in subscribers {
        let (selector, view, rv, resumed, changes) =
            tokio::time::timeout(Duration::from_secs(60), s).await???;
        resumes += resumed;
        assert!(
            changes > 0,
            "[{selector}] no live change reached this subscriber"
        );
        let truth = api
            .list(
                &ListParams::default()
                    .labels(&selector)
                    .at(&rv.to_string())
                    .matching(kube::api::VersionMatch::Exact),
            )
            .await?;
        compared += truth.items.len();
        assert_eq!(
            view,
            view_of(truth.items),
            "[{selector}] state at RV {rv} differs from the API server's LIST"
        );
    }
    // The states compared were not all empty (counted from the API server).
    assert!(compared > 0, "every subscriber's final state was empty");
    assert!(
        resumes >= SUBSCRIBERS,
        "the subscribers hung up and resumed ({resumes} times)"
    );
    println!("{SUBSCRIBERS} subscribers checked ({compared} objects) after {resumes} resumes");
    fanout.stop().await?;
    Ok(())
}
