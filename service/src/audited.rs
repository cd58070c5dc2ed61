//! What the audit log ([`kube_fanout_auth::audit`]) is told of each
//! request besides its verb and object: the options each request message
//! carries (logged at the `Request` level), and, for a watch, how its
//! stream ended, what it delivered and for how long (its stream-end line).

use futures::{Stream, StreamExt};
use kube_fanout_auth::audit::{RequestOptions, StreamAudit};
use kube_fanout_proto::{
    v1::{GetRequest, ListRequest, WatchRequest},
    wire::EncodedWatchEvent,
};
use tonic::Status;

use crate::snapshot_handoff::Outgoing;

/// A Watch's options.
pub(crate) fn watch_options(request: &WatchRequest) -> RequestOptions {
    RequestOptions {
        label_selector: request.label_selector.clone(),
        field_selector: request.field_selector.clone(),
        resource_version: request.resource_version.clone(),
        send_initial_events: request.send_initial_events,
        allow_bookmarks: request.allow_bookmarks,
        metadata_only: request.metadata_only,
        ..RequestOptions::default()
    }
}

/// A List's options.
pub(crate) fn list_options(request: &ListRequest) -> RequestOptions {
    RequestOptions {
        label_selector: request.label_selector.clone(),
        field_selector: request.field_selector.clone(),
        limit: request.limit,
        continue_token: request.r#continue.clone(),
        metadata_only: request.metadata_only,
        ..RequestOptions::default()
    }
}

/// A Get's options.
pub(crate) fn get_options(request: &GetRequest) -> RequestOptions {
    RequestOptions {
        metadata_only: request.metadata_only,
        ..RequestOptions::default()
    }
}

/// The boxed watch stream tonic is handed.
pub(crate) type WatchStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<EncodedWatchEvent, Status>> + Send>>;

/// `events`, a stream let through with `audit` (its grant's
/// [`kube_fanout_auth::Grant::stream_audit`]), counted for its stream-end
/// line (logged when tonic drops the stream: after its status, or when its
/// client goes away); a framed snapshot counts as the events it holds.
/// With the audit log off, `events` as they are: nothing is added per
/// event.
pub(crate) fn watch_stream(
    audit: Option<StreamAudit>,
    events: impl Stream<Item = Result<Outgoing, Status>> + Send + 'static,
) -> impl Stream<Item = Result<Outgoing, Status>> + Send + 'static {
    match audit {
        Some(mut audit) => futures::future::Either::Left(events.map(move |item| {
            audit.observe(&item, Outgoing::size);
            item
        })),
        None => futures::future::Either::Right(events),
    }
}
