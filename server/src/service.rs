//! The gRPC service: turns requests into calls on the cache and the
//! subscription core, and results into `kubefanout.v1` messages.

use std::{pin::Pin, sync::Arc};

use futures::{Stream, StreamExt};
use kube_fanout_proto::v1::{
    self as pb, GetRequest, GetResponse, ListRequest, ListResourcesRequest, ListResourcesResponse,
    ListResponse, WatchRequest, kube_fanout_server::KubeFanout,
};
use kube_fanout_proto::wire::EncodedWatchEvent;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::{
    auth::{
        Access, Attributes, AuthError, Grant, Verb,
        limits::{Held, Limiter, Permit},
    },
    cache::{Cache, Served},
    codec::WatchEncoder,
    error::RequestError,
    filter::{Filter, selected_name},
    object::object_key,
    projection::Projection,
    resource::GroupVersionResource,
    subscription::{self, Limits, SnapshotHold, Start, WatchSpec},
    tls::ConnInfo,
};

/// The `kubefanout.v1.KubeFanout` service.
#[derive(Debug, Clone)]
pub struct FanoutService {
    cache: Arc<Cache>,
    limits: Limits,
    encoder: Arc<WatchEncoder>,
    access: Access,
    limiter: Arc<Limiter>,
}

impl FanoutService {
    /// Serves `cache` with the given watch limits; open watches end when
    /// the cache's subscribers are closed ([`Cache::close_subscribers`]).
    pub fn new(cache: Arc<Cache>, limits: Limits) -> Self {
        FanoutService {
            cache,
            limits,
            encoder: Arc::default(),
            access: Access::open(),
            limiter: Arc::default(),
        }
    }

    /// Bounds what each caller may hold open with `limiter` (the default
    /// bounds nothing).
    pub fn with_limiter(self, limiter: Arc<Limiter>) -> Self {
        FanoutService { limiter, ..self }
    }

    /// Checks every request with `access` (the default lets all through).
    pub fn with_access(self, access: Access) -> Self {
        FanoutService { access, ..self }
    }

