//! The gRPC service: turns requests into calls on the cache and the
//! subscription core, and results into `kubefanout.v1` messages.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube_fanout_proto::v1::{
    self as pb, GetRequest, GetResponse, ListRequest, ListResourcesRequest, ListResourcesResponse,
    ListResponse, WatchRequest, kube_fanout_server::KubeFanout,
};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use kube_fanout_auth::{
    Access, AuthError, Grant, Verb,
    audit::RequestOptions,
    limits::{Held, Limiter, Permit},
};
use kube_fanout_core::{
    codec::WatchEncoder,
    filter::Filter,
    object::{namespace_range, object_key},
    paging::PageBytes,
    projection::Projection,
    registry::{InUse, Origin, Served, ServedTypes},
    shared_snapshot::{Compression, SharedSnapshots, SnapshotFrames},
    store::ReadError,
    subscription::{self, Limits, Output, SnapshotHold, Start, WatchSpec},
};
use kube_fanout_listener::conn::ConnInfo;

use crate::{
    audited,
    error::RequestError,
    list_budget::{ListBudget, ListBytes, ListTooLarge, Reservation},
    snapshot_handoff::{self, Outgoing, SnapshotSlot},
    validation::{self, Scope},
};

/// The bytes of shared snapshot chunks kept at once by a service that is
/// given no bound of its own ([`FanoutService::with_shared_snapshots`]).
pub const DEFAULT_SHARED_SNAPSHOT_BYTES: u64 = 256 << 20;

/// The `kubefanout.v1.KubeFanout` service.
#[derive(Debug, Clone)]
pub struct FanoutService {
    cache: Arc<ServedTypes>,
    limits: Limits,
    encoder: Arc<WatchEncoder>,
    access: Access,
    limiter: Arc<Limiter>,
    budget: ListBudget,
    snapshots: Arc<SharedSnapshots>,
}

impl FanoutService {
    /// Serves `cache` with the given watch limits; open watches end when
    /// the cache's subscribers are closed ([`ServedTypes::close_subscribers`]).
    pub fn new(cache: Arc<ServedTypes>, limits: Limits) -> Self {
        FanoutService {
            cache,
            limits,
            encoder: Arc::default(),
            access: Access::open(),
            limiter: Arc::default(),
            budget: ListBudget::default(),
            snapshots: Arc::new(SharedSnapshots::new(DEFAULT_SHARED_SNAPSHOT_BYTES)),
        }
    }

    /// Shares the encoding of snapshots sent together through `snapshots`
    /// (the default keeps at most [`DEFAULT_SHARED_SNAPSHOT_BYTES`]). A
    /// call shares only when served behind
    /// [`SendSnapshots`](crate::snapshot_handoff::SendSnapshots).
    pub fn with_shared_snapshots(self, snapshots: Arc<SharedSnapshots>) -> Self {
        FanoutService { snapshots, ..self }
    }

