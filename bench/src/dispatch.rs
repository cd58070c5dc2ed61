//! `fanout-bench dispatch`: the server's CPU per event with N scoped
//! subscribers of which each event concerns one (issue 12: it must not
//! grow with subscribers that receive nothing).
//!
//! In process, without the network: kube-fanout's `FanoutService` over a
//! `Store`, N Watch streams drained by tasks on a two-thread runtime (what
//! the server does per subscriber, less the HTTP/2 write), a writer thread
//! feeding `Store::apply` at a fixed rate. Subscriber i sees the pods of
//! namespace `ns-i`, which carry the labels `sub=i` and `sub-i` (empty
//! value) and the scheduler name `sched-i`, and the feed cycles through
//! the namespaces. Five ways of asking for the same deliveries:
//!
//! - `namespace`: the namespace (`namespace: ns-i`), which dispatch
//!   indexes, so an event wakes only its subscriber;
//! - `label`: the label selector `sub=i`, which dispatch indexes by the
//!   label, the same;
//! - `label-set`: the label selector `sub in (i,none)`, which dispatch
//!   indexes under each of the two values (no object has `none`), the
//!   same;
//! - `label-presence`: the label selector `sub-i` (the label exists),
//!   which dispatch indexes by the label's presence, the same;
//! - `unindexed`: the field selector `spec.schedulerName=sched-i`, a
//!   field dispatch indexes only when `--index-field` names it, so every
//!   event wakes every subscriber, which filters it out (the path every
//!   subscriber took before dispatch by index).
//!
//! The figure is this process's CPU time (all threads) over the feed, until
//! every delivery arrived, divided by the events fed.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::bail;
use futures::StreamExt;
use kube_fanout::{
    event::EventKind,
    fields::SelectableFields,
    object::ResourceVersion,
    registry::{Served, ServedTypes},
    resource::ResourceType,
    service::FanoutService,
    store::Store,
    subscription::Limits,
};
use kube_fanout_proto::v1::{ResourceRef, WatchRequest, kube_fanout_server::KubeFanout};
use tonic::Request;

use super::{HISTORY, cpu_ns, parse_as};

#[derive(clap::Args, Clone)]
pub struct DispatchArgs {
    /// Subscriber counts to compare.
    #[arg(long, value_delimiter = ',', default_value = "500,5000")]
    subscribers: Vec<usize>,
    /// Events per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Events fed per case.
    #[arg(long, default_value_t = 1000)]
    events: u64,
    /// Size of each object's JSON, in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
}

/// How subscribers ask for their namespace's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Namespace,
    Label,
    LabelSet,
    LabelPresence,
    Unindexed,
}

impl Scope {
    const ALL: [Scope; 5] = [
        Scope::Namespace,
        Scope::Label,
        Scope::LabelSet,
        Scope::LabelPresence,
        Scope::Unindexed,
    ];
}

/// One case's figures.
struct Figures {
    cpu_per_event: Duration,
    wakeups_per_event: f64,
}

pub async fn dispatch(args: DispatchArgs) -> anyhow::Result<()> {
    println!(
        "dispatch: {} events at {}/s of {} B, each for one of N scoped subscribers",
        args.events, args.rate, args.size
    );
    println!("| N | scope | CPU per event | wake-ups per event |");
    println!("|---|---|---|---|");
    let mut results = Vec::new();
    for &n in &args.subscribers {
        for scope in Scope::ALL {
            let figures = case(scope, n, &args).await?;
            println!(
                "| {n} | {scope:?} | {:.1} µs | {:.2} |",
                figures.cpu_per_event.as_nanos() as f64 / 1e3,
                figures.wakeups_per_event
            );
            results.push((n, scope, figures));
        }
    }
    if let [first, .., last] = args.subscribers.as_slice() {
        for scope in Scope::ALL {
            let cpu = |n: usize| {
                results
                    .iter()
                    .find(|(m, s, _)| *m == n && *s == scope)
                    .map_or(0.0, |(_, _, f)| f.cpu_per_event.as_nanos() as f64)
            };
            println!(
                "{scope:?}: CPU per event at N = {last} / at N = {first}: {:.2}x",
                cpu(*last) / cpu(*first)
            );
        }
    }
    Ok(())
}

