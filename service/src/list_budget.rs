//! How many bytes of List responses kube-fanout holds: at most
//! `--max-list-bytes` for one List, and `--max-list-bytes-in-flight` for
//! all Lists of all callers together.
//!
//! A List copies (a page of) the store into its response, and the
//! response stays in memory until the caller has read it; the API server
//! bounds the same with its inflight limits and (since v1.33) by streaming
//! its list encoding. Here each List first reserves the most it may hold
//! from a total budget (waiting, first come first served, while the budget
//! is spent), cuts its page within the per-List bound (a paged List gets a
//! shorter page and a `continue` token, as the API server may give; an
//! unpaged one that does not fit is refused), keeps what the page needs
//! and gives back the rest at once. What it keeps is given back only once
//! its response has been handed to HTTP/2 in frames of [`FRAME_BYTES`]
//! ([`HoldListBytes`]), each a copy, so a caller that stops reading holds
//! at most HTTP/2's send buffer of it after that, never the whole
//! response.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use bytes::{Buf, Bytes};
use futures::future::BoxFuture;
use http_body::{Body, Frame};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, gauge::ConstGauge},
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::server::NamedService;

/// The budget is counted in units of this many bytes (a semaphore's permit
/// count is a `u32` per acquire).
const UNIT: u64 = 1024;

/// The largest HTTP/2 data frame a List response is handed over in.
pub const FRAME_BYTES: usize = 64 * 1024;

/// An unpaged List whose objects do not fit the per-List bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "an unpaged List of {resource} would send more than {max} bytes of objects (--max-list-bytes): page it with limit and continue"
)]
pub struct ListTooLarge {
    /// The resource type.
    pub resource: String,
    /// The per-List bound.
    pub max: u64,
}

/// The bytes of objects List responses may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListBytesLimits {
    /// One List (`--max-list-bytes`).
    pub per_list: u64,
    /// All Lists of all callers (`--max-list-bytes-in-flight`).
    pub total: u64,
}

impl Default for ListBytesLimits {
    /// No bound worth the name (4 GiB each, 4 TiB in all, so a thousand
    /// Lists can be cut at once): for tests and embedders that set none;
    /// the binary's flags default to bounds.
    fn default() -> Self {
        let most = u64::from(u32::MAX) * UNIT;
        ListBytesLimits {
            per_list: most / 1024,
            total: most,
        }
    }
}

/// The List byte budget of the whole server; a Prometheus collector of
/// `kube_fanout_list_bytes_reserved` (what Lists hold now, to graph against
/// `kube_fanout_list_bytes_limit`).
#[derive(Debug, Clone)]
pub struct ListBudget {
    per_list: u64,
    limit: u64,
    total: Arc<Semaphore>,
}

impl ListBudget {
    /// A budget of `limits`; one List gets at most the total.
    pub fn new(limits: ListBytesLimits) -> Self {
        ListBudget {
            per_list: limits.per_list.min(limits.total),
            limit: u64::from(units(limits.total)) * UNIT,
            total: Arc::new(Semaphore::new(units(limits.total) as usize)),
        }
    }

    /// The most one List may hold.
    pub fn per_list(&self) -> u64 {
        self.per_list
    }

    /// Reserves the most one List may hold, waiting while the total is
    /// spent.
    pub async fn reserve(&self) -> Reservation {
        let permit = self
            .total
            .clone()
            .acquire_many_owned(units(self.per_list))
            .await
            // The semaphore is never closed.
            .expect("the List budget is never closed");
        Reservation { permit }
    }

    /// Bytes of the total budget not reserved now.
    pub fn available(&self) -> u64 {
        self.total.available_permits() as u64 * UNIT
    }
}

impl Collector for ListBudget {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = |bytes: u64| ConstGauge::new(i64::try_from(bytes).unwrap_or(i64::MAX));
        for (name, help, bytes) in [
            (
                "kube_fanout_list_bytes_reserved",
                "Bytes of List responses reserved or held now (--max-list-bytes-in-flight bounds them).",
                self.limit - self.available(),
            ),
            (
                "kube_fanout_list_bytes_limit",
                "--max-list-bytes-in-flight.",
                self.limit,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            gauge(bytes).encode(metric)?;
        }
        Ok(())
    }
}

impl Default for ListBudget {
    /// The default [`ListBytesLimits`].
    fn default() -> Self {
        ListBudget::new(ListBytesLimits::default())
    }
}

