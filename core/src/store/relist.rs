//! The relist difference: what a LIST changes against the store's
//! contents, compared on up to [`RELIST_THREADS`] threads for a large list,
//! and the freeing of its unchanged copies on a thread of the lowest
//! priority.

use std::{collections::HashSet, sync::Arc};

use dashmap::DashMap;

use super::probes::Probes;
use crate::{event::EventKind, object::Object};

/// The most threads a relist's comparison is split over.
pub(super) const RELIST_THREADS: usize = 4;

/// The smallest list whose comparison is split over threads: below it a
/// thread's start costs more than it saves.
pub(super) const RELIST_PARALLEL_FROM: usize = 8192;

/// One change of a relist's difference: the kind, the new (or, for a
/// deletion, last) state and the state it replaces.
pub(super) type Change = (EventKind, Arc<Object>, Option<Arc<Object>>);

/// Frees a relist's unchanged copies (most of a large relist) on a thread
/// of their own: freeing 100,000 objects costs about as much as finding
/// them unchanged, and the writer, behind which live events queue, has
/// better things to do. Relists are rare, so a thread each is cheap; if
/// none can be had, the caller frees them.
pub(super) fn free_elsewhere(garbage: Vec<Object>) {
    if garbage.is_empty() {
        return;
    }
    let span = tracing::debug_span!("free_relist", objects = garbage.len());
    let spawned = std::thread::Builder::new()
        .name("free-relist".into())
        .spawn(move || {
            span.in_scope(|| {
                lower_this_threads_priority();
                drop(garbage)
            })
        });
    // Without a thread the closure, objects and all, is dropped here.
    if let Err(err) = spawned {
        tracing::debug!(error = %err, "freed a relist's copies on the writer");
    }
}

/// Gives the calling thread the lowest CPU priority (nice 19). Freeing a
/// relist's copies (a 100,000-object list: tens of milliseconds) is
/// needed by nobody soon, while the unit it follows is being written to
/// every subscriber at that moment; at nice 19 the freeing gets about 1.5 %
/// of a core the subscribers' tasks want and all of an idle one. On Linux
/// a nice value belongs to a thread, so only this one is lowered; where it
/// cannot be (other systems, or a refused call) the thread runs as it is.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    if let Err(err) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), LOWEST_PRIORITY)
    {
        tracing::debug!(error = %err, "could not lower the freeing thread's priority");
    }
}

/// The highest nice value: the lowest priority a thread can be given.
#[cfg(target_os = "linux")]
const LOWEST_PRIORITY: i32 = 19;

/// A listed object that differs from the store: its index in the list,
/// and the state it replaces (none: the store does not hold it).
type Changed = (usize, Option<Arc<Object>>);

/// What a relist to `listed` changes. One lookup in the map per listed
/// object (its resourceVersion and digest compared, see
/// [`Object::same_state`]), and an allocation only for an object that
/// changed; the listed keys are indexed only when the lookups found
/// fewer objects than the store holds, that is when something was
/// deleted. This relies on a LIST naming each key once, as the API
/// server's does (one etcd key per namespace and name). The map is read
/// one shard lock at a time; the reflector, the only writer, is the
/// caller, so nothing changes underneath.
///
/// Returns the changes, and the listed objects that are unchanged (for
/// the caller to free once the changes are out).
pub(super) fn difference(
    objects: &DashMap<String, Arc<Object>>,
    listed: Vec<Object>,
    probes: &Probes,
) -> (Vec<Change>, Vec<Object>) {
    let (changed, found) = changed(objects, &listed, probes);
    let mut changes: Vec<Change> = Vec::with_capacity(changed.len());
    if found < objects.len() {
        let keys: HashSet<&str> = listed.iter().map(|o| o.key.as_str()).collect();
        for entry in objects.iter() {
            if !keys.contains(entry.key().as_str()) {
                let old = entry.value();
                changes.push((EventKind::Deleted, old.clone(), Some(old.clone())));
            }
        }
    }
    // The changed objects are taken out from the highest index down, so
    // each `swap_remove` fills its hole with an unchanged object (every
    // changed one above it is already out) and what is left is exactly
    // the unchanged ones: O(changes) moves, not one per listed object.
    let mut unchanged = listed;
    for (index, old) in changed.into_iter().rev() {
        let new = Arc::new(unchanged.swap_remove(index));
        changes.push(match old {
            Some(old) => (EventKind::Modified, new, Some(old)),
            None => (EventKind::Added, new, None),
        });
    }
    (changes, unchanged)
}