    /// Bounds the bytes of List responses held at once with `budget` (the
    /// default bounds nothing worth the name).
    pub fn with_list_budget(self, budget: ListBudget) -> Self {
        FanoutService { budget, ..self }
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

    /// Authorizes `verb` on a request's checked scope, as the API server
    /// would authorize the same request: the one place requests are let
    /// through, and only with validated values (see [`crate::validation`]).
    /// `options` are what the audit log is told beyond the scope.
    async fn authorize(
        &self,
        extensions: &http::Extensions,
        verb: Verb,
        scope: &Scope,
        options: impl FnOnce() -> RequestOptions,
    ) -> Result<Grant, RequestError> {
        Ok(self
            .access
            .authorize(extensions, scope.attributes(verb), options)
            .await?)
    }

    /// The request's type if it is served now (an on-demand type is
    /// started by [`FanoutService::start_type`] first).
    fn served(&self, scope: &Scope) -> Result<InUse, RequestError> {
        self.cache
            .get(&scope.gvr)
            .ok_or_else(|| RequestError::UnknownResource(scope.gvr.clone()))
    }

    /// A use of the request's type, starting it if it is an on-demand
    /// type not held yet; called only once the request is authorized, so
    /// that only an authorized caller makes kube-fanout discover a type
    /// and start its reflector. Bounded like the first sync: a discovery
    /// that takes longer than the freshness timeout is answered
    /// NotSynced (it goes on, and a retry finds the type started).
    async fn start_type(&self, scope: &Scope) -> Result<InUse, RequestError> {
        // Served already (every configured type): no timer to set.
        if let Some(in_use) = self.cache.get(&scope.gvr) {
            return Ok(in_use);
        }
        match tokio::time::timeout(
            self.limits.freshness_timeout,
            self.cache.resolve(&scope.gvr),
        )
        .await
        {
            Ok(resolved) => Ok(resolved?),
            Err(_) => Err(ReadError::NotSynced.into()),
        }
    }

    /// Waits, bounded, for the type's first sync: a List or Get on a type
    /// not synced yet is refused NotSynced (as the API server refuses one
    /// while its watch cache initialises), never answered from the empty
    /// store. A Watch waits the same way as it starts. The use returned
    /// keeps an on-demand type held while the request is answered.
    async fn synced(&self, scope: &Scope) -> Result<InUse, RequestError> {
        let in_use = self.start_type(scope).await?;
        in_use
            .served()
            .store
            .wait_synced(self.limits.freshness_timeout)
            .await?;
        Ok(in_use)
    }

    /// Starts a watch; `snapshot` (a per-caller permit) is given back once
    /// the initial events have been sent. Given the `framed` compression
    /// of a call with a slot to send it through, a snapshot is one framed
    /// [`Outgoing::Snapshot`], its encoding shared with whoever takes the
    /// same snapshot.
    fn start_watch(
        &self,
        request: WatchRequest,
        snapshot: Option<Permit>,
        retire_at: Option<Instant>,
        framed: Option<Compression>,
    ) -> Result<impl Stream<Item = Result<Outgoing, Status>> + use<>, RequestError> {
        let scope = Scope::watch(&request)?;
        let in_use = self.served(&scope)?;
        let served = in_use.served().clone();
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
            head_bookmarks: request.head_bookmarks,
        };
        let guard = served.subscriber(&scope.namespace);
        let encoder = self.encoder.clone();
        let events = subscription::watch_on(
            served.store.clone(),
            spec,
            self.limits,
            snapshot.map(|permit| Box::new(permit) as SnapshotHold),
            retire_at,
            framed.map(|compression| SnapshotFrames {
                shared: self.snapshots.clone(),
                compression,
            }),
        );
        // A plain map, not another stream state machine or a span entered
        // per event: this runs once per delivery (see BENCHMARKS.md).
        Ok(events.map(move |result| {
            // The guards live as long as the stream: the subscriber count
            // drops with them, and an on-demand type stays held.
            let _in_use = &in_use;
            result
                .map(|output| {
                    let outgoing = match output {
                        Output::Event(delivery) => Outgoing::Event(encoder.encode(&delivery)),
                        Output::Snapshot(framed) => Outgoing::Snapshot(framed),
                    };
                    // Counted as it is handed on to be written: per
                    // subscriber, where the store counts per event.
                    let (events, bytes) = outgoing.size();
                    guard.delivered(events, bytes);
                    outgoing
                })
                .map_err(|e| {
                    guard.ended(&e);
                    Status::from(RequestError::from(e))
                })
        }))
    }