fn units(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

/// The most one List may hold, reserved while its page is cut.
#[derive(Debug)]
pub struct Reservation {
    permit: OwnedSemaphorePermit,
}

impl Reservation {
    /// Keeps `bytes` of the reservation and gives the rest back.
    pub fn keep(mut self, bytes: u64) -> ListBytes {
        let keep = (units(bytes) as usize).min(self.permit.num_permits());
        let rest = self.permit.num_permits() - keep;
        drop(self.permit.split(rest));
        ListBytes(Arc::new(self.permit))
    }
}

/// Bytes of the budget held by one List until its response is handed
/// over; given back when the last clone drops (a clone only because
/// response extensions must be `Clone`).
#[derive(Debug, Clone)]
pub struct ListBytes(
    #[allow(
        dead_code,
        reason = "held, never read: dropping it gives the bytes back"
    )]
    Arc<OwnedSemaphorePermit>,
);

/// Wraps the gRPC service so that a response carrying [`ListBytes`] in
/// its extensions holds them until its body has been handed over, in
/// frames of at most [`FRAME_BYTES`].
#[derive(Debug, Clone)]
pub struct HoldListBytes<S>(pub S);

impl<S: NamedService> NamedService for HoldListBytes<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, R> tower::Service<R> for HoldListBytes<S>
where
    S: tower::Service<R, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let response = self.0.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            Ok(match response.extensions_mut().remove::<ListBytes>() {
                Some(held) => response.map(|body| {
                    tonic::body::Body::new(Framed {
                        body,
                        pending: Bytes::new(),
                        held: Some(held),
                    })
                }),
                None => response,
            })
        })
    }
}

/// A response body handed over in copied frames of at most
/// [`FRAME_BYTES`], holding its [`ListBytes`] until all of it has been.
struct Framed {
    body: tonic::body::Body,
    /// The rest of the body's current data, not handed over yet.
    pending: Bytes,
    held: Option<ListBytes>,
}

impl Body for Framed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            if !self.pending.is_empty() {
                // A copy: the encoded response is freed as soon as its last
                // frame is copied, whatever HTTP/2 still buffers.
                let n = self.pending.len().min(FRAME_BYTES);
                let frame = Bytes::copy_from_slice(&self.pending[..n]);
                self.pending.advance(n);
                if self.pending.is_empty() {
                    self.pending = Bytes::new();
                }
                return Poll::Ready(Some(Ok(Frame::data(frame))));
            }
            let next = ready!(Pin::new(&mut self.body).poll_frame(cx));
            match next {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => {
                        // Trailers: every byte of data is handed over.
                        self.held = None;
                        return Poll::Ready(Some(Ok(frame)));
                    }
                },
                other => {
                    self.held = None;
                    return Poll::Ready(other);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.body.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_reservation_waits_for_room_and_keeps_only_what_it_needs() {
        let budget = ListBudget::new(ListBytesLimits {
            per_list: 4 * UNIT,
            total: 6 * UNIT,
        });
        let first = budget.reserve().await;
        assert_eq!(budget.available(), 2 * UNIT);
        // No room for a second whole reservation until the first keeps less.
        let second = budget.reserve();
        tokio::pin!(second);
        assert!(futures::poll!(second.as_mut()).is_pending());
        // Two units kept, two given back: room for the one waiting.
        let first = first.keep(UNIT + 1);
        let second = second.await;
        assert_eq!(budget.available(), 0);
        let second = second.keep(0);
        assert_eq!(budget.available(), 4 * UNIT, "the first holds two units");
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(budget.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "kube_fanout_list_bytes_reserved 2048",
            "kube_fanout_list_bytes_limit 6144",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        drop((first, second));
        assert_eq!(budget.available(), 6 * UNIT);
    }

    #[tokio::test]
    async fn a_held_body_comes_in_small_frames_and_gives_the_bytes_back_at_its_end() {
        let budget = ListBudget::new(ListBytesLimits {
            per_list: 1 << 20,
            total: 1 << 20,
        });
        let held = budget.reserve().await.keep(300 * 1024);
        let data = Bytes::from(vec![7u8; 300 * 1024]);
        let mut body = Framed {
            body: tonic::body::Body::new(http_body_util::Full::new(data.clone())),
            pending: Bytes::new(),
            held: Some(held),
        };
        let mut received = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap().into_data().unwrap();
            assert!(frame.len() <= FRAME_BYTES, "{}", frame.len());
            if received.len() + frame.len() < data.len() {
                assert!(budget.available() < 1 << 20, "held until the last frame");
            }
            received.extend_from_slice(&frame);
        }
        assert_eq!(received, data);
        assert_eq!(budget.available(), 1 << 20);
    }
}
