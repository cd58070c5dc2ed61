//! Dispatch by index: which subscribers an event can concern, so that one
//! that receives nothing costs nothing per event (no wake-up, no lock, no
//! filter evaluation).
//!
//! A live subscriber whose filter pins an exact value of an indexed field
//! (`metadata.name`, a pod's `spec.nodeName`, the type's fields
//! `--index-field` names, `metadata.namespace`; see
//! [`IndexedField::for_type`]) registers one [`Interest`] under that
//! (field, value); one that pins none of those but a label's values
//! (`key=value`, `key==value`, `key in (values)`; see
//! [`Filter::required_labels`]) registers the same interest under (label,
//! value) for each of those values (the label with the fewest distinct
//! values, when it pins several); one that pins no value but requires a
//! label to exist (`key`) registers under the label's presence. Every
//! object its filter matches has one of those values (or the label), so an
//! event can only concern it if its object or its previous object has one.
//! Other subscribers (selectors that require no label: `notin`, `!=`,
//! `!key`, or none; these match every object without the label, so they
//! are rarely quiet) stay unindexed and wait on the store's head, as
//! before.
//!
//! # The mark, and why it is enough
//!
//! An interest holds a **mark**: 0, or the sequence number of the earliest
//! event that touched it since its subscriber last took the mark. The store's
//! writer, for each event it appends, after releasing the ring's mutex and
//! **before** publishing the head that includes the event, sets the mark of
//! every interest registered under the event's old and new index values
//! (if the mark is 0) and wakes its subscriber; an interest registered
//! under both is marked once, as the second finds the mark set. An event
//! without an object (a bookmark, and the bookmark closing a re-sync unit,
//! which every subscriber must get) marks every interest. Marks are set in
//! sequence order: there is one writer.
//!
//! The subscriber, with its cursor `c`, reads the head `H`, then takes the
//! mark (swaps it with 0):
//!
//! - **0**: no event in `(c, H]` concerns it, so it moves its cursor to `H`
//!   without reading the ring. Proof sketch: an event `s <= H` touching it
//!   was marked before head `s` was published, which happened before the
//!   subscriber read `H` (the head is a lock: release, then acquire), so the
//!   take sees that mark or a later state. A 0 there means an earlier take
//!   consumed it, and after every take that returns a mark the subscriber
//!   reads the ring until it is empty (below); the mark was set after the
//!   event was appended, so that read reached `s`. Hence every such `s` is
//!   at or before the cursor already.
//! - **`m`**: it reads the ring from `max(c, m - 1)` until the ring has
//!   nothing more (it is "catching up"; no mark is taken meanwhile). The
//!   events in `(c, m - 1)` concern it neither: an unconsumed touching event
//!   before `m` would have set the mark first (marks are set in order and
//!   only when 0), and a consumed one was read by an earlier catch-up.
//!
//! So a quiet subscriber's cursor follows the head whenever it looks (at
//! its progress tick, say) without reading the ring, and never falls off
//! the ring's tail for events it was not owed.
//!
//! # Registration races
//!
//! An interest is registered when its subscriber turns live, after its
//! starting position `p` is fixed, and its first step is a catch-up read
//! from `p`. An event `s` is marked with the index's read lock held, and a
//! registration takes the write lock: if the marking came first, `s` was
//! appended before the registration and so before the catch-up read, which
//! reads it; otherwise the marking sees the interest. (The writer's
//! "nothing registered" shortcut reads a counter that the registration
//! bumps before that read; the ring's mutex orders the two the same way.)
//!
//! # Cost
//!
//! Per event: one read lock on the index and a hash lookup per indexed
//! field with interests and value (the values are the selectable fields'
//! values taken when the object entered the store), the same per label
//! key that interests are registered under (by value or by presence), plus
//! one atomic and one wake-up per interest it touches. Bookmarks mark
//! every interest (one registered under several label values is tried once
//! per value); they are rare.

use std::{
    collections::HashMap,
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use parking_lot::RwLock;
use tokio::sync::Notify;

#[cfg(doc)]
use crate::filter::Filter;
use crate::{
    event::Event,
    fields::Source,
    resource::{GroupVersionResource, ResourceType},
};

/// A field subscribers can be indexed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedField {
    /// Its canonical path, as [`Filter::pinned`] names it.
    path: String,
    /// Where objects hold its value (the filter's own reading, so an unset
    /// node name is "" and `spec.nodeName=` is indexed under "").
    source: Source,
}

/// A field `--index-field` names that a type's subscribers cannot be
/// indexed by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--index-field {gvr}={field}: {reason}")]
pub struct UnindexableField {
    /// The type.
    pub gvr: String,
    /// The field, as given.
    pub field: String,
    /// Why: the API server's refusal with the supported labels, or a
    /// label it accepts but never sets.
    pub reason: String,
}

/// `--index-field GVR=FIELD`: index the subscribers of one type by one of
/// its selectable fields as well.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFieldFlag {
    /// The type.
    pub gvr: GroupVersionResource,
    /// The field selector label.
    pub field: String,
}

impl FromStr for IndexFieldFlag {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (gvr, field) = s.split_once('=').ok_or_else(|| {
            format!("{s:?} is not GVR=FIELD (for example v1/pods=spec.schedulerName)")
        })?;
        Ok(IndexFieldFlag {
            gvr: gvr.parse().map_err(|e| format!("{gvr:?}: {e}"))?,
            field: field.to_owned(),
        })
    }
}

