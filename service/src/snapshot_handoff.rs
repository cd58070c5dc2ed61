//! Snapshots handed to HTTP/2 as their shared chunks, past tonic.
//!
//! tonic writes every message of a response stream into the call's own
//! buffer, one by one: a copy, a frame header and a poll of the stream per
//! message. A snapshot framed once for all its subscribers
//! ([`kube_fanout_core::shared_snapshot`]) is already a run of complete
//! gRPC messages, so it goes around tonic: [`SendSnapshots`] (wrapping the
//! service) gives a Watch call a [`SnapshotSlot`] in its request
//! extensions, the service's stream leaves the framed snapshot in the slot
//! instead of yielding its events ([`into_slot`]), and the response body
//! hands the chunks to HTTP/2 as they are, ahead of whatever tonic made
//! in the same poll (the snapshot's end bookmark, say).
//!
//! The order is kept because of when the slot is filled: tonic's body polls
//! the stream only while this body polls tonic's, this body looks at the
//! slot after every such poll before handing anything on, and a snapshot is
//! a subscription's first item, so tonic holds nothing of the stream yet
//! when it is left in the slot. For the same reason the slot is looked at
//! only until tonic's body first gives something: after that it stays
//! empty, and a live event's frame costs no lock of it.
//!
//! A snapshot handed over goes out whole, as one item of the stream: what
//! ends a stream early (a revoked permission, `Grant::guard`; a retired
//! connection; shutdown) ends it after the snapshot's last chunk. A
//! retirement and a shutdown waited for the snapshot before too; a
//! revocation found by the guard's re-check now ends the stream after the
//! whole snapshot rather than before its next ADDED (the API server never
//! re-checks a running watch at all).
//!
//! A call whose client accepts gzip or zstd has the rest of its messages
//! compressed by tonic, one by one; its slot says which encoding tonic
//! picked (the first of the two the client lists, as tonic picks), and its
//! snapshot's messages are compressed the same way, once for all who
//! share them.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::{Stream, StreamExt, future::BoxFuture};
use http_body::{Body, Frame};
use kube_fanout_core::shared_snapshot::{Compression, FramedSnapshot};
use kube_fanout_proto::wire::EncodedWatchEvent;
use parking_lot::Mutex;
use tonic::{Status, server::NamedService};

/// What a Watch stream yields before its snapshot is taken out
/// ([`into_slot`]): an event, or a framed snapshot.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// One event, for tonic to write.
    Event(EncodedWatchEvent),
    /// A whole snapshot's ADDEDs, for the response body to hand over.
    Snapshot(FramedSnapshot),
}

impl Outgoing {
    /// The events it stands for, and the bytes of their messages.
    pub(crate) fn size(&self) -> (u64, u64) {
        match self {
            Outgoing::Event(event) => (1, event.encoded_len() as u64),
            Outgoing::Snapshot(framed) => (framed.events(), framed.bytes()),
        }
    }
}

/// Where a Watch stream leaves its framed snapshot for the response body,
/// and how the call's messages are compressed.
#[derive(Debug, Clone, Default)]
pub struct SnapshotSlot {
    framed: Arc<Mutex<Option<FramedSnapshot>>>,
    compression: Compression,
}

impl SnapshotSlot {
    /// An empty slot of a call whose messages tonic compresses with
    /// `compression`.
    pub(crate) fn new(compression: Compression) -> Self {
        SnapshotSlot {
            framed: Arc::default(),
            compression,
        }
    }

    /// How the call's messages are compressed.
    pub(crate) fn compression(&self) -> Compression {
        self.compression
    }

    fn put(&self, framed: FramedSnapshot) {
        *self.framed.lock() = Some(framed);
    }

    /// The snapshot left here, if one was and it has not been taken.
    pub(crate) fn take(&self) -> Option<FramedSnapshot> {
        self.framed.lock().take()
    }
}

/// `events` with their snapshot taken out into `slot`: tonic is handed the
/// events alone. A stream with no slot sends no framed snapshot (see
/// `FanoutService::start_watch`); one that did would fail INTERNAL rather
/// than lose it.
pub(crate) fn into_slot(
    slot: Option<SnapshotSlot>,
    events: impl Stream<Item = Result<Outgoing, Status>>,
) -> impl Stream<Item = Result<EncodedWatchEvent, Status>> {
    events.filter_map(move |item| {
        let item = match item {
            Ok(Outgoing::Event(event)) => Some(Ok(event)),
            Ok(Outgoing::Snapshot(framed)) => match &slot {
                Some(slot) => {
                    slot.put(framed);
                    None
                }
                None => Some(Err(Status::internal(
                    "a framed snapshot on a call with nowhere to send it",
                ))),
            },
            Err(status) => Some(Err(status)),
        };
        std::future::ready(item)
    })
}

