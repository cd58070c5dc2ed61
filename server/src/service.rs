//! The gRPC service: turns requests into calls on the cache and the
//! subscription core, and results into `kubefanout.v1` messages.

use std::{pin::Pin, sync::Arc};

use futures::{Stream, StreamExt};
use kube_fanout_proto::v1::{
    self as pb, GetRequest, GetResponse, ListRequest, ListResourcesRequest, ListResourcesResponse,
    ListResponse, WatchEvent, WatchRequest, kube_fanout_server::KubeFanout,
};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::{Instrument, info_span};

use crate::{
    cache::{Cache, Served},
    error::RequestError,
    filter::Filter,
    object::object_key,
    resource::GroupVersionResource,
    store::EventKind,
    subscription::{self, Delivery, Limits, Start, WatchSpec},
};

/// The `kubefanout.v1.KubeFanout` service.
#[derive(Debug, Clone)]
pub struct FanoutService {
    cache: Arc<Cache>,
    limits: Limits,
    shutdown: CancellationToken,
}

impl FanoutService {
    /// Serves `cache` with the given watch limits; open watches end when
    /// `shutdown` fires.
    pub fn new(cache: Arc<Cache>, limits: Limits, shutdown: CancellationToken) -> Self {
        FanoutService {
            cache,
            limits,
            shutdown,
        }
    }

    fn served(&self, resource: Option<pb::ResourceRef>) -> Result<Arc<Served>, RequestError> {
        let r = resource
            .filter(|r| !r.version.is_empty() && !r.resource.is_empty())
            .ok_or(RequestError::MissingResource)?;
        let asked = GroupVersionResource {
            group: r.group,
            version: r.version,
            resource: r.resource,
        };
        self.cache
            .get(&asked)
            .ok_or_else(|| RequestError::UnknownResource {
                served: self
                    .cache
                    .iter()
                    .map(|s| s.resource().gvr.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                asked,
            })
    }

    fn start_watch(
        &self,
        request: WatchRequest,
    ) -> Result<impl Stream<Item = Result<WatchEvent, Status>> + use<>, RequestError> {
        let served = self.served(request.resource)?;
        let spec = WatchSpec {
            filter: Filter::new(
                &request.namespace,
                &request.label_selector,
                &request.field_selector,
            )?,
            start: Start::parse(&request.resource_version)?,
            send_initial_events: request.send_initial_events,
            allow_bookmarks: request.allow_bookmarks,
        };
        let guard = served.subscriber();
        let span = info_span!("subscriber", resource = %served.resource().gvr);
        let events = subscription::watch(
            served.store.clone(),
            spec,
            self.limits,
            self.shutdown.clone(),
        );
        Ok(async_stream::stream! {
            // Held for the stream's life: the subscriber count drops with it.
            let _counted = guard;
            let mut events = std::pin::pin!(events);
            while let Some(result) = events.next().instrument(span.clone()).await {
                yield result
                    .map(to_watch_event)
                    .map_err(|e| Status::from(RequestError::from(e)));
            }
        })
    }

    fn list(&self, request: ListRequest) -> Result<ListResponse, RequestError> {
        let served = self.served(request.resource)?;
        let filter = Filter::new(
            &request.namespace,
            &request.label_selector,
            &request.field_selector,
        )?;
        let snapshot = served.store.snapshot();
        Ok(ListResponse {
            resource_version: snapshot.resource_version.to_string(),
            objects: snapshot
                .objects
                .iter()
                .filter(|o| filter.matches(o))
                .map(|o| o.json.to_string())
                .collect(),
        })
    }

    fn get(&self, request: GetRequest) -> Result<GetResponse, RequestError> {
        let served = self.served(request.resource)?;
        if request.name.is_empty() {
            return Err(RequestError::MissingName);
        }
        let key = object_key(&request.namespace, &request.name);
        let object = served
            .store
            .get(&key)
            .ok_or_else(|| RequestError::NotFound {
                resource: served.resource().gvr.clone(),
                key,
            })?;
        Ok(GetResponse {
            resource_version: served.store.head().resource_version.to_string(),
            object: object.json.to_string(),
        })
    }

    fn list_resources(&self) -> ListResourcesResponse {
        let resources = self
            .cache
            .iter()
            .map(|served| {
                let resource = served.resource();
                let status = served.store.status();
                let reflector = served.reflector.lock().clone();
                pb::ResourceStatus {
                    resource: Some(pb::ResourceRef {
                        group: resource.gvr.group.clone(),
                        version: resource.gvr.version.clone(),
                        resource: resource.gvr.resource.clone(),
                    }),
                    kind: resource.kind.clone(),
                    namespaced: resource.namespaced,
                    sync_state: if status.head.synced {
                        pb::SyncState::Synced
                    } else {
                        pb::SyncState::Syncing
                    }
                    .into(),
                    resource_version: status.head.resource_version.to_string(),
                    objects: status.objects,
                    subscribers: served.subscribers(),
                    reflector_phase: reflector.phase.as_str().to_owned(),
                    last_error: reflector.last_error.unwrap_or_default(),
                    oldest_resumable_resource_version: status
                        .oldest_resumable
                        .map(|rv| rv.to_string())
                        .unwrap_or_default(),
                    newest_resource_version: status.head.resource_version.to_string(),
                    relists: status.relists,
                    lists: reflector.lists,
                    watch_lists: reflector.watch_lists,
                    watches: reflector.watches,
                    failures: reflector.failures,
                }
            })
            .collect();
        ListResourcesResponse { resources }
    }
}

fn to_watch_event(delivery: Delivery) -> WatchEvent {
    let kind = match delivery.kind {
        EventKind::Added => pb::EventType::Added,
        EventKind::Modified => pb::EventType::Modified,
        EventKind::Deleted => pb::EventType::Deleted,
        EventKind::Bookmark => pb::EventType::Bookmark,
    };
    WatchEvent {
        r#type: kind.into(),
        resource_version: delivery.resource_version.to_string(),
        object: delivery.object.to_string(),
    }
}

#[tonic::async_trait]
impl KubeFanout for FanoutService {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let stream = self.start_watch(request.into_inner())?;
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        Ok(Response::new(FanoutService::list(
            self,
            request.into_inner(),
        )?))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        Ok(Response::new(FanoutService::get(
            self,
            request.into_inner(),
        )?))
    }

    async fn list_resources(
        &self,
        _request: Request<ListResourcesRequest>,
    ) -> Result<Response<ListResourcesResponse>, Status> {
        Ok(Response::new(self.list_resources()))
    }
}