impl IndexedField {
    /// The fields a store of `resource` indexes, most selective first (a
    /// subscriber pinning several is registered under the first):
    /// `metadata.name`; a pod's (or resourceslice's) `spec.nodeName`,
    /// always, as node agents are the largest fanout; the type's own
    /// selectable fields named in `extra` (`--index-field`), in that order;
    /// `metadata.namespace`.
    pub fn for_type(
        resource: &ResourceType,
        extra: &[String],
    ) -> Result<Vec<IndexedField>, UnindexableField> {
        let fields = &resource.fields;
        let own = |label: &str| match fields.resolve(label) {
            Ok(source @ Source::Field(_)) => Ok(Some(IndexedField {
                path: fields.path(source).unwrap_or(label).to_owned(),
                source,
            })),
            // Indexed anyway.
            Ok(Source::Name | Source::Namespace) => Ok(None),
            Ok(Source::Unset) => Err(
                "the API server accepts this label but never sets it, so every object has \"\""
                    .to_owned(),
            ),
            Err(refusal) => Err(refusal),
        };
        let mut indexed = vec![IndexedField {
            path: "metadata.name".into(),
            source: Source::Name,
        }];
        // Not every type with the label reads it from the object (a node
        // name could be unset by construction); only a real field indexes.
        if let Ok(Some(node)) = own("spec.nodeName") {
            indexed.push(node);
        }
        for label in extra {
            let field = own(label).map_err(|reason| UnindexableField {
                gvr: resource.gvr.to_string(),
                field: label.clone(),
                reason,
            })?;
            if let Some(field) = field
                && !indexed.contains(&field)
            {
                indexed.push(field);
            }
        }
        indexed.push(IndexedField {
            path: "metadata.namespace".into(),
            source: Source::Namespace,
        });
        Ok(indexed)
    }

    /// The field's canonical path, as field selectors name it.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// What an interest's subscriber is woken by (see the module docs).
#[derive(Debug, Default)]
struct Mark {
    /// 0, or the earliest unread sequence number that touched the interest.
    first: AtomicU64,
    wake: Notify,
}

impl Mark {
    /// Marks `seq` unless an earlier mark is still unread; wakes the
    /// subscriber when the mark was 0.
    fn set(&self, seq: u64) {
        if self
            .first
            .compare_exchange(0, seq, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.wake.notify_one();
        }
    }
}

/// The registered interests of one store, by field (in the order of the
/// dispatch's indexed fields) and value, and by label key.
#[derive(Debug, Default)]
struct Index {
    by_field: Vec<Interests>,
    by_label: HashMap<String, LabelInterests>,
}

/// Interests by the value they are registered under.
type Interests = HashMap<String, Vec<Arc<Mark>>>;

/// The interests registered under one label.
#[derive(Debug, Default)]
struct LabelInterests {
    /// Under one or more of its values.
    by_value: Interests,
    /// Under its presence, whatever the value.
    present: Vec<Arc<Mark>>,
}

impl LabelInterests {
    fn is_empty(&self) -> bool {
        self.by_value.is_empty() && self.present.is_empty()
    }

    /// Marks, for event `seq`, the interests of the label's value `new` on
    /// the object and `old` on its previous state, and those of its
    /// presence if either has it.
    fn mark(&self, new: Option<&str>, old: Option<&str>, seq: u64) {
        mark_values(&self.by_value, new, old, seq);
        if new.is_some() || old.is_some() {
            self.present.iter().for_each(|m| m.set(seq));
        }
    }
}

impl Index {
    /// Registers `mark` under `key`.
    fn insert(&mut self, key: &Key, mark: &Arc<Mark>) {
        let add = |by_value: &mut Interests, value: &String| {
            by_value
                .entry(value.clone())
                .or_default()
                .push(mark.clone());
        };
        match key {
            Key::Field(field, value) => add(&mut self.by_field[*field], value),
            Key::Label(label, pin) => {
                let interests = self.by_label.entry(label.clone()).or_default();
                match pin {
                    Some(values) => values.iter().for_each(|v| add(&mut interests.by_value, v)),
                    None => interests.present.push(mark.clone()),
                }
            }
        }
    }

    /// Deregisters `mark` from under `key`, and drops what is left empty.
    fn remove(&mut self, key: &Key, mark: &Arc<Mark>) {
        let remove = |by_value: &mut Interests, value: &String| {
            if let Some(marks) = by_value.get_mut(value) {
                marks.retain(|m| !Arc::ptr_eq(m, mark));
                if marks.is_empty() {
                    by_value.remove(value);
                }
            }
        };
        match key {
            Key::Field(field, value) => remove(&mut self.by_field[*field], value),
            Key::Label(label, pin) => {
                let Some(interests) = self.by_label.get_mut(label) else {
                    return;
                };
                match pin {
                    Some(values) => values
                        .iter()
                        .for_each(|v| remove(&mut interests.by_value, v)),
                    None => interests.present.retain(|m| !Arc::ptr_eq(m, mark)),
                }
                // A label nobody is registered under costs every event a
                // lookup.
                if interests.is_empty() {
                    self.by_label.remove(label);
                }
            }
        }
    }