/// The listed objects that changed, by index in ascending order, each
/// with the state it replaces (none: it is new), and how many listed
/// objects the store holds. The lookups are independent reads of the
/// map, and a large list's are split over the machine's cores (at most
/// [`RELIST_THREADS`]): each lookup waits on memory (the map's bucket,
/// the stored object), and live events queue behind the relist's
/// writer meanwhile, while the subscribers' tasks, with nothing new to
/// send, leave the other cores idle.
fn changed(
    objects: &DashMap<String, Arc<Object>>,
    listed: &[Object],
    probes: &Probes,
) -> (Vec<Changed>, usize) {
    // The core count is read (from the cgroup's files, on Linux) only
    // for a list large enough to split.
    let threads = if listed.len() < RELIST_PARALLEL_FROM {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(RELIST_THREADS)
    };
    if threads == 1 {
        probes.compared_on(1);
        return changed_in(objects, listed, 0);
    }
    let span = tracing::Span::current();
    let size = listed.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let mut parts = listed.chunks(size).enumerate();
        let mine = parts.next().map_or(&[][..], |(_, part)| part);
        let others: Vec<_> = parts
            .map(|(i, part)| {
                let span = span.clone();
                let offset = i * size;
                let spawned = std::thread::Builder::new()
                    .name("relist-diff".into())
                    .spawn_scoped(scope, move || {
                        span.in_scope(|| changed_in(objects, part, offset))
                    });
                // Without a thread, this part is compared here, after
                // this thread's own.
                spawned.map_err(|_| (part, offset))
            })
            .collect();
        probes.compared_on(1 + others.iter().filter(|o| o.is_ok()).count());
        let (mut changed, mut found) = changed_in(objects, mine, 0);
        for other in others {
            let (part_changed, part_found) = match other {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err((part, offset)) => changed_in(objects, part, offset),
            };
            changed.extend(part_changed);
            found += part_found;
        }
        (changed, found)
    })
}

