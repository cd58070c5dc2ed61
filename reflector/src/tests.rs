//! The reflector against a mock upstream, for the answers a real API server
//! will not give on cue (429 with Retry-After, 500s, refused connections,
//! very short watches, expired continue tokens) and for the exact requests
//! client-go's rules produce. Time is paused: backoffs are measured, not
//! slept.

use std::{collections::HashMap, fmt, time::Duration};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use tokio::{sync::mpsc, time::Instant};
use tokio_stream::wrappers::ReceiverStream;
use tower_test::mock::{Handle, SendResponse};

use super::*;
use crate::{
    config::MIN_WATCH_TIMEOUT, open_watch::VERY_SHORT_WATCH, paging::Paging,
    watch_list::differences,
};
use kube_fanout_core::{
    fixtures::configmaps,
    object::{Object, ResourceVersion, Transform, TypeMeta},
    reflector_status::Phase,
};

type MockBody = BoxBody<Bytes, std::io::Error>;
type MockHandle = Handle<Request<kube::client::Body>, Response<MockBody>>;

fn setup(config: ReflectorConfig) -> (Reflector, Arc<Store>, MockHandle) {
    let (service, handle) =
        tower_test::mock::pair::<Request<kube::client::Body>, Response<MockBody>>();
    let client = kube::Client::new(service, "default");
    let store = Arc::new(Store::new(configmaps(), 1000));
    (Reflector::new(client, store.clone(), config), store, handle)
}

fn list_watch() -> ReflectorConfig {
    ReflectorConfig {
        use_watch_list: false,
        ..ReflectorConfig::default()
    }
}

/// The query of the next request, and the handle to answer it.
async fn next(
    handle: &mut MockHandle,
) -> (HashMap<String, String>, SendResponse<Response<MockBody>>) {
    let (request, send) = handle.next_request().await.expect("a request");
    assert_eq!(request.uri().path(), "/api/v1/configmaps");
    let query = form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    (query, send)
}

fn full(status: u16, body: String) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .body(
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed(),
        )
        .unwrap()
}

fn cm(name: &str, rv: u64) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
    )
}

fn list(rv: u64, items: &[String], continue_token: &str) -> String {
    format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","continue":"{continue_token}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

fn event(kind: &str, object: &str) -> String {
    format!(r#"{{"type":"{kind}","object":{object}}}"#)
}

fn bookmark(rv: u64, end: bool) -> String {
    let annotations = if end {
        r#","annotations":{"k8s.io/initial-events-end":"true"}"#
    } else {
        ""
    };
    event(
        "BOOKMARK",
        &format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"{annotations}}}}}"#
        ),
    )
}

fn status(code: u16, reason: &str, message: &str) -> String {
    format!(
        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","code":{code},"reason":"{reason}","message":"{message}"}}"#
    )
}

/// A watch response that stays open: send lines with `tx`, drop it to end.
fn streaming() -> (mpsc::Sender<String>, Response<MockBody>) {
    let (tx, rx) = mpsc::channel::<String>(16);
    let frames = ReceiverStream::new(rx).map(|line| Ok(Frame::data(Bytes::from(line + "\n"))));
    let response = Response::builder()
        .status(200)
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .unwrap();
    (tx, response)
}

fn keys(store: &Store) -> Vec<String> {
    store
        .snapshot()
        .objects
        .iter()
        .map(|o| o.key.clone())
        .collect()
}

/// Log lines recorded while a test runs: (level, message and fields).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<(tracing::Level, String)>>>);

std::thread_local! {
    /// The capture of the test running on this thread, if it captures.
    static CAPTURING: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Ends a thread's capture when dropped.
struct Capturing;

impl Drop for Capturing {
    fn drop(&mut self) {
        CAPTURING.with(|c| c.borrow_mut().take());
    }
}

impl Logs {
    /// Records every log line of this thread (paused-time tests run on one)
    /// until the guard drops.
    ///
    /// One global subscriber, set once, hands each line to the capture of
    /// the thread it was logged on. A scoped subscriber per test
    /// (`set_default`) was flaky: callsite interest is global, and a
    /// callsite first hit by a parallel test thread could keep "never",
    /// so the DEBUG line a test looked for went missing (twice in a
    /// clean-clone run). With one global subscriber that enables
    /// everything, every callsite is always enabled.
    fn capture() -> (Self, Capturing) {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            use tracing_subscriber::layer::SubscriberExt;
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Router))
                .expect("no other global subscriber in the reflector's tests");
        });
        let logs = Logs::default();
        CAPTURING.with(|c| *c.borrow_mut() = Some(logs.clone()));
        (logs, Capturing)
    }

    fn at(&self, level: tracing::Level) -> Vec<String> {
        self.0
            .lock()
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, line)| line.clone())
            .collect()
    }
}

/// The global subscriber's one layer: each line to its thread's capture.
struct Router;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Router {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let Some(logs) = CAPTURING.with(|c| c.borrow().clone()) else {
            return;
        };
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
                use std::fmt::Write;
                let _ = write!(self.0, "{}={value:?} ", field.name());
            }
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        logs.0.lock().push((*event.metadata().level(), line.0));
    }
}

/// One watch from `from` answered with `body`; the next state.
async fn watch_answered(
    reflector: &mut Reflector,
    handle: &mut MockHandle,
    from: u64,
    body: String,
) -> State {
    let step = reflector.step(State::Watch(ResourceVersion(from)));
    let answer = async {
        let (query, send) = next(handle).await;
        assert_eq!(query["watch"], "true");
        assert_eq!(query["resourceVersion"], from.to_string());
        send.send_response(full(200, body));
    };
    tokio::join!(step, answer).0
}

fn internal_error() -> String {
    event("ERROR", &status(500, "InternalError", "etcd hiccup"))
}

/// The relist that follows a LIST's watch if the watch fails.
fn relist(watch: State) -> State {
    let State::Watch(rv) = watch else {
        panic!("expected a watch, got {watch:?}")
    };
    State::List(SyncPoint::At(rv))
}

fn relists(state: &State) -> bool {
    matches!(state, State::Backoff { then, .. } if matches!(**then, State::List(_)))
}

#[tokio::test(start_paused = true)]
async fn the_reflector_stops_promptly_when_cancelled_mid_request() {
    let (reflector, _, mut handle) = setup(list_watch());
    let status = reflector.status();
    let cancel = CancellationToken::new();
    let run = tokio::spawn(reflector.run(cancel.clone()));
    let (_, _send) = next(&mut handle).await;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("stopped within a second")
        .unwrap();
    assert_eq!(status.lock().phase, Phase::Stopped);
}

mod list;
mod watch;
mod watch_list;