    /// Every registered interest.
    fn all(&self) -> impl Iterator<Item = &Arc<Mark>> {
        let by_field = self.by_field.iter().flat_map(HashMap::values).flatten();
        let by_label = self
            .by_label
            .values()
            .flat_map(|l| l.by_value.values().flatten().chain(&l.present));
        by_field.chain(by_label)
    }
}

/// Marks, for event `seq`, the interests `by_value` registers under the
/// object's value `new` and its previous state's value `old` (each none
/// when it has no value there; one lookup when they are equal).
fn mark_values(by_value: &Interests, new: Option<&str>, old: Option<&str>, seq: u64) {
    let touched = new.into_iter().chain(old.filter(|o| Some(*o) != new));
    for value in touched {
        if let Some(marks) = by_value.get(value) {
            marks.iter().for_each(|m| m.set(seq));
        }
    }
}

/// What an interest is registered under.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    /// The dispatch's indexed field at this position, this value.
    Field(usize, String),
    /// This label, with one of these values (sorted, distinct, at least
    /// one), or with any value (`None`).
    Label(String, Option<Vec<String>>),
}

/// The registry of interests of one store, and its counters.
#[derive(Debug)]
pub struct Dispatch {
    index: RwLock<Index>,
    /// Registered interests: the writer skips the index while there are none.
    indexed: AtomicUsize,
    /// Live subscribers that follow the head instead.
    unindexed: AtomicU64,
    /// Times a live subscriber was woken to look for events.
    wakeups: AtomicU64,
    /// The indexed fields, most selective first.
    fields: Vec<IndexedField>,
}

/// The dispatch counters an operator graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchStatus {
    /// Live subscribers registered under an indexed value.
    pub indexed: u64,
    /// Live subscribers that are offered every event.
    pub unindexed: u64,
    /// Times a live subscriber was woken to look for events.
    pub wakeups: u64,
}

impl Dispatch {
    /// An empty registry indexing `fields` (see [`IndexedField::for_type`]).
    pub fn new(fields: Vec<IndexedField>) -> Self {
        Dispatch {
            index: RwLock::new(Index {
                by_field: vec![HashMap::new(); fields.len()],
                by_label: HashMap::new(),
            }),
            indexed: AtomicUsize::new(0),
            unindexed: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            fields,
        }
    }

    /// Registers a live subscriber whose filter requires the exact values
    /// `pinned` (field path, value; see [`Filter::pinned`]) and the labels
    /// `labels` (key, allowed values or any; see
    /// [`Filter::required_labels`]): under the first indexed field among
    /// them, else under each value of the label with the fewest distinct
    /// values (the first of those), else under the first label required to
    /// exist, else unindexed. The registration lasts as long as the
    /// returned interest.
    pub fn register<'p, 'v>(
        self: &Arc<Self>,
        pinned: impl Iterator<Item = (&'p str, &'v str)> + Clone,
        labels: impl Iterator<Item = (&'p str, Option<&'v [String]>)>,
    ) -> Interest {
        let field = self.fields.iter().enumerate().find_map(|(i, field)| {
            let (_, value) = pinned.clone().find(|(path, _)| *path == field.path)?;
            Some(Key::Field(i, value.to_owned()))
        });
        let key = field.or_else(|| {
            // Any value counts as more values than any set.
            labels
                .map(|(label, values)| {
                    let values = values.map(|values| {
                        let mut values = values.to_vec();
                        values.sort_unstable();
                        values.dedup();
                        values
                    });
                    (label, values)
                })
                .filter(|(_, values)| values.as_ref().is_none_or(|v| !v.is_empty()))
                .min_by_key(|(_, values)| values.as_ref().map_or(usize::MAX, Vec::len))
                .map(|(label, values)| Key::Label(label.to_owned(), values))
        });
        let slot = key.map(|key| {
            let mark = Arc::new(Mark::default());
            let mut index = self.index.write();
            self.indexed.fetch_add(1, Ordering::AcqRel);
            index.insert(&key, &mark);
            (key, mark)
        });
        if slot.is_none() {
            self.unindexed.fetch_add(1, Ordering::Relaxed);
        }
        Interest {
            dispatch: self.clone(),
            slot,
        }
    }

    /// Marks the interests `events` touch. The store's writer calls this
    /// after appending them and releasing the ring's mutex, and before it
    /// publishes a head that includes them (see the module docs).
    pub(crate) fn mark(&self, events: &[Arc<Event>]) {
        if self.indexed.load(Ordering::Acquire) == 0 {
            return;
        }
        let index = self.index.read();
        for event in events {
            let Some(object) = &event.object else {
                // A bookmark, or a unit's close, is for everyone.
                index.all().for_each(|m| m.set(event.seq));
                continue;
            };
            for (field, by_value) in self.fields.iter().zip(&index.by_field) {
                if by_value.is_empty() {
                    continue;
                }
                let old = event.previous.as_deref().map(|p| p.field(field.source));
                mark_values(by_value, Some(object.field(field.source)), old, event.seq);
            }
            for (label, interests) in &index.by_label {
                let new = object.labels.get(label).map(String::as_str);
                let old = event.previous.as_deref().and_then(|p| p.labels.get(label));
                interests.mark(new, old.map(String::as_str), event.seq);
            }
        }
    }

    /// Wakes every registered subscriber without marking anything: the
    /// store is closing (see `Store::close_subscribers`).
    pub(crate) fn wake_all(&self) {
        self.index.read().all().for_each(|m| m.wake.notify_one());
    }