    /// A List's page, within the per-List byte bound; `reserved` is the
    /// most it may hold, and what it keeps is returned with the response.
    fn list(
        &self,
        request: ListRequest,
        reserved: Reservation,
    ) -> Result<(ListResponse, ListBytes), RequestError> {
        let scope = Scope::list(&request)?;
        let in_use = self.served(&scope)?;
        let served = in_use.served();
        let filter = Filter::new(
            &request.namespace,
            &request.label_selector,
            &request.field_selector,
            &served.resource().fields,
        )?;
        let projection = Projection::from_request(request.metadata_only);
        let max_bytes = self.budget.per_list();
        let page = served.pages.page(
            &served.store,
            &filter,
            request.limit,
            &request.r#continue,
            PageBytes {
                max: max_bytes,
                of: &|o| projection.bytes(o),
            },
        )?;
        if request.limit == 0 && page.next.is_some() {
            return Err(ListTooLarge {
                resource: scope.gvr.to_string(),
                max: max_bytes,
            }
            .into());
        }
        let bytes = page.objects.iter().map(|o| projection.bytes(o)).sum();
        let kept = reserved.keep(bytes);
        let response = ListResponse {
            resource_version: page.resource_version.to_string(),
            objects: page
                .objects
                .iter()
                .map(|o| projection.json(o).to_string())
                .collect(),
            r#continue: page.next.map(|t| t.encode()).unwrap_or_default(),
            remaining_item_count: page.remaining,
        };
        Ok((response, kept))
    }

    fn get(&self, request: GetRequest) -> Result<GetResponse, RequestError> {
        let scope = Scope::get(&request)?;
        let in_use = self.served(&scope)?;
        let served = in_use.served();
        let key = object_key(&scope.namespace, &scope.name);
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

    /// The status of `served`, its counts scoped to `namespace` (empty:
    /// all), the scope the caller was allowed to list.
    fn resource_status(served: &Served, namespace: &str) -> pb::ResourceStatus {
        let resource = served.resource();
        let status = served.store.status();
        let reflector = served.reflector.lock().clone();
        let objects = if namespace.is_empty() {
            status.objects
        } else {
            let snapshot = served.store.snapshot();
            namespace_range(&snapshot.objects, namespace).len() as u64
        };
        let custom_fields = resource.fields.custom_json_paths();
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
            objects,
            subscribers: served.subscribers(namespace),
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
            upstream: reflector
                .parent
                .as_ref()
                .map_or_else(|| "api-server".to_owned(), |p| format!("kube-fanout {p}")),
            bootstrapped_from: reflector.bootstrapped_from.clone().unwrap_or_default(),
            upstream_resource_version: reflector
                .parent_heads
                .newest()
                .map(|rv| rv.max(status.head.resource_version).to_string())
                .unwrap_or_default(),
            upstream_lag_seconds: reflector
                .parent_heads
                .behind(Instant::now(), status.head.resource_version)
                .map_or(0, |lag| lag.as_secs()),
            custom_resource: custom_fields.is_some(),
            selectable_fields: custom_fields.unwrap_or_default(),
            origin: match served.origin {
                Origin::Configured => pb::Origin::Configured,
                Origin::OnDemand => pb::Origin::OnDemand,
            }
            .into(),
            idle_seconds: match served.origin {
                Origin::OnDemand => served
                    .idle_since()
                    .map_or(0, |since| since.elapsed().as_secs()),
                Origin::Configured => 0,
            },
        }
    }
}