async fn case(scope: Scope, n: usize, args: &DispatchArgs) -> anyhow::Result<Figures> {
    let store = Arc::new(Store::new(pods(), HISTORY));
    store.replace(Vec::new(), ResourceVersion(1));
    let mut cache = ServedTypes::default();
    cache.insert(Served::new(store.clone(), Arc::default()));
    let service = FanoutService::new(Arc::new(cache), Limits::default());
    let delivered = Arc::new(AtomicU64::new(0));
    let mut drains = Vec::with_capacity(n);
    for i in 0..n {
        let (namespace, label_selector, field_selector) = match scope {
            Scope::Namespace => (format!("ns-{i}"), String::new(), String::new()),
            Scope::Label => (String::new(), format!("sub={i}"), String::new()),
            Scope::LabelSet => (String::new(), format!("sub in ({i},none)"), String::new()),
            Scope::LabelPresence => (String::new(), format!("sub-{i}"), String::new()),
            Scope::Unindexed => (
                String::new(),
                String::new(),
                format!("spec.schedulerName=sched-{i}"),
            ),
        };
        let request = Request::new(WatchRequest {
            resource: Some(ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
            }),
            namespace,
            label_selector,
            field_selector,
            resource_version: "1".into(),
            ..Default::default()
        });
        let mut stream = service.watch(request).await?.into_inner();
        let delivered = delivered.clone();
        drains.push(tokio::spawn(async move {
            while let Some(Ok(_)) = stream.next().await {
                delivered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Every subscriber live (registered) before the feed starts.
    let live = |s: &Store| {
        let status = s.dispatch().status();
        status.indexed + status.unindexed
    };
    while live(&store) < n as u64 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let wakeups = store.dispatch().status().wakeups;
    let cpu = cpu_ns()?;
    let writer = {
        let (store, events, rate, size) = (store.clone(), args.events, args.rate, args.size);
        let pods = pods();
        std::thread::spawn(move || -> anyhow::Result<()> {
            let start = Instant::now();
            for j in 0..events {
                let due = start + Duration::from_secs_f64(j as f64 / rate);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                let json = object_json(j % n as u64, j, 2 + j, size);
                store.apply(EventKind::Added, parse_as(&json, &pods)?);
            }
            Ok(())
        })
    };
    let deadline = Instant::now() + Duration::from_secs_f64(args.events as f64 / args.rate + 60.0);
    while delivered.load(Ordering::Relaxed) < args.events {
        if Instant::now() > deadline {
            bail!(
                "{scope:?} N={n}: {} of {} events delivered",
                delivered.load(Ordering::Relaxed),
                args.events
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    writer.join().expect("the writer does not panic")?;
    let cpu = Duration::from_nanos(cpu_ns()? - cpu);
    let wakeups = store.dispatch().status().wakeups - wakeups;
    store.close_subscribers();
    for drain in drains {
        drain.await?;
    }
    let delivered = delivered.load(Ordering::Relaxed);
    if delivered != args.events {
        bail!(
            "{scope:?} N={n}: delivered {delivered}, fed {}",
            args.events
        );
    }
    Ok(Figures {
        cpu_per_event: cpu / args.events as u32,
        wakeups_per_event: wakeups as f64 / args.events as f64,
    })
}

fn pods() -> ResourceType {
    ResourceType {
        gvr: "v1/pods".parse().expect("a valid resource"),
        kind: "Pod".into(),
        namespaced: true,
        fields: SelectableFields::builtin("v1", "Pod").expect("pods have selectable fields"),
    }
}

/// A pod of about `size` bytes of JSON in namespace `ns-{sub}`, labelled
/// `sub={sub}` and `sub-{sub}=""`, for scheduler `sched-{sub}` (padded
/// with an annotation).
fn object_json(sub: u64, name: u64, rv: u64, size: usize) -> String {
    let mut json = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"pod-{name}","namespace":"ns-{sub}","resourceVersion":"{rv}","labels":{{"sub":"{sub}","sub-{sub}":""}},"annotations":{{"pad":""#
    );
    let spec = format!(
        r#""}}}},"spec":{{"schedulerName":"sched-{sub}","containers":[{{"name":"c","image":"i"}}]}}}}"#
    );
    let pad = size.saturating_sub(json.len() + spec.len());
    json.extend(std::iter::repeat_n('x', pad));
    json.push_str(&spec);
    json
}