/// Wraps the gRPC service so that a Watch call's framed snapshot is handed
/// over as its shared chunks (see the module docs).
#[derive(Debug, Clone)]
pub struct SendSnapshots<S>(pub S);

impl<S: NamedService> NamedService for SendSnapshots<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<http::Request<B>> for SendSnapshots<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S: NamedService,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let slot = is_watch::<S>(request.uri().path())
            .then(|| SnapshotSlot::new(negotiated(request.headers())));
        if let Some(slot) = &slot {
            request.extensions_mut().insert(slot.clone());
        }
        let response = self.0.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(match slot {
                Some(slot) => response.map(|body| {
                    tonic::body::Body::new(Handover {
                        body,
                        slot: Some(slot),
                        sending: None,
                        after: None,
                    })
                }),
                None => response,
            })
        })
    }
}

fn is_watch<S: NamedService>(path: &str) -> bool {
    path.strip_prefix('/')
        .and_then(|p| p.strip_prefix(S::NAME))
        .is_some_and(|method| method == "/Watch")
}

/// How tonic will compress the response, picking as it does: the first of
/// gzip and zstd (the encodings the server's gRPC listener turns on, its
/// `compressed`) in the client's first `grpc-accept-encoding` header. Any
/// other name (the Go client's stand-in for "identity only", say) is
/// passed over.
fn negotiated(headers: &http::HeaderMap) -> Compression {
    let accepted = headers
        .get("grpc-accept-encoding")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    accepted
        .split(',')
        .find_map(|encoding| match encoding.trim() {
            "gzip" => Some(Compression::Gzip),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        })
        .unwrap_or(Compression::None)
}

type Polled = Option<Result<Frame<Bytes>, Status>>;

/// A Watch response body that hands over its framed snapshot's chunks
/// before what tonic made after it.
struct Handover {
    body: tonic::body::Body,
    /// Where the snapshot may still be left: `None` once it was, or once
    /// tonic's body gave something without it (see the module docs).
    slot: Option<SnapshotSlot>,
    /// The snapshot being handed over.
    sending: Option<FramedSnapshot>,
    /// What tonic's body gave in the poll that filled the slot, handed on
    /// once the snapshot has been.
    after: Option<Polled>,
}

