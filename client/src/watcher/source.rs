//! Where a watch's events come from: a kube-fanout server, or a script in
//! the unit tests (this crate's, and a tier's feed's).

use std::future::Future;

use futures::{StreamExt, stream::BoxStream};
use tonic::Status;

use crate::{
    client::Client,
    error::ClientError,
    proto::{WatchEvent, WatchRequest},
};

/// A stream of raw events from one `Watch` call.
pub type EventStream = BoxStream<'static, Result<WatchEvent, Status>>;

/// Opens watches, and moves to another server after a failure: what a
/// watch's state machine needs of its connection ([`Client`] is one).
pub trait Source: Send + 'static {
    /// Starts a watch.
    fn open(
        &mut self,
        request: WatchRequest,
    ) -> impl Future<Output = Result<EventStream, Status>> + Send;
    /// Moves to the next server after a failure.
    fn reconnect(&mut self) -> impl Future<Output = Result<(), ClientError>> + Send;
    /// Opens a new connection to the same server, after it retired the
    /// current one.
    fn renew(&mut self) -> impl Future<Output = Result<(), ClientError>> + Send;
    /// The server in use, for status and logs.
    fn address(&self) -> String;
}

impl Source for Client {
    async fn open(&mut self, request: WatchRequest) -> Result<EventStream, Status> {
        Ok(self.grpc().watch(request).await?.into_inner().boxed())
    }

    async fn reconnect(&mut self) -> Result<(), ClientError> {
        Client::reconnect(self).await
    }

    async fn renew(&mut self) -> Result<(), ClientError> {
        Client::renew(self).await
    }

    fn address(&self) -> String {
        Client::address(self)
    }
}
