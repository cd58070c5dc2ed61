//! Which requests on a connection are in flight, for the server's drain
//! ([`crate::drain`]): each one a server does not pick out as a stream,
//! from its call until its response body has been sent or dropped.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

use crate::{conn::ConnInfo, drain::InFlight};

/// Which requests a drain waits for: `true` for a stream that never ends
/// by itself (a watch), which it does not wait for.
pub type IsStream = fn(&http::Method, &http::Uri) -> bool;

/// Counts each request on a connection as in flight until its response
/// body has been sent or dropped, unless `is_stream` says it is a stream
/// the drain does not wait for (see the module docs). Requests without a
/// [`ConnInfo`] (not from [`crate::accept`]) are not counted.
#[derive(Debug, Clone, Copy)]
pub struct CountRequestsLayer {
    is_stream: IsStream,
}

impl CountRequestsLayer {
    /// Counts every request that `is_stream` does not pick out.
    pub fn new(is_stream: IsStream) -> Self {
        CountRequestsLayer { is_stream }
    }
}

impl<S> Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            is_stream: self.is_stream,
        }
    }
}

/// The service of [`CountRequestsLayer`].
#[derive(Debug, Clone)]
pub struct CountRequests<S> {
    inner: S,
    is_stream: IsStream,
}

impl<S, B, R> Service<http::Request<B>> for CountRequests<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Counted<R>>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let in_flight = (!(self.is_stream)(request.method(), request.uri()))
            .then(|| request.extensions().get::<ConnInfo>())
            .flatten()
            .map(|info| info.requests.start());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Counted {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// A response body that keeps its request counted in flight until it ends
/// or is dropped.
#[derive(Debug)]
pub struct Counted<B> {
    body: B,
    _in_flight: Option<InFlight>,
}

impl<B: Body + Unpin> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::{Drain, Requests};

    /// A request the layer is told is a stream is not counted; others are,
    /// until their response body is dropped.
    #[tokio::test]
    async fn requests_are_counted_until_their_body_goes_and_streams_not_at_all() {
        let drain = Drain::default();
        let conn = drain.join();
        let requests = conn.requests();
        let is_stream: IsStream = |_, uri| uri.path().ends_with("/Watch");
        let mut service = CountRequestsLayer::new(is_stream).layer(tower::service_fn(
            |_: http::Request<()>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            },
        ));
        let call = |path: &str| {
            let mut request = http::Request::get(path).body(()).unwrap();
            request.extensions_mut().insert(conn_info(&requests));
            request
        };
        let watch = service.call(call("/kubefanout.v1.KubeFanout/Watch")).await;
        assert_eq!(requests.in_flight(), 0, "a watch was counted");
        let list = service.call(call("/kubefanout.v1.KubeFanout/List")).await;
        assert_eq!(requests.in_flight(), 1);
        drop(list);
        assert_eq!(requests.in_flight(), 0);
        drop(watch);
    }

    /// What a request on a connection counted by `requests` carries.
    fn conn_info(requests: &Requests) -> ConnInfo {
        ConnInfo {
            remote_addr: None,
            client_certificates: None,
            retire_at: None,
            standing: crate::standing::Standing::new(
                None,
                crate::source::Source::of([127, 0, 0, 1].into()),
            ),
            requests: requests.clone(),
        }
    }
}