impl Body for Handover {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(framed) = &mut this.sending {
                match framed.next_chunk() {
                    Some(chunk) => return Poll::Ready(Some(Ok(Frame::data(chunk)))),
                    None => this.sending = None,
                }
            }
            if let Some(after) = this.after.take() {
                return Poll::Ready(after);
            }
            let polled = Pin::new(&mut this.body).poll_frame(cx);
            let Some(slot) = &this.slot else {
                return polled;
            };
            let Some(framed) = slot.take() else {
                if polled.is_ready() {
                    this.slot = None;
                }
                return polled;
            };
            this.slot = None;
            this.sending = Some(framed);
            if let Poll::Ready(polled) = polled {
                this.after = Some(polled);
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.sending.is_none() && self.after.is_none() && self.body.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[test]
    fn watch_calls_get_a_slot_with_the_compression_tonic_picks() {
        struct Named;
        impl NamedService for Named {
            const NAME: &'static str = "kubefanout.v1.KubeFanout";
        }
        assert!(is_watch::<Named>("/kubefanout.v1.KubeFanout/Watch"));
        for other in [
            "/kubefanout.v1.KubeFanout/List",
            "/kubefanout.v1.KubeFanout/Watcher",
            "/other.v1.KubeFanout/Watch",
            "kubefanout.v1.KubeFanout/Watch",
        ] {
            assert!(!is_watch::<Named>(other), "{other}");
        }
        let headers = |values: &[&str]| {
            let mut headers = http::HeaderMap::new();
            for v in values {
                headers.append("grpc-accept-encoding", v.parse().unwrap());
            }
            headers
        };
        use Compression::*;
        for (values, expected) in [
            (&[][..], None),
            (&["identity"], None),
            (&["identity, gzip"], Gzip),
            (&["zstd,gzip"], Zstd),
            (&["kube-fanout-no-compression"], None),
            (&["br, deflate"], None),
            // tonic reads the first header only.
            (&["identity", "zstd"], None),
        ] {
            assert_eq!(negotiated(&headers(values)), expected, "{values:?}");
        }
    }

    /// Whatever tonic's body gave in the poll that filled the slot (data,
    /// trailers, its end) comes after the snapshot's last chunk, and the
    /// body is not polled again before.
    #[tokio::test]
    async fn the_snapshot_goes_before_what_tonic_made_meanwhile() {
        use kube_fanout_core::{
            fields::SelectableFields, filter::Filter, fixtures::configmaps, fixtures::object,
            object::ResourceVersion, projection::Projection, shared_snapshot::SharedSnapshots,
            store::Store,
        };
        let store = Store::new(configmaps(), 100);
        let pad = format!(r#"{{"pad":"{}"}}"#, "p".repeat(2000));
        store.replace(
            (0..100)
                .map(|i| object(&format!("o{i:03}"), i + 1, &pad))
                .collect(),
            ResourceVersion(100),
        );
        let snapshot = store.snapshot();
        let shared = SharedSnapshots::new(u64::MAX);
        let framed = || {
            shared.join(
                &snapshot.objects,
                snapshot.resource_version,
                &Filter::new("", "", "", &SelectableFields::default()).unwrap(),
                Projection::Full,
                Default::default(),
            )
        };
        let mut expected = Vec::new();
        let mut chunks = framed();
        while let Some(chunk) = chunks.next_chunk() {
            expected.extend_from_slice(&chunk);
        }
        assert!(expected.len() > 3 * kube_fanout_core::shared_snapshot::CHUNK_BYTES);
        // tonic's body: the slot is filled as it is first polled, which
        // then gives the bookmark's bytes and, polled again, its trailers.
        let slot = SnapshotSlot::default();
        let mut first = Some((slot.clone(), framed()));
        let mut polls = 0;
        let inner = futures::stream::poll_fn(move |_| {
            polls += 1;
            if let Some((slot, framed)) = first.take() {
                slot.put(framed);
                return Poll::Ready(Some(Ok::<_, Status>(Frame::data(Bytes::from_static(
                    b"bookmark",
                )))));
            }
            match polls {
                2 => Poll::Ready(Some(Ok(Frame::trailers(http::HeaderMap::new())))),
                _ => Poll::Ready(None),
            }
        });
        let mut body = Handover {
            body: tonic::body::Body::new(http_body_util::StreamBody::new(inner)),
            slot: Some(slot),
            sending: None,
            after: None,
        };
        let mut data = Vec::new();
        let mut trailers = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap();
            if frame.is_trailers() {
                trailers += 1;
                assert!(data.ends_with(b"bookmark"), "the trailers come last");
            } else {
                assert_eq!(trailers, 0);
                data.extend_from_slice(&frame.into_data().unwrap());
            }
        }
        expected.extend_from_slice(b"bookmark");
        assert_eq!(data, expected, "every chunk, then the bookmark");
        assert_eq!(trailers, 1);
        assert!(body.slot.is_none(), "not looked at after the snapshot");
    }

    /// The slot is looked at while tonic's body has given nothing (a
    /// stream still starting), and no longer once it gives a frame
    /// without a snapshot: a stream's snapshot is its first item.
    #[tokio::test]
    async fn the_slot_is_looked_at_only_until_the_first_frame() {
        let mut polls = 0;
        let inner = futures::stream::poll_fn(move |_| {
            polls += 1;
            match polls {
                1 => Poll::Pending,
                2 => Poll::Ready(Some(Ok::<_, Status>(Frame::data(Bytes::from_static(
                    b"event",
                ))))),
                _ => Poll::Ready(None),
            }
        });
        let mut body = Handover {
            body: tonic::body::Body::new(http_body_util::StreamBody::new(inner)),
            slot: Some(SnapshotSlot::default()),
            sending: None,
            after: None,
        };
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
        assert!(body.slot.is_some(), "still starting");
        let frame = Pin::new(&mut body).poll_frame(&mut cx);
        assert!(matches!(frame, Poll::Ready(Some(Ok(_)))));
        assert!(body.slot.is_none(), "a first item that is no snapshot");
    }
}