#[tonic::async_trait]
impl KubeFanout for FanoutService {
    type WatchStream = audited::WatchStream;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.get_ref();
        let scope = Scope::watch(r)?;
        let grant = self
            .authorize(request.extensions(), Verb::Watch, &scope, || {
                audited::watch_options(r)
            })
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
        let slot = request.extensions().get::<SnapshotSlot>().cloned();
        // Held until the stream has its own use of the type.
        let _starting = self.start_type(&scope).await?;
        let framed = slot.as_ref().map(SnapshotSlot::compression);
        let stream = self.start_watch(request.into_inner(), snapshot, retire_at, framed)?;
        let audit = grant.stream_audit();
        let guarded = grant.guard(stream).holding(watch);
        let audited = audited::watch_stream(audit, guarded);
        Ok(Response::new(Box::pin(snapshot_handoff::into_slot(
            slot, audited,
        ))))
    }

    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let r = request.get_ref();
        let scope = Scope::list(r)?;
        self.authorize(request.extensions(), Verb::List, &scope, || {
            audited::list_options(r)
        })
        .await?;
        let _in_use = self.synced(&scope).await?;
        // A List copies (a page of) the store like a snapshot does.
        let caller = Limiter::caller(request.extensions());
        let _snapshot = self.limiter.acquire(&caller, Held::Snapshot)?;
        let reserved = self.budget.reserve().await;
        let (list, held) = FanoutService::list(self, request.into_inner(), reserved)?;
        let mut response = Response::new(list);
        // Given back once the response is handed over (`HoldListBytes`).
        response.extensions_mut().insert(held);
        Ok(response)
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let r = request.get_ref();
        let scope = Scope::get(r)?;
        self.authorize(request.extensions(), Verb::Get, &scope, || {
            audited::get_options(r)
        })
        .await?;
        let _in_use = self.synced(&scope).await?;
        Ok(Response::new(FanoutService::get(
            self,
            request.into_inner(),
        )?))
    }

    async fn list_resources(
        &self,
        request: Request<ListResourcesRequest>,
    ) -> Result<Response<ListResourcesResponse>, Status> {
        // Only the types the caller may list in the namespace it names
        // (cluster-wide when it names none), counted in that namespace.
        let namespace = &request.get_ref().namespace;
        validation::namespace("namespace", namespace).map_err(RequestError::from)?;
        // One type asked for by name: its refusal is the caller's answer,
        // as the API server's to a List of it.
        if let Some(resource) = &request.get_ref().resource {
            let scope = Scope::listing(resource, namespace)?;
            self.authorize(request.extensions(), Verb::List, &scope, Default::default)
                .await?;
            let in_use = self.start_type(&scope).await?;
            let status = FanoutService::resource_status(in_use.served(), namespace);
            return Ok(Response::new(ListResourcesResponse {
                resources: vec![status],
            }));
        }
        let mut resources = Vec::new();
        for served in &self.cache.iter() {
            let gvr = &served.resource().gvr;
            let scope = Scope::listing(
                &pb::ResourceRef {
                    group: gvr.group.clone(),
                    version: gvr.version.clone(),
                    resource: gvr.resource.clone(),
                },
                namespace,
            )?;
            match self
                .authorize(request.extensions(), Verb::List, &scope, Default::default)
                .await
            {
                Ok(_) => resources.push(FanoutService::resource_status(served, namespace)),
                Err(RequestError::Auth(AuthError::Denied { .. })) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(Response::new(ListResourcesResponse { resources }))
    }
}

#[cfg(test)]
mod tests {
    use kube_fanout_core::fixtures::{configmaps, object, object_in};
    use prost::Message;

    use super::*;
    use kube_fanout_auth::limits::{Caller, CallerLimits};
    use kube_fanout_core::{
        event::EventKind, object::ResourceVersion, registry::Deliveries, store::Store,
    };

    use crate::list_budget::ListBytesLimits;
    use kube_fanout_proto::wire::EncodedWatchEvent;
    use tonic_types::StatusExt;

    fn service(store: Arc<Store>) -> FanoutService {
        let mut cache = ServedTypes::default();
        cache.insert(Served::new(store, Arc::default()));
        FanoutService::new(Arc::new(cache), Limits::default())
    }

    /// A watch with no snapshot slot (as a call not behind
    /// [`crate::snapshot_handoff::SendSnapshots`]): every event its own.
    fn plain_watch(
        service: &FanoutService,
        request: WatchRequest,
    ) -> impl Stream<Item = Result<EncodedWatchEvent, Status>> + use<> {
        snapshot_handoff::into_slot(
            None,
            service.start_watch(request, None, None, None).unwrap(),
        )
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

    /// A Watch, List and Get on a type not synced yet wait for the first
    /// sync, bounded, then answer UNAVAILABLE with reason NotSynced and a
    /// RetryInfo; never an empty list or NotFound from the empty store.
    #[tokio::test(start_paused = true)]
    async fn watch_list_and_get_on_an_unsynced_type_end_not_synced_after_the_bound() {
        let store = Arc::new(Store::new(configmaps(), 100));
        let service = service(store);
        let resource = request("", "", false).resource;
        let bound = Limits::default().freshness_timeout;
        let not_synced = |status: Status| {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(info.reason, kube_fanout_proto::NOT_SYNCED);
            assert!(status.get_details_retry_info().is_some(), "{status:?}");
        };
        let started = tokio::time::Instant::now();
        let list = KubeFanout::list(
            &service,
            Request::new(ListRequest {
                resource: resource.clone(),
                ..Default::default()
            }),
        )
        .await;
        not_synced(list.unwrap_err());
        assert_eq!(started.elapsed(), bound);
        let get = KubeFanout::get(
            &service,
            Request::new(GetRequest {
                resource,
                namespace: "ns".into(),
                name: "a".into(),
                metadata_only: false,
            }),
        )
        .await;
        not_synced(get.unwrap_err());
        let mut watch = KubeFanout::watch(&service, Request::new(request("", "", true)))
            .await
            .unwrap()
            .into_inner();
        not_synced(watch.next().await.unwrap().map(|_| ()).unwrap_err());
        assert_eq!(started.elapsed(), 3 * bound);
    }

    /// What the server does when it stops: every open watch of every
    /// served type ends with UNAVAILABLE, and so does one opened after.
    #[tokio::test(start_paused = true)]
    async fn closing_the_cache_ends_every_watch_with_unavailable() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let service = service(store.clone());
        let watch = || Box::pin(plain_watch(&service, request("", "1", false)));
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
            .map(|_| Box::pin(plain_watch(&service, request("", "1", false))))
            .collect();
        // For this one the change is a filter transition: its own DELETED.
        let mut filtered = Box::pin(plain_watch(&service, request("app=x", "1", false)));

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
        let deleted_len = deleted.len() as u64;
        let deleted = pb::WatchEvent::decode(deleted).unwrap();
        assert_eq!(deleted.r#type(), pb::EventType::Deleted);
        assert_eq!(deleted.resource_version, "2");
        // Encoded once, but delivered (and counted) once per subscriber.
        let served = service.cache.iter()[0].clone();
        assert_eq!(
            served.deliveries(),
            Deliveries {
                events: SUBSCRIBERS as u64 + 1,
                bytes: SUBSCRIBERS as u64 * received[0].len() as u64 + deleted_len,
            }
        );

        // Snapshots are per subscriber: an ADDED and the end bookmark each.
        let mut snapshot = Box::pin(plain_watch(&service, request("", "", true)));
        let added =
            pb::WatchEvent::decode(snapshot.next().await.unwrap().unwrap().to_bytes()).unwrap();
        assert_eq!(added.r#type(), pb::EventType::Added);
        snapshot.next().await.unwrap().unwrap();
        assert_eq!(service.encoder.encodes(), 4);
    }

    /// A call with a snapshot slot (served behind `SendSnapshots`) leaves
    /// its snapshot there, framed, and hands tonic only what follows it:
    /// the end bookmark, then live events. The framed ADDEDs are the
    /// snapshot's, counted as delivered like events sent one by one, and a
    /// second call that takes the same snapshot sends the same chunks.
    #[tokio::test(start_paused = true)]
    async fn a_watch_with_a_slot_leaves_its_snapshot_there_framed_and_shared() {
        let store = Arc::new(Store::new(configmaps(), 100));
        let objects = vec![
            object("a", 1, "{}"),
            object("b", 2, "{}"),
            object("c", 3, "{}"),
        ];
        let json: Vec<String> = objects.iter().map(|o| o.json.to_string()).collect();
        store.replace(objects, ResourceVersion(5));
        let service = service(store.clone());
        let watch = || async {
            let slot = SnapshotSlot::new(Compression::None);
            let mut call = Request::new(request("", "", true));
            call.extensions_mut().insert(slot.clone());
            let stream = KubeFanout::watch(&service, call)
                .await
                .unwrap()
                .into_inner();
            (slot, stream)
        };
        // Both calls open (and their streams polled) before either sends
        // a chunk: one encoding, shared.
        let (slot, mut stream) = watch().await;
        let (again, mut second) = watch().await;
        second.next().await.unwrap().unwrap();
        let first = pb::WatchEvent::decode(stream.next().await.unwrap().unwrap().to_bytes());
        let first = first.unwrap();
        assert_eq!(
            (first.r#type(), first.resource_version.as_str()),
            (pb::EventType::Bookmark, "5"),
            "the end bookmark comes first to tonic"
        );
        let mut framed = slot.take().expect("the snapshot, left in the slot");
        let chunk = framed.next_chunk().unwrap();
        assert_eq!(framed.next_chunk(), None, "three small objects: one chunk");
        let mut rest = &chunk[..];
        let mut added = Vec::new();
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            let event = pb::WatchEvent::decode(&rest[5..5 + len]).unwrap();
            assert_eq!(
                (event.r#type(), event.resource_version.as_str()),
                (pb::EventType::Added, "5")
            );
            added.push(event.object);
            rest = &rest[5 + len..];
        }
        assert_eq!(added, json);
        let served = service.cache.iter()[0].clone();
        assert_eq!(
            served.deliveries().events,
            8,
            "three ADDEDs and the bookmark, to each"
        );

        let mut again = again.take().expect("left as the stream is polled");
        assert_eq!(again.next_chunk().unwrap().as_ptr(), chunk.as_ptr());

        store.apply(EventKind::Added, object("d", 6, "{}"));
        let live = pb::WatchEvent::decode(stream.next().await.unwrap().unwrap().to_bytes());
        assert_eq!(live.unwrap().resource_version, "6");
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
            assert_eq!(service.limiter.held(&Caller::Anonymous, Held::Snapshot), 1);
            // Past the snapshot (no event is due, so the wait times out)
            // the permit is back.
            tokio::time::timeout(std::time::Duration::from_secs(1), legacy.next())
                .await
                .expect_err("nothing after the snapshot");
            assert_eq!(
                service.limiter.held(&Caller::Anonymous, Held::Snapshot),
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
            .map(|_| Box::pin(plain_watch(&service, request("", "1", false))))
            .collect();
        let mut metadata: Vec<_> = (0..SUBSCRIBERS)
            .map(|_| Box::pin(plain_watch(&service, metadata_only("1", false))))
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
        let mut snapshot = Box::pin(plain_watch(&service, metadata_only("", true)));
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

    #[tokio::test]
    async fn list_and_get_answer_partial_object_metadata_when_asked() {
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
            service.budget.reserve().await,
        )
        .unwrap()
        .0;
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

    fn configmaps_ref() -> Option<pb::ResourceRef> {
        request("", "", false).resource
    }

    /// Objects of 200 bytes, for byte bounds.
    fn sized(name: &str) -> kube_fanout_core::object::Object {
        let mut o = object(name, 1, "{}");
        let padding = 200 - o.json.len();
        let json = format!(
            "{}{}}}",
            &o.json[..o.json.len() - 1],
            format_args!(",\"p\":\"{}\"", "x".repeat(padding - 7))
        );
        o.json = json.into();
        assert_eq!(o.json.len(), 200);
        o
    }

    #[tokio::test]
    async fn a_list_holds_at_most_its_byte_bound_and_an_unpaged_one_over_it_is_refused() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            (0..10).map(|i| sized(&format!("o{i}"))).collect(),
            ResourceVersion(1),
        );
        let service = service(store).with_list_budget(ListBudget::new(ListBytesLimits {
            per_list: 700,
            total: 1 << 20,
        }));
        let list = |limit: u32, token: &str| {
            let service = service.clone();
            let request = Request::new(ListRequest {
                resource: configmaps_ref(),
                limit,
                r#continue: token.into(),
                ..Default::default()
            });
            async move { KubeFanout::list(&service, request).await }
        };
        let unpaged = list(0, "").await.unwrap_err();
        assert_eq!(unpaged.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            unpaged.message(),
            "an unpaged List of v1/configmaps would send more than 700 bytes of objects (--max-list-bytes): page it with limit and continue"
        );
        // A page of 5 stops at 3 objects (600 bytes) and goes on from there.
        let page = list(5, "").await.unwrap();
        let held = page.extensions().get::<ListBytes>().is_some();
        let page = page.into_inner();
        assert!(held, "the kept bytes travel with the response");
        assert_eq!((page.objects.len(), page.remaining_item_count), (3, 7));
        let next = list(5, &page.r#continue).await.unwrap().into_inner();
        assert_eq!(next.objects.len(), 3);
        assert!(
            next.objects[0].contains(r#""name":"o3""#),
            "{}",
            next.objects[0]
        );
        // Responses dropped: the whole budget is back.
        assert_eq!(service.budget.available(), 1 << 20);
    }

    #[tokio::test]
    async fn list_resources_counts_only_the_namespace_asked_for() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(
            vec![
                object_in("a", "x", 1, "{}"),
                object_in("a", "y", 1, "{}"),
                object_in("b", "z", 1, "{}"),
            ],
            ResourceVersion(1),
        );
        let service = service(store);
        let in_a = WatchRequest {
            namespace: "a".into(),
            ..request("", "1", false)
        };
        let _a = plain_watch(&service, in_a);
        let _all = plain_watch(&service, request("", "1", false));
        let counts = |namespace: &str| {
            let service = service.clone();
            let request = Request::new(ListResourcesRequest {
                namespace: namespace.into(),
                resource: None,
            });
            async move {
                let status = KubeFanout::list_resources(&service, request)
                    .await
                    .unwrap()
                    .into_inner()
                    .resources
                    .remove(0);
                (status.objects, status.subscribers)
            }
        };
        assert_eq!(counts("").await, (3, 2));
        assert_eq!(counts("a").await, (2, 1));
        assert_eq!(counts("b").await, (1, 0));
        let refused = KubeFanout::list_resources(
            &service,
            Request::new(ListResourcesRequest {
                namespace: "x".repeat(64),
                resource: None,
            }),
        )
        .await
        .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    }

    #[tokio::test]
    async fn get_refuses_a_path_for_a_name_and_unserved_types_list_nothing() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("x", 1, "{}")], ResourceVersion(1));
        let service = service(store);
        let get = |namespace: &str, name: &str, resource| {
            let service = service.clone();
            let request = Request::new(GetRequest {
                resource,
                namespace: namespace.into(),
                name: name.into(),
                metadata_only: false,
            });
            async move { KubeFanout::get(&service, request).await }
        };
        get("ns", "x", configmaps_ref()).await.unwrap();
        // "ns/x" at the cluster scope is the cache key of ns's x.
        let path = get("", "ns/x", configmaps_ref()).await.unwrap_err();
        assert_eq!(path.code(), tonic::Code::InvalidArgument);
        assert!(
            path.message().starts_with("name \"ns/x\" is invalid"),
            "{path:?}"
        );
        let unserved = get(
            "ns",
            "x",
            Some(pb::ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "secrets".into(),
            }),
        )
        .await
        .unwrap_err();
        assert_eq!(unserved.code(), tonic::Code::NotFound);
        assert!(!unserved.message().contains("configmaps"), "{unserved:?}");
    }

    #[tokio::test]
    async fn a_resync_unit_is_encoded_once_flagged_and_closed_for_every_subscriber() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![object("a", 1, "{}")], ResourceVersion(1));
        let service = service(store.clone());
        let mut streams: Vec<_> = (0..10)
            .map(|_| Box::pin(plain_watch(&service, request("", "1", false))))
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