/// [`changed`] of `listed`, on this thread; its indices start at
/// `offset`.
fn changed_in(
    objects: &DashMap<String, Arc<Object>>,
    listed: &[Object],
    offset: usize,
) -> (Vec<Changed>, usize) {
    let mut changed = Vec::new();
    let mut found = 0;
    for (i, new) in listed.iter().enumerate() {
        match objects.get(&new.key) {
            Some(old) => {
                found += 1;
                if !new.same_state(&old) {
                    changed.push((offset + i, Some(old.clone())));
                }
            }
            None => changed.push((offset + i, None)),
        }
    }
    (changed, found)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::{
        fixtures::{configmaps, object, seen},
        object::{ResourceVersion, Transform, TypeMeta},
        store::Store,
    };

    /// A list large enough to be compared on several threads: changes on
    /// both sides of every split (for two, three and four threads), new
    /// objects among the listed ones and deleted ones, all in the unit, and
    /// nothing else; what comes back to be freed is exactly the rest.
    #[test]
    fn a_list_compared_on_several_threads_yields_exactly_its_changes() {
        let n = 3 * RELIST_PARALLEL_FROM;
        let name = |i: usize| format!("o{i:06}");
        let store = Store::new(configmaps(), 100);
        store.replace(
            (0..n).map(|i| object(&name(i), 1, "{}")).collect(),
            ResourceVersion(1),
        );
        let mut modified = BTreeSet::new();
        for split in [n / 4, n / 3, n / 2, 2 * n / 3, 3 * n / 4] {
            modified.extend([split - 1, split, split + 1]);
        }
        modified.extend([0, n - 1]);
        let deleted = BTreeSet::from([5, n / 2 + 7, n - 2]);
        let mut listed = Vec::new();
        for i in (0..n).filter(|i| !deleted.contains(i)) {
            let rv = if modified.contains(&i) { 2 } else { 1 };
            listed.push(object(&name(i), rv, "{}"));
            if i == n / 3 {
                listed.push(object("added-in-the-middle", 2, "{}"));
            }
        }
        listed.push(object("added-at-the-end", 2, "{}"));
        let listed_count = listed.len();

        let (changes, unchanged) = difference(&store.objects, listed, store.probes());
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(
            store.probes().comparison_threads(),
            cores.min(RELIST_THREADS),
            "compared on every core, at most {RELIST_THREADS}"
        );

        use EventKind::*;
        let mut expected: BTreeMap<String, EventKind> = modified
            .iter()
            .map(|&i| (name(i), Modified))
            .chain(deleted.iter().map(|&i| (name(i), Deleted)))
            .collect();
        expected.insert("added-in-the-middle".into(), Added);
        expected.insert("added-at-the-end".into(), Added);
        let found: BTreeMap<String, EventKind> = changes
            .iter()
            .map(|(kind, object, _)| (object.name.clone(), *kind))
            .collect();
        assert_eq!(found, expected);
        assert_eq!(changes.len(), expected.len(), "no change twice");
        for (kind, object, previous) in &changes {
            let previous_rv = previous.as_ref().map(|p| p.resource_version.0);
            match kind {
                Modified => assert_eq!(
                    (object.resource_version.0, previous_rv),
                    (2, Some(1)),
                    "{} replaces its own state",
                    object.name
                ),
                Added => assert_eq!(previous_rv, None, "{} is new", object.name),
                _ => assert_eq!(previous_rv, Some(1), "{} was held", object.name),
            }
        }
        assert_eq!(unchanged.len(), listed_count - modified.len() - 2);
        assert!(
            unchanged
                .iter()
                .all(|o| o.resource_version.0 == 1 && o.name.starts_with('o')),
            "only unchanged objects are left to free"
        );
        let unchanged_names: BTreeSet<&str> = unchanged.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(unchanged_names.len(), unchanged.len(), "none twice");
    }

    /// A relist's copies are freed at the lowest priority, on their own
    /// thread: the caller's thread keeps its own.
    #[cfg(target_os = "linux")]
    #[test]
    fn freeing_lowers_only_its_own_threads_priority() {
        use rustix::{process::getpriority_process, thread::gettid};
        let before = getpriority_process(Some(gettid())).unwrap();
        assert_ne!(
            before, LOWEST_PRIORITY,
            "tests run above the lowest priority"
        );
        let lowered = std::thread::spawn(|| {
            lower_this_threads_priority();
            getpriority_process(Some(gettid())).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, LOWEST_PRIORITY);
        assert_eq!(getpriority_process(Some(gettid())).unwrap(), before);
    }

    #[test]
    fn an_unchanged_object_yields_nothing_whatever_its_key_order() {
        let store = Store::new(configmaps(), 100);
        let meta = TypeMeta {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let parse = |raw: &str| {
            Object::from_json(
                raw,
                &meta,
                &crate::fields::SelectableFields::default(),
                Transform::default(),
            )
            .unwrap()
        };
        // As a watch event sent it, and as a list re-encoded it.
        let watched = parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"4"},"data":{"z":"1","a":"2"}}"#,
        );
        let listed = parse(
            r#"{"data":{"a":"2","z":"1"},"kind":"ConfigMap","metadata":{"namespace":"ns","resourceVersion":"4","name":"a"},"apiVersion":"v1"}"#,
        );
        assert_ne!(watched.json, listed.json);
        store.replace(Vec::new(), ResourceVersion(3));
        store.apply(EventKind::Added, watched);
        let seq = store.head().seq;
        store.replace(vec![listed], ResourceVersion(4));
        assert_eq!(
            store.head().seq,
            seq,
            "nothing changed, so nothing is published"
        );
        // The same RV with other contents is a change (an etcd restore).
        let other = parse(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"4"},"data":{"a":"3"}}"#,
        );
        store.replace(vec![other], ResourceVersion(5));
        let events = store.read_after(seq, 10).unwrap();
        assert_eq!(seen(&events)[0], (EventKind::Modified, "a", 5, true));
    }
}