    /// Counts a live subscriber's wake-up.
    pub fn woken(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters.
    pub fn status(&self) -> DispatchStatus {
        DispatchStatus {
            indexed: self.indexed.load(Ordering::Relaxed) as u64,
            unindexed: self.unindexed.load(Ordering::Relaxed),
            wakeups: self.wakeups.load(Ordering::Relaxed),
        }
    }
}

/// A live subscriber's registration: indexed under one field value, one
/// or more label values, or a label's presence, or not. Dropping it
/// deregisters.
#[derive(Debug)]
pub struct Interest {
    dispatch: Arc<Dispatch>,
    /// What it is registered under, and the mark.
    slot: Option<(Key, Arc<Mark>)>,
}

impl Interest {
    /// Whether the subscriber is indexed (and so follows its mark, not the
    /// head).
    pub(crate) fn is_indexed(&self) -> bool {
        self.slot.is_some()
    }

    /// The mark, reset to 0: 0, or the earliest event since the last take
    /// that touched this interest. Unindexed: always 0.
    pub fn take(&self) -> u64 {
        self.slot
            .as_ref()
            .map_or(0, |(_, m)| m.first.swap(0, Ordering::AcqRel))
    }

    /// Whether a mark is waiting to be taken.
    pub(crate) fn is_marked(&self) -> bool {
        self.slot
            .as_ref()
            .is_some_and(|(_, m)| m.first.load(Ordering::Acquire) != 0)
    }