    /// Authorizes `verb` on a request's resource, namespace and name, as the
    /// API server would authorize the same request: the one place requests
    /// are let through.
    async fn authorize(
        &self,
        extensions: &http::Extensions,
        verb: Verb,
        resource: Option<&pb::ResourceRef>,
        namespace: &str,
        name: &str,
    ) -> Result<Grant, RequestError> {
        let r = resource
            .filter(|r| !r.version.is_empty() && !r.resource.is_empty())
            .ok_or(RequestError::MissingResource)?;
        let attributes = Attributes {
            verb,
            group: r.group.clone(),
            version: r.version.clone(),
            resource: r.resource.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        Ok(self.access.authorize(extensions, attributes).await?)
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

    /// Starts a watch; `snapshot` (a per-caller permit) is given back once
    /// the initial events have been sent.
    fn start_watch(
        &self,
        request: WatchRequest,
        snapshot: Option<Permit>,
        retire_at: Option<Instant>,
    ) -> Result<impl Stream<Item = Result<EncodedWatchEvent, Status>> + use<>, RequestError> {
        let served = self.served(request.resource)?;
        let spec = WatchSpec {
            filter: Filter::new(
                &request.namespace,
                &request.label_selector,
                &request.field_selector,
                &served.resource().fields,
            )?,
            start: Start::parse(&request.resource_version)?,
            send_initial_events: request.send_initial_events,
            allow_bookmarks: request.allow_bookmarks,
            projection: Projection::from_request(request.metadata_only),
        };
        let guard = served.subscriber();
        let encoder = self.encoder.clone();
        let events = subscription::watch_on(
            served.store.clone(),
            spec,
            self.limits,
            snapshot.map(|permit| Box::new(permit) as SnapshotHold),
            retire_at,
        );
        // A plain map, not another stream state machine or a span entered
        // per event: this runs once per delivery (see BENCHMARKS.md).
        Ok(events.map(move |result| {
            // The guard lives as long as the stream: the subscriber count
            // drops with it.
            result
                .map(|delivery| encoder.encode(&delivery))
                .map_err(|e| {
                    guard.ended(&e);
                    Status::from(RequestError::from(e))
                })
        }))
    }

    fn list(&self, request: ListRequest) -> Result<ListResponse, RequestError> {
        let served = self.served(request.resource)?;
        let filter = Filter::new(
            &request.namespace,
            &request.label_selector,
            &request.field_selector,
            &served.resource().fields,
        )?;
        let page = served
            .pages
            .page(&served.store, &filter, request.limit, &request.r#continue)?;
        let projection = Projection::from_request(request.metadata_only);
        Ok(ListResponse {
            resource_version: page.resource_version.to_string(),
            objects: page
                .objects
                .iter()
                .map(|o| projection.json(o).to_string())
                .collect(),
            r#continue: page.next.map(|t| t.encode()).unwrap_or_default(),
            remaining_item_count: page.remaining,
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
            object: Projection::from_request(request.metadata_only)
                .json(&object)
                .to_string(),
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

#[tonic::async_trait]
impl KubeFanout for FanoutService {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<EncodedWatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.get_ref();
        let grant = self
            .authorize(
                request.extensions(),
                Verb::Watch,
                r.resource.as_ref(),
                &r.namespace,
                &selected_name(&r.field_selector),
            )
            .await?;
        let caller = Limiter::caller(request.extensions());
        let watch = self.limiter.acquire(&caller, Held::Watch)?;
        // A watch from "" or "0" is a snapshot too (synthetic ADDEDs); an
        // unparsable resourceVersion fails below, whatever this says.
        let snapshot = Start::parse(&r.resource_version)
            .is_ok_and(|start| start.sends_snapshot(r.send_initial_events))
            .then(|| self.limiter.acquire(&caller, Held::Snapshot))
            .transpose()?;
        let retire_at = request
            .extensions()
            .get::<ConnInfo>()
            .and_then(|c| c.retire_at);
        let stream = self.start_watch(request.into_inner(), snapshot, retire_at)?;
        Ok(Response::new(Box::pin(grant.guard(stream).holding(watch))))
    }

    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let r = request.get_ref();
        self.authorize(
            request.extensions(),
            Verb::List,
            r.resource.as_ref(),
            &r.namespace,
            &selected_name(&r.field_selector),
        )
        .await?;
        // A List copies (a page of) the store like a snapshot does.
        let caller = Limiter::caller(request.extensions());
        let _snapshot = self.limiter.acquire(&caller, Held::Snapshot)?;
        Ok(Response::new(FanoutService::list(
            self,
            request.into_inner(),
        )?))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let r = request.get_ref();
        self.authorize(
            request.extensions(),
            Verb::Get,
            r.resource.as_ref(),
            &r.namespace,
            &r.name,
        )
        .await?;
        Ok(Response::new(FanoutService::get(
            self,
            request.into_inner(),
        )?))
    }

    async fn list_resources(
        &self,
        request: Request<ListResourcesRequest>,
    ) -> Result<Response<ListResourcesResponse>, Status> {
        let mut response = self.list_resources();
        // Only the types the caller may list in the namespace it names
        // (cluster-wide when it names none).
        let namespace = &request.get_ref().namespace;
        let mut visible = Vec::with_capacity(response.resources.len());
        for status in response.resources {
            let resource = status.resource.as_ref();
            match self
                .authorize(request.extensions(), Verb::List, resource, namespace, "")
                .await
            {
                Ok(_) => visible.push(status),
                Err(RequestError::Auth(AuthError::Denied { .. })) => {}
                Err(err) => return Err(err.into()),
            }
        }
        response.resources = visible;
        Ok(Response::new(response))
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::{
        auth::limits::CallerLimits,
        object::ResourceVersion,
        store::{
            EventKind, Store,
            tests::{configmaps, object},
        },
    };

    fn service(store: Arc<Store>) -> FanoutService {
        let mut cache = Cache::default();
        cache.insert(Served::new(store, Arc::default()));
        FanoutService::new(Arc::new(cache), Limits::default())
    }

    fn request(label_selector: &str, resource_version: &str, initial: bool) -> WatchRequest {
        WatchRequest {
            resource: Some(pb::ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "configmaps".into(),
            }),
            label_selector: label_selector.into(),
            resource_version: resource_version.into(),
            send_initial_events: initial,
            allow_bookmarks: true,
            ..Default::default()
        }
    }

    /// What the server does when it stops: every open watch of every
    /// served type ends with UNAVAILABLE, and so does one opened after.
    #[tokio::test(start_paused = true)]
    async fn closing_the_cache_ends_every_watch_with_unavailable() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let service = service(store.clone());
        let watch = || {
            Box::pin(
                service
                    .start_watch(request("", "1", false), None, None)
                    .unwrap(),
            )
        };
        // Far less than the progress interval: ended, not merely ticked.
        let soon = std::time::Duration::from_millis(1);
        let mut open = watch();
        let next = tokio::time::timeout(soon, open.next()).await;
        assert!(next.is_err(), "live, with nothing to send yet");
        service.cache.close_subscribers();
        for mut stream in [open, watch()] {
            let next = tokio::time::timeout(soon, stream.next()).await;
            let ended = next
                .expect("ended at once")
                .unwrap()
                .map(|_| ())
                .unwrap_err();
            assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
            assert!(stream.next().await.is_none());
        }
    }

    #[tokio::test]
    async fn a_live_event_is_encoded_once_for_all_its_subscribers() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let service = service(store.clone());
        const SUBSCRIBERS: usize = 100;
        let mut plain: Vec<_> = (0..SUBSCRIBERS)
            .map(|_| {
                Box::pin(
                    service
                        .start_watch(request("", "1", false), None, None)
                        .unwrap(),
                )
            })
            .collect();
        // For this one the change is a filter transition: its own DELETED.
        let mut filtered = Box::pin(
            service
                .start_watch(request("app=x", "1", false), None, None)
                .unwrap(),
        );

        let changed = object("a", 2, r#"{"app":"y"}"#);
        let json = changed.json.to_string();
        store.apply(EventKind::Modified, changed);
        let mut received = Vec::new();
        for stream in &mut plain {
            received.push(stream.next().await.unwrap().unwrap().to_bytes());
        }
        let deleted = filtered.next().await.unwrap().unwrap().to_bytes();

        assert_eq!(
            service.encoder.encodes(),
            2,
            "one encode shared by {SUBSCRIBERS} subscribers, one for the transition"
        );
        let expected = pb::WatchEvent {
            r#type: pb::EventType::Modified.into(),
            resource_version: "2".into(),
            object: json,
            ..Default::default()
        };
        assert_eq!(received[0], expected.encode_to_vec());
        assert!(
            received.iter().all(|b| b.as_ptr() == received[0].as_ptr()),
            "every subscriber writes the very same bytes"
        );
        let deleted = pb::WatchEvent::decode(deleted).unwrap();
        assert_eq!(deleted.r#type(), pb::EventType::Deleted);
        assert_eq!(deleted.resource_version, "2");

        // Snapshots are per subscriber: an ADDED and the end bookmark each.
        let mut snapshot = Box::pin(
            service
                .start_watch(request("", "", true), None, None)
                .unwrap(),
        );
        let added =
            pb::WatchEvent::decode(snapshot.next().await.unwrap().unwrap().to_bytes()).unwrap();
        assert_eq!(added.r#type(), pb::EventType::Added);
        snapshot.next().await.unwrap().unwrap();
        assert_eq!(service.encoder.encodes(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_from_empty_or_zero_and_a_list_count_as_snapshots() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        let service = service(store).with_limiter(Limiter::new(CallerLimits {
            watches: 0,
            snapshots: 1,
        }));
        let watch = |rv: &str, initial| {
            let request = Request::new(request("", rv, initial));
            let service = service.clone();
            async move { KubeFanout::watch(&service, request).await }
        };
        for rv in ["", "0"] {
            // Synthetic ADDEDs for every object, without asking for them.
            let mut legacy = watch(rv, false).await.unwrap().into_inner();
            let Err(refused) = watch("", true).await else {
                panic!("a second snapshot was allowed");
            };
            assert_eq!(
                refused.code(),
                tonic::Code::ResourceExhausted,
                "{refused:?}"
            );
            // Nor a List, which copies the store the same way.
            let list = KubeFanout::list(
                &service,
                Request::new(ListRequest {
                    resource: request("", "", false).resource,
                    ..Default::default()
                }),
            )
            .await
            .expect_err("a List while the snapshot is sent");
            assert_eq!(list.code(), tonic::Code::ResourceExhausted, "{list:?}");
            // A resume sends no snapshot and needs no permit.
            let _resumed = watch("2", false).await.unwrap();
            for _ in 0..2 {
                let added = legacy.next().await.unwrap().unwrap().to_bytes();
                let added = pb::WatchEvent::decode(added).unwrap();
                assert_eq!(added.r#type(), pb::EventType::Added, "{rv:?}");
            }
            assert_eq!(service.limiter.held("anonymous", Held::Snapshot), 1);
            // Past the snapshot (no event is due, so the wait times out)
            // the permit is back.
            tokio::time::timeout(std::time::Duration::from_secs(1), legacy.next())
                .await
                .expect_err("nothing after the snapshot");
            assert_eq!(
                service.limiter.held("anonymous", Held::Snapshot),
                0,
                "{rv:?}"
            );
        }
    }

    /// The object of an encoded event, as JSON.
    fn object_of(bytes: bytes::Bytes) -> serde_json::Value {
        serde_json::from_str(&pb::WatchEvent::decode(bytes).unwrap().object).unwrap()
    }

    #[tokio::test]
    async fn metadata_subscribers_share_one_encoding_of_partial_object_metadata() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, r#"{"app":"x"}"#)], ResourceVersion(1));
        let service = service(store.clone());
        let metadata_only = |rv: &str, initial: bool| WatchRequest {
            metadata_only: true,
            ..request("", rv, initial)
        };
        const SUBSCRIBERS: usize = 50;
        let mut full: Vec<_> = (0..SUBSCRIBERS)
            .map(|_| {
                Box::pin(
                    service
                        .start_watch(request("", "1", false), None, None)
                        .unwrap(),
                )
            })
            .collect();
        let mut metadata: Vec<_> = (0..SUBSCRIBERS)
            .map(|_| {
                Box::pin(
                    service
                        .start_watch(metadata_only("1", false), None, None)
                        .unwrap(),
                )
            })
            .collect();

        store.apply(EventKind::Modified, object("a", 2, r#"{"app":"y"}"#));
        let mut received = Vec::new();
        for stream in &mut metadata {
            received.push(stream.next().await.unwrap().unwrap().to_bytes());
        }
        let whole = full[0].next().await.unwrap().unwrap().to_bytes();
        for stream in &mut full[1..] {
            assert_eq!(stream.next().await.unwrap().unwrap().to_bytes(), whole);
        }
        assert_eq!(
            service.encoder.encodes(),
            2,
            "one encode for {SUBSCRIBERS} full and one for {SUBSCRIBERS} metadata subscribers"
        );
        assert!(received.iter().all(|b| b.as_ptr() == received[0].as_ptr()));
        assert_eq!(
            object_of(received[0].clone()),
            serde_json::json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "2",
                             "labels": {"app": "y"}},
            })
        );
        assert_eq!(object_of(whole)["kind"], "ConfigMap");

        // A snapshot's objects and its end bookmark are PartialObjectMetadata
        // too, as the API server sends them.
        let mut snapshot = Box::pin(
            service
                .start_watch(metadata_only("", true), None, None)
                .unwrap(),
        );
        let added = object_of(snapshot.next().await.unwrap().unwrap().to_bytes());
        let end = object_of(snapshot.next().await.unwrap().unwrap().to_bytes());
        for object in [&added, &end] {
            assert_eq!(object["kind"], "PartialObjectMetadata");
            assert_eq!(object["apiVersion"], "meta.k8s.io/v1");
        }
        assert_eq!(added["metadata"]["name"], "a");
        assert_eq!(
            end["metadata"]["annotations"][kube_fanout_proto::INITIAL_EVENTS_END],
            "true"
        );
    }

    #[test]
    fn list_and_get_answer_partial_object_metadata_when_asked() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![object("a", 1, "{}"), object("b", 2, "{}")],
            ResourceVersion(2),
        );
        let service = service(store);
        let resource = request("", "", false).resource;
        let list = FanoutService::list(
            &service,
            ListRequest {
                resource: resource.clone(),
                metadata_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        let get = FanoutService::get(
            &service,
            GetRequest {
                resource,
                namespace: "ns".into(),
                name: "b".into(),
                metadata_only: true,
            },
        )
        .unwrap();
        let kinds: Vec<serde_json::Value> = list
            .objects
            .iter()
            .chain([&get.object])
            .map(|o| serde_json::from_str::<serde_json::Value>(o).unwrap()["kind"].clone())
            .collect();
        assert_eq!(kinds, ["PartialObjectMetadata"; 3]);
    }

    #[tokio::test]
    async fn a_resync_unit_is_encoded_once_flagged_and_closed_for_every_subscriber() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let service = service(store.clone());
        let mut streams: Vec<_> = (0..10)
            .map(|_| {
                Box::pin(
                    service
                        .start_watch(request("", "1", false), None, None)
                        .unwrap(),
                )
            })
            .collect();
        store.replace(vec![object("b", 2, "{}")], ResourceVersion(3));
        for stream in &mut streams {
            let mut unit = Vec::new();
            for _ in 0..3 {
                let bytes = stream.next().await.unwrap().unwrap().to_bytes();
                unit.push(pb::WatchEvent::decode(bytes).unwrap());
            }
            let seen: Vec<(pb::EventType, &str, bool)> = unit
                .iter()
                .map(|e| (e.r#type(), e.resource_version.as_str(), e.resync))
                .collect();
            assert_eq!(
                seen,
                [
                    (pb::EventType::Deleted, "3", true),
                    (pb::EventType::Added, "3", true),
                    (pb::EventType::Bookmark, "3", true),
                ]
            );
        }
        assert_eq!(
            service.encoder.encodes(),
            3,
            "the unit's two changes and its close, each encoded once for all"
        );
    }
}