    /// Resolves once the interest is marked (at once if it was marked since
    /// the last wait). Never, unindexed.
    pub(crate) async fn marked(&self) {
        match &self.slot {
            Some((_, m)) => m.wake.notified().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        let Some((key, mark)) = self.slot.take() else {
            self.dispatch.unindexed.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        self.dispatch.index.write().remove(&key, &mark);
        self.dispatch.indexed.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::{Stream, StreamExt};

    use super::*;
    use crate::{
        event::EventKind,
        fields::SelectableFields,
        filter::Filter,
        fixtures::{configmaps, empty_store, object_in},
        object::{Object, ResourceVersion, Transform, TypeMeta},
        projection::Projection,
        store::{HistoryLimits, Store},
        subscription::{
            Delivery, Limits, Start, WatchError, WatchSpec,
            tests::{deliveries as ready, stream_of, watch},
        },
    };

    /// A ConfigMap `ns/name` at `rv`.
    fn cm(ns: &str, name: &str, rv: u64) -> Object {
        object_in(ns, name, rv, "{}")
    }

    fn spec(namespace: &str, start: Start, allow_bookmarks: bool) -> WatchSpec {
        WatchSpec {
            filter: Filter::new(namespace, "", "", &SelectableFields::default()).unwrap(),
            start,
            send_initial_events: false,
            allow_bookmarks,
            projection: Projection::default(),
            head_bookmarks: false,
        }
    }

    /// A cluster-wide watch from RV 1 with this label selector.
    fn label_watch(selector: &str) -> WatchSpec {
        WatchSpec {
            filter: Filter::new("", selector, "", &SelectableFields::default()).unwrap(),
            ..spec("", Start::At(ResourceVersion(1)), false)
        }
    }

    fn counts(store: &Store) -> (u64, u64) {
        (store.dispatch().status().wakeups, store.probes().reads())
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_is_not_woken_by_other_namespaces_yet_gets_its_own_events_in_order() {
        // A ring of 100: a subscriber whose cursor stayed behind while
        // 10,000 events passed would have fallen off it.
        let store = empty_store();
        let mut stream = stream_of(
            &store,
            spec("a", Start::At(ResourceVersion(1)), true),
            Limits::default(),
        );
        assert!(ready(&mut stream).await.is_empty());
        assert_eq!(store.dispatch().status().indexed, 1);
        let before = counts(&store);
        let mut rv = 1;
        let mut other_namespace = |store: &Store| {
            for i in 0..10_000 {
                rv += 1;
                store.apply(EventKind::Added, cm("b", &format!("b-{}", i % 50), rv));
            }
            rv
        };
        let last_b = other_namespace(&store);
        assert!(ready(&mut stream).await.is_empty());
        assert_eq!(
            counts(&store),
            before,
            "10,000 events of namespace b: no wake-up, no ring read"
        );

        // Its progress tick moves it to the head without reading the ring.
        tokio::time::advance(Limits::default().progress_interval).await;
        assert_eq!(
            ready(&mut stream).await,
            [Ok((EventKind::Bookmark, last_b, false, String::new()))]
        );
        assert_eq!(counts(&store).1, before.1, "no ring read for the bookmark");

        // Its own events, each after 10,000 of b's: every one, in order,
        // from one wake-up per burst and a read or two.
        let (wakeups, reads) = counts(&store);
        for kind in [EventKind::Added, EventKind::Modified, EventKind::Deleted] {
            let rv = other_namespace(&store) + 1;
            store.apply(kind, cm("a", "mine", rv));
            assert_eq!(
                ready(&mut stream).await,
                [Ok((kind, rv, false, "mine".to_owned()))]
            );
        }
        let (woken, read) = (counts(&store).0 - wakeups, counts(&store).1 - reads);
        assert!(
            woken <= 3 && read <= 6,
            "30,000 events, 3 for it: {woken} wake-ups and {read} ring reads"
        );
        assert_eq!(store.head().seq, 40_003);
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_units_close_reaches_an_indexed_subscriber_even_with_bookmarks_off() {
        let store = Arc::new(Store::new(configmaps(), 100));
        store.replace(vec![cm("b", "x", 2)], ResourceVersion(2));
        let mut streams: Vec<_> = [true, false]
            .map(|bookmarks| {
                stream_of(
                    &store,
                    spec("a", Start::At(ResourceVersion(2)), bookmarks),
                    Limits::default(),
                )
            })
            .into();
        for stream in &mut streams {
            assert!(ready(stream).await.is_empty());
        }
        // The relist's difference is all in namespace b.
        store.replace(vec![cm("b", "x", 5), cm("b", "y", 6)], ResourceVersion(7));
        for stream in &mut streams {
            assert_eq!(
                ready(stream).await,
                [Ok((EventKind::Bookmark, 7, true, String::new()))]
            );
        }
        // A unit that concerns it arrives whole.
        store.replace(vec![cm("a", "z", 8)], ResourceVersion(9));
        assert_eq!(
            ready(&mut streams[1]).await,
            [
                Ok((EventKind::Added, 9, true, "z".into())),
                Ok((EventKind::Bookmark, 9, true, String::new())),
            ]
        );
    }

    /// A cluster-wide watch with `app=mine` (or `app in (mine)`) is
    /// indexed by that label: other objects' events cost it nothing, and
    /// an object whose label changes into or out of the value reaches it as
    /// ADDED or DELETED. A selector that pins no value (`app notin (x)`)
    /// stays unindexed; the last subscriber of a label takes the label out
    /// of the index.
    #[tokio::test(start_paused = true)]
    async fn a_label_pinned_subscriber_is_woken_only_by_its_labels_events() {
        let store = empty_store();
        let mut streams: Vec<_> = ["app=mine", "app in (mine)"]
            .map(|selector| stream_of(&store, label_watch(selector), Limits::default()))
            .into();
        let mut no_value = stream_of(&store, label_watch("app notin (x)"), Limits::default());
        for stream in streams.iter_mut().chain([&mut no_value]) {
            assert!(ready(stream).await.is_empty());
        }
        let status = store.dispatch().status();
        assert_eq!((status.indexed, status.unindexed), (2, 1));
        drop(no_value);
        let labelled = |name: &str, rv: u64, labels: &str| object_in("ns", name, rv, labels);
        let before = counts(&store);
        for rv in 2..=101 {
            let labels = [r#"{"app":"other"}"#, "{}", r#"{"tier":"mine"}"#][rv as usize % 3];
            store.apply(EventKind::Added, labelled(&format!("o{rv}"), rv, labels));
        }
        for stream in &mut streams {
            assert!(ready(stream).await.is_empty());
        }
        assert_eq!(
            counts(&store),
            before,
            "100 other objects: no wake-up, no ring read"
        );
        // One at a time, so each must wake it: into the value, within it,
        // out of it (only the previous state has the value).
        for (rv, labels, kind) in [
            (102, r#"{"app":"mine"}"#, EventKind::Added),
            (103, r#"{"app":"mine","x":"y"}"#, EventKind::Modified),
            (104, "{}", EventKind::Deleted),
        ] {
            store.apply(EventKind::Modified, labelled("o2", rv, labels));
            for stream in &mut streams {
                assert_eq!(ready(stream).await, [Ok((kind, rv, false, "o2".into()))]);
            }
        }
        // Both are registered under (app, mine): one leaving keeps the
        // other's registration.
        let mut remaining = streams.remove(0);
        drop(streams);
        assert_eq!(store.dispatch().status().indexed, 1);
        store.apply(
            EventKind::Modified,
            labelled("o3", 105, r#"{"app":"mine"}"#),
        );
        assert_eq!(
            ready(&mut remaining).await,
            [Ok((EventKind::Added, 105, false, "o3".into()))]
        );
        drop(remaining);
        assert_eq!(store.dispatch().status().indexed, 0);
        assert!(store.dispatch().index.read().by_label.is_empty());
    }

    /// Applies `object` (named "o") as a change and checks that the
    /// subscriber receives it as one `kind` event, from one wake-up.
    async fn received_from_one_wakeup(
        store: &Store,
        stream: &mut (impl Stream<Item = Result<Delivery, WatchError>> + Unpin),
        object: Object,
        kind: EventKind,
    ) {
        let rv = object.resource_version.0;
        let woken = store.dispatch().status().wakeups;
        store.apply(EventKind::Modified, object);
        assert_eq!(ready(stream).await, [Ok((kind, rv, false, "o".into()))]);
        assert_eq!(store.dispatch().status().wakeups, woken + 1, "one wake-up");
    }

    /// `app in (a,b)` is registered under both values, with one mark:
    /// events of either wake it (an object moving from one to the other is
    /// one MODIFIED), events of neither cost it nothing, and objects moving
    /// in or out of the set arrive as ADDED or DELETED. With two pinned
    /// labels the one with fewer values is used.
    #[tokio::test(start_paused = true)]
    async fn a_label_set_subscriber_is_woken_by_each_of_its_values_only() {
        let store = empty_store();
        let mut stream = stream_of(
            &store,
            label_watch("tier in (x,y,z),app in (b,a,a)"),
            Limits::default(),
        );
        assert!(ready(&mut stream).await.is_empty());
        assert_eq!(store.dispatch().status().indexed, 1);
        {
            let index = store.dispatch().index.read();
            assert!(!index.by_label.contains_key("tier"), "fewer values win");
            let mut values: Vec<_> = index.by_label["app"].by_value.keys().cloned().collect();
            values.sort();
            assert_eq!(values, ["a", "b"], "each value once");
        }
        let labelled = |rv: u64, app: &str| {
            let labels = format!(r#"{{"app":"{app}","tier":"x"}}"#);
            object_in("ns", "o", rv, &labels)
        };
        let before = counts(&store);
        for rv in 2..=51 {
            store.apply(EventKind::Modified, labelled(rv, "c"));
        }
        assert!(ready(&mut stream).await.is_empty());
        assert_eq!(counts(&store), before, "50 events of app=c: nothing");
        for (rv, app, kind) in [
            (52, "a", EventKind::Added),
            (53, "b", EventKind::Modified),
            (54, "c", EventKind::Deleted),
            (55, "b", EventKind::Added),
        ] {
            received_from_one_wakeup(&store, &mut stream, labelled(rv, app), kind).await;
        }
        drop(stream);
        assert_eq!(store.dispatch().status().indexed, 0);
        assert!(store.dispatch().index.read().by_label.is_empty());
    }

    /// `app` (the label exists, any value) is registered under the label's
    /// presence: events of objects without it cost it nothing, and gaining
    /// the label, changing its value and losing it each wake it once. A
    /// pinned value elsewhere in the selector is preferred; `!tier` alone
    /// requires no label, so it stays unindexed.
    #[tokio::test(start_paused = true)]
    async fn a_label_presence_subscriber_is_woken_only_by_objects_with_the_label() {
        let store = empty_store();
        let mut stream = stream_of(&store, label_watch("app,!tier"), Limits::default());
        let mut others = ["app,tier=x", "!tier"]
            .map(|selector| stream_of(&store, label_watch(selector), Limits::default()));
        assert!(ready(&mut stream).await.is_empty());
        for other in &mut others {
            assert!(ready(other).await.is_empty());
        }
        let status = store.dispatch().status();
        assert_eq!((status.indexed, status.unindexed), (2, 1));
        {
            let index = store.dispatch().index.read();
            assert_eq!(index.by_label["app"].present.len(), 1);
            assert!(index.by_label["app"].by_value.is_empty());
            assert!(index.by_label["tier"].present.is_empty(), "a value wins");
        }
        drop(others);
        let labelled = |rv: u64, labels: &str| object_in("ns", "o", rv, labels);
        let before = counts(&store);
        for rv in 2..=51 {
            store.apply(EventKind::Modified, labelled(rv, r#"{"other":"x"}"#));
        }
        assert!(ready(&mut stream).await.is_empty());
        assert_eq!(counts(&store), before, "50 events without app: nothing");
        for (rv, labels, kind) in [
            (52, r#"{"app":"a"}"#, EventKind::Added),
            (53, r#"{"app":"b"}"#, EventKind::Modified),
            (54, r#"{"other":"x"}"#, EventKind::Deleted),
        ] {
            received_from_one_wakeup(&store, &mut stream, labelled(rv, labels), kind).await;
        }
        drop(stream);
        assert_eq!(store.dispatch().status().indexed, 0);
        assert!(store.dispatch().index.read().by_label.is_empty());
    }

    fn pods() -> ResourceType {
        ResourceType {
            gvr: "v1/pods".parse().unwrap(),
            kind: "Pod".into(),
            namespaced: true,
            fields: SelectableFields::builtin("v1", "Pod").expect("pods have fields"),
        }
    }

    fn pod(name: &str, rv: u64, node: Option<&str>) -> Object {
        let spec = node.map_or(String::new(), |n| format!(r#""nodeName":"{n}""#));
        let raw = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"containers":[{{"name":"c","image":"i"}}],{spec}}}}}"#
        )
        .replace(",}", "}");
        let meta = TypeMeta {
            api_version: "v1".into(),
            kind: "Pod".into(),
        };
        Object::from_json(&raw, &meta, &pods().fields, Transform::default()).unwrap()
    }

    /// A pod that moves onto the node, or off it, concerns the node's
    /// subscribers (by its new value, or its previous one): the filter
    /// then turns the change into ADDED or DELETED.
    #[test]
    fn a_pod_moving_onto_or_off_a_node_marks_that_nodes_interest() {
        let store = Store::new(pods(), 100);
        store.replace(Vec::new(), ResourceVersion(1));
        let node = store
            .dispatch()
            .register([("spec.nodeName", "n1")].into_iter(), std::iter::empty());
        let other = store
            .dispatch()
            .register([("spec.nodeName", "n2")].into_iter(), std::iter::empty());
        assert!(node.is_indexed());
        let mut marks = Vec::new();
        for (kind, at) in [
            (EventKind::Added, None),
            (EventKind::Modified, Some("n1")),
            (EventKind::Modified, Some("n1")),
            (EventKind::Modified, Some("n2")),
            (EventKind::Modified, Some("n2")),
            (EventKind::Deleted, Some("n2")),
        ] {
            let rv = store.head().resource_version.0 + 1;
            store.apply(kind, pod("p", rv, at));
            marks.push((node.take(), other.take()));
        }
        assert_eq!(
            marks,
            [
                (0, 0), // unscheduled
                (2, 0), // onto n1
                (3, 0), // on n1
                (4, 4), // off n1, onto n2
                (0, 5),
                (0, 6),
            ]
        );
        // Only pods have a node name; elsewhere the field is not indexed.
        let configmaps = Store::new(configmaps(), 10);
        let by_node = configmaps
            .dispatch()
            .register([("spec.nodeName", "n1")].into_iter(), std::iter::empty());
        assert!(!by_node.is_indexed());
        assert_eq!(configmaps.dispatch().status().unindexed, 1);
        drop((node, other));
        assert_eq!(store.dispatch().status().indexed, 0);
    }

    fn paths(fields: &[IndexedField]) -> Vec<&str> {
        fields.iter().map(IndexedField::path).collect()
    }

    /// Name first, then a pod's node, then the flag's fields in their
    /// order, then the namespace; aliases and already indexed labels add
    /// nothing; a label the type does not support, or one never set, is
    /// refused with the reason.
    #[test]
    fn the_indexed_fields_of_a_type() {
        let of = |resource: &ResourceType, extra: &[&str]| {
            let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
            IndexedField::for_type(resource, &extra)
        };
        assert_eq!(
            paths(&of(&configmaps(), &[]).unwrap()),
            ["metadata.name", "metadata.namespace"]
        );
        assert_eq!(
            paths(&of(&pods(), &[]).unwrap()),
            ["metadata.name", "spec.nodeName", "metadata.namespace"]
        );
        assert_eq!(
            paths(
                &of(
                    &pods(),
                    &[
                        "status.phase",
                        "spec.host",
                        "metadata.name",
                        "spec.schedulerName"
                    ]
                )
                .unwrap()
            ),
            [
                "metadata.name",
                "spec.nodeName",
                "status.phase",
                "spec.schedulerName",
                "metadata.namespace"
            ]
        );
        let unknown = of(&pods(), &["spec.nope"]).unwrap_err();
        assert_eq!(unknown.gvr, "v1/pods");
        assert!(
            unknown.to_string().starts_with(
                r#"--index-field v1/pods=spec.nope: field label not supported: "spec.nope" (supported: metadata.name"#
            ),
            "{unknown}"
        );
        let never_set = of(&pods(), &["status.podIPs"]).unwrap_err();
        assert!(never_set.reason.contains("never sets it"), "{never_set}");
        assert!(of(&configmaps(), &["data.x"]).is_err());
    }

    #[test]
    fn index_field_flags_parse_as_gvr_equals_field() {
        let flag: IndexFieldFlag = "events.k8s.io/v1/events=regarding.name".parse().unwrap();
        assert_eq!(flag.gvr.to_string(), "events.k8s.io/v1/events");
        assert_eq!(flag.field, "regarding.name");
        assert!(
            "v1/pods"
                .parse::<IndexFieldFlag>()
                .unwrap_err()
                .contains("is not GVR=FIELD")
        );
        assert!("a/b/c/d=x".parse::<IndexFieldFlag>().is_err());
    }

    /// A field indexed by the flag works as the node name does: a
    /// subscriber pinning `spec.schedulerName` is registered under it and
    /// sees a pod move in and out of its scheduler as ADDED and DELETED,
    /// woken only by that pod's events.
    #[tokio::test(start_paused = true)]
    async fn a_flag_indexed_field_wakes_only_its_values_subscribers() {
        let fields = IndexedField::for_type(&pods(), &["spec.schedulerName".into()]).unwrap();
        let store = Arc::new(Store::with_index(pods(), HistoryLimits::default(), fields));
        store.replace(Vec::new(), ResourceVersion(1));
        let with_scheduler = |name: &str, rv: u64, scheduler: &str| {
            let raw = format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"containers":[{{"name":"c","image":"i"}}],"schedulerName":"{scheduler}"}}}}"#
            );
            let meta = TypeMeta {
                api_version: "v1".into(),
                kind: "Pod".into(),
            };
            Object::from_json(&raw, &meta, &pods().fields, Transform::default()).unwrap()
        };
        let mut mine = stream_of(
            &store,
            WatchSpec {
                filter: Filter::new("", "", "spec.schedulerName=mine", &pods().fields).unwrap(),
                ..spec("", Start::At(ResourceVersion(1)), false)
            },
            Limits::default(),
        );
        assert!(ready(&mut mine).await.is_empty());
        assert_eq!(store.dispatch().status().indexed, 1);
        let before = counts(&store);
        for rv in 2..=101 {
            store.apply(
                EventKind::Added,
                with_scheduler(&format!("p{rv}"), rv, "default-scheduler"),
            );
        }
        assert!(ready(&mut mine).await.is_empty());
        assert_eq!(
            counts(&store),
            before,
            "100 other pods: no wake-up, no ring read"
        );
        store.apply(EventKind::Modified, with_scheduler("p2", 102, "mine"));
        store.apply(
            EventKind::Modified,
            with_scheduler("p2", 103, "default-scheduler"),
        );
        assert_eq!(
            ready(&mut mine).await,
            [
                Ok((EventKind::Added, 102, false, "p2".into())),
                Ok((EventKind::Deleted, 103, false, "p2".into())),
            ]
        );
    }

    /// Through the real field selector: a node's subscriber is indexed by
    /// its node and sees a pod arrive and leave as ADDED and DELETED; the
    /// scheduler's `spec.nodeName=` (unscheduled pods) is indexed under ""
    /// and sees the pod until it is bound.
    #[tokio::test(start_paused = true)]
    async fn node_and_unscheduled_subscribers_get_their_transitions_through_the_index() {
        let store = Arc::new(Store::new(pods(), 100));
        store.replace(Vec::new(), ResourceVersion(1));
        let selecting = |selector: &str| WatchSpec {
            filter: Filter::new("", "", selector, &pods().fields).unwrap(),
            ..spec("", Start::At(ResourceVersion(1)), false)
        };
        let mut node = stream_of(&store, selecting("spec.nodeName=n1"), Limits::default());
        let mut unscheduled = stream_of(&store, selecting("spec.nodeName="), Limits::default());
        assert!(ready(&mut node).await.is_empty() && ready(&mut unscheduled).await.is_empty());
        assert_eq!(store.dispatch().status().indexed, 2);
        store.apply(EventKind::Added, pod("p", 2, None));
        store.apply(EventKind::Modified, pod("p", 3, Some("n1")));
        store.apply(EventKind::Modified, pod("p", 4, Some("n2")));
        let kinds = |seen: Vec<_>| -> Vec<(EventKind, u64)> {
            seen.into_iter()
                .map(|d: Result<(EventKind, u64, bool, String), _>| {
                    let (kind, rv, _, _) = d.unwrap();
                    (kind, rv)
                })
                .collect()
        };
        assert_eq!(
            kinds(ready(&mut unscheduled).await),
            [(EventKind::Added, 2), (EventKind::Deleted, 3)]
        );
        assert_eq!(
            kinds(ready(&mut node).await),
            [(EventKind::Added, 3), (EventKind::Deleted, 4)]
        );
    }

    /// Subscribers register (and snapshot) while the writer runs, in two
    /// namespaces: each gets exactly the changes of its namespace after
    /// its snapshot, in ring order, none missed, none twice. Their progress
    /// ticks come every millisecond, so they skip to the head often while
    /// the writer is between its marks and its head.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registrations_racing_the_writer_miss_nothing() {
        // The writer writes at least this many events, and goes on until
        // this many subscribers registered while it wrote (a fast writer
        // once finished before 10 had).
        const EVENTS: u64 = 20_000;
        const SUBSCRIBERS: usize = 12;
        let store = Arc::new(Store::new(configmaps(), 1_000_000));
        store.replace(Vec::new(), ResourceVersion(1));
        let registered = Arc::new(AtomicUsize::new(0));
        let writer = {
            let (store, registered) = (store.clone(), registered.clone());
            std::thread::spawn(move || {
                let mut rv = 1;
                while rv < EVENTS
                    || (registered.load(Ordering::Acquire) < SUBSCRIBERS && rv < 900_000)
                {
                    rv += 1;
                    let ns = ["a", "b", "c"][(rv * 7919 % 3) as usize];
                    let kind = match rv % 5 {
                        0 => EventKind::Deleted,
                        _ => EventKind::Added,
                    };
                    store.apply(kind, cm(ns, &format!("o{}", rv % 13), rv));
                }
                rv
            })
        };
        // The writer's last RV; each namespace's end object comes after it
        // (a at last + 1, b at last + 2), and a subscriber is done once it
        // has followed up to its own namespace's end. A subscriber whose
        // snapshot is taken after a's end but before b's must still wait
        // for b's (its snapshot's bookmark alone is not the end).
        let end = Arc::new(AtomicU64::new(u64::MAX));
        let mut subscribers = Vec::new();
        let mut i = 0;
        while !writer.is_finished() {
            i += 1;
            let ns = ["a", "b"][i % 2];
            let mut stream = Box::pin(watch(
                store.clone(),
                WatchSpec {
                    send_initial_events: true,
                    ..spec(ns, Start::Latest, false)
                },
                Limits {
                    progress_interval: Duration::from_millis(1),
                    ..Limits::default()
                },
            ));
            let end = end.clone();
            let own_end = move |last: u64| last.saturating_add(if ns == "a" { 1 } else { 2 });
            subscribers.push(tokio::spawn(async move {
                let (mut got, mut live) = (Vec::new(), false);
                while let Some(delivery) = stream.next().await {
                    let d = delivery.unwrap();
                    live |= d.kind == EventKind::Bookmark;
                    let done = live && d.resource_version.0 >= own_end(end.load(Ordering::Acquire));
                    got.push((d.kind, d.resource_version.0));
                    if done {
                        break;
                    }
                }
                (ns, got)
            }));
            registered.store(subscribers.len(), Ordering::Release);
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let last = writer.join().unwrap();
        end.store(last, Ordering::Release);
        // The end, in every namespace.
        store.apply(EventKind::Added, cm("a", "end", last + 1));
        store.apply(EventKind::Added, cm("b", "end", last + 2));
        assert!(
            subscribers.len() >= SUBSCRIBERS,
            "{} subscribers registered while the writer wrote",
            subscribers.len()
        );
        let ring = store.read_after(0, usize::MAX).unwrap();
        let mut events = 0;
        for subscriber in subscribers {
            let (ns, got) = tokio::time::timeout(Duration::from_secs(30), subscriber)
                .await
                .expect("every subscriber reached the end")
                .unwrap();
            let end = got
                .iter()
                .position(|(kind, _)| *kind == EventKind::Bookmark)
                .expect("the snapshot's end");
            let snapshot_rv = got[end].1;
            let expected: Vec<_> = ring
                .iter()
                .filter(|e| e.resource_version.0 > snapshot_rv)
                .filter_map(|e| {
                    let o = e.object.as_ref()?;
                    (o.namespace == ns).then_some((e.kind, e.resource_version.0))
                })
                .collect();
            events += expected.len();
            assert_eq!(
                got[end + 1..],
                expected,
                "namespace {ns} from {snapshot_rv}"
            );
        }
        assert!(events > 0, "subscribers got live events");
    }
}
