//! The checker: replays one subscriber's whole life (every connection,
//! every event, every ending) against the truth and reports each broken
//! guarantee of the Watch contract (`proto/.../fanout.proto`):
//!
//! - ordered: RVs never decrease;
//! - unique: no change twice; equal RVs only inside one unit;
//! - atomic: after every delivery that ends a unit (a live event, a
//!   bookmark, a snapshot's end, a re-sync unit's closing bookmark) the
//!   subscriber's state equals the truth's filtered state at that RV;
//! - reliable: every change the truth has after the subscriber's position
//!   that its filter can see is delivered, in order, as the right event
//!   (outside re-sync units, which instead must leave it equal to the truth);
//! - resumable: a resume continues exactly (checked by the above) or fails
//!   with Expired; a resume makes progress; an RV named by a status is not
//!   behind what was delivered;
//! - bookmarkable: after a bookmark at B nothing is delivered at or below B.
//!
//! The subscriber's state is compared with the truth incrementally: the
//! checker keeps the truth's filtered state at the subscriber's position
//! beside the subscriber's own, and the set of keys where they differ.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt,
    sync::Arc,
};

use kube_fanout_proto::{
    ends_initial_events,
    v1::{EventType, WatchEvent},
};
use tonic::Code;

use super::{
    model::{Filter, Key, Obj, bounded},
    subscriber::{Ending, Entry, Life},
    truth::TruthLog,
};

/// A guarantee of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Guarantee {
    /// RVs never decrease.
    Ordered,
    /// No change twice; equal RVs only inside one unit.
    Unique,
    /// The state equals the truth after every unit.
    Atomic,
    /// Nothing visible is missed.
    Reliable,
    /// Resumes continue exactly, make progress, or fail with Expired.
    Resumable,
    /// Nothing at or below a bookmark's RV after it.
    Bookmarkable,
    /// The stream's shape (units, snapshots, statuses) is malformed.
    Protocol,
}

/// One broken guarantee, with what was expected and what came.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The subscriber.
    pub subscriber: usize,
    /// Its filter.
    pub filter: String,
    /// Which guarantee.
    pub guarantee: Guarantee,
    /// Its connection number (1-based) and replica.
    pub connection: usize,
    /// The replica that connection was on.
    pub replica: usize,
    /// The event or ending, summarized.
    pub event: String,
    /// Expected vs actual, bounded.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}: subscriber {} [{}] connection {} on replica {}: {}: {}",
            self.guarantee,
            self.subscriber,
            self.filter,
            self.connection,
            self.replica,
            self.event,
            self.detail
        )
    }
}

/// What one life contained.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Watch calls.
    pub connections: usize,
    /// Watch calls that resumed (no snapshot).
    pub resumes: usize,
    /// Resumes on another replica than the connection before.
    pub failovers: usize,
    /// Finished snapshots.
    pub snapshots: usize,
    /// Finished re-sync units.
    pub resyncs: usize,
    /// Events received.
    pub events: usize,
    /// Streams ended with Expired.
    pub expired: usize,
    /// Hang-ups inside a re-sync unit.
    pub hang_ups_in_unit: usize,
    /// Hang-ups inside a snapshot.
    pub hang_ups_in_snapshot: usize,
    /// Streams ended with RESOURCE_EXHAUSTED.
    pub cut_offs: usize,
    /// Other failures by code (and reason): how many, and the first one's
    /// message, so that a report says what they were.
    pub other_failures: BTreeMap<String, (usize, String)>,
    /// The same life seen per server (by its index in the run's list), so
    /// that a run with tiers can tell its figures by tier.
    pub servers: BTreeMap<usize, OnServer>,
}

/// What happened on one server.
#[derive(Debug, Clone, Default)]
pub struct OnServer {
    /// Watch calls to it.
    pub connections: usize,
    /// Resumes on it, by the server of the connection before.
    pub resumes_from: BTreeMap<usize, usize>,
    /// Finished re-sync units received from it, by their RV.
    pub units: BTreeMap<u64, usize>,
    /// Streams it ended with Expired.
    pub expired: usize,
}

impl OnServer {
    fn add(&mut self, other: &OnServer) {
        self.connections += other.connections;
        self.expired += other.expired;
        for (from, n) in &other.resumes_from {
            *self.resumes_from.entry(*from).or_default() += n;
        }
        for (rv, n) in &other.units {
            *self.units.entry(*rv).or_default() += n;
        }
    }
}

impl Figures {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Figures) {
        self.connections += other.connections;
        self.resumes += other.resumes;
        self.failovers += other.failovers;
        self.snapshots += other.snapshots;
        self.resyncs += other.resyncs;
        self.events += other.events;
        self.expired += other.expired;
        self.hang_ups_in_unit += other.hang_ups_in_unit;
        self.hang_ups_in_snapshot += other.hang_ups_in_snapshot;
        self.cut_offs += other.cut_offs;
        for (code, (n, example)) in &other.other_failures {
            let entry = self
                .other_failures
                .entry(code.clone())
                .or_insert_with(|| (0, example.clone()));
            entry.0 += n;
        }
        for (server, figures) in &other.servers {
            self.servers.entry(*server).or_default().add(figures);
        }
    }

    fn on(&mut self, server: usize) -> &mut OnServer {
        self.servers.entry(server).or_default()
    }
}

/// What a connection is in the middle of.
enum Phase {
    /// Reading a snapshot: the objects so far, by key.
    Snapshot(HashMap<Key, Arc<Obj>>),
    /// Live events.
    Live,
    /// Inside a re-sync unit at this RV: its changes so far.
    Unit(u64, Vec<(EventType, Key, Option<Arc<Obj>>)>),
}

/// One event's kind and object, parsed.
struct Delivery {
    kind: EventType,
    rv: u64,
    resync: bool,
    key: Option<Key>,
    obj: Option<Arc<Obj>>,
}

struct Checker<'a> {
    truth: &'a TruthLog,
    filter: &'a Filter,
    filter_text: String,
    subscriber: usize,
    /// Whether it asked for bookmarks.
    bookmarks: bool,
    /// What the subscriber holds, after its last finished unit.
    held: HashMap<Key, Arc<Obj>>,
    /// The truth's filtered state at `at`.
    expected: HashMap<Key, Arc<Obj>>,
    /// Keys where `held` and `expected` differ.
    diff: BTreeSet<Key>,
    /// The subscriber's resume point (its last finished unit's RV); `None`
    /// before its first snapshot.
    at: Option<u64>,
    /// The first truth change after `at`.
    next_change: usize,
    /// The highest RV delivered.
    last_rv: u64,
    /// The RV of the last change or unit: a later change must be above it.
    last_change_rv: u64,
    /// The highest bookmark RV.
    bookmark: u64,
    /// The diff last reported, so one mismatch is reported once.
    reported_diff: BTreeSet<Key>,
    connection: usize,
    replica: usize,
    violations: Vec<Violation>,
    figures: Figures,
}

/// Checks one subscriber's life against the truth.
pub fn check(truth: &TruthLog, life: &Life) -> (Vec<Violation>, Figures) {
    let mut c = Checker {
        truth,
        filter: &life.filter,
        filter_text: life.filter.to_string(),
        subscriber: life.id,
        bookmarks: life.bookmarks,
        held: HashMap::new(),
        expected: HashMap::new(),
        diff: BTreeSet::new(),
        at: None,
        next_change: 0,
        last_rv: 0,
        last_change_rv: 0,
        bookmark: 0,
        reported_diff: BTreeSet::new(),
        connection: 0,
        replica: 0,
        violations: Vec::new(),
        figures: Figures::default(),
    };
    let mut phase = Phase::Live;
    // Events received on the current connection, and the RV it asked for.
    let mut received = 0;
    let mut asked: Option<u64> = None;
    for entry in &life.entries {
        match entry {
            Entry::Connect {
                replica,
                resource_version,
                snapshot,
                ..
            } => {
                c.connection += 1;
                c.figures.connections += 1;
                c.figures.on(*replica).connections += 1;
                if !*snapshot {
                    c.figures.resumes += 1;
                    if *replica != c.replica && c.connection > 1 {
                        c.figures.failovers += 1;
                    }
                    *c.figures
                        .on(*replica)
                        .resumes_from
                        .entry(c.replica)
                        .or_default() += 1;
                }
                c.replica = *replica;
                received = 0;
                asked = resource_version.parse().ok();
                phase = if *snapshot {
                    Phase::Snapshot(HashMap::new())
                } else {
                    Phase::Live
                };
                if !*snapshot && asked != c.at {
                    c.violation(
                        Guarantee::Protocol,
                        format!("resume from {resource_version:?}"),
                        format!("the harness resumed from a point that is not its last resume point {:?}", c.at),
                    );
                }
            }
            Entry::Event(event) => {
                received += 1;
                c.figures.events += 1;
                phase = c.event(event, phase);
            }
            Entry::End(ending) => {
                c.ending(ending, &phase, received, asked);
                phase = Phase::Live;
            }
        }
    }
    if let Some(reason) = &life.gave_up {
        c.violation(
            Guarantee::Reliable,
            "end of life".into(),
            format!("the subscriber did not reach the final RV: {reason}"),
        );
    }
    (c.violations, c.figures)
}

impl Checker<'_> {
    fn violation(&mut self, guarantee: Guarantee, event: String, detail: String) {
        self.violations.push(Violation {
            subscriber: self.subscriber,
            filter: self.filter_text.clone(),
            guarantee,
            connection: self.connection,
            replica: self.replica,
            event,
            detail: bounded(&detail, 600),
        });
    }

    /// Recomputes whether `key` differs between held and expected.
    fn touch(&mut self, key: &Key) {
        if self.held.get(key) == self.expected.get(key) {
            self.diff.remove(key);
        } else {
            self.diff.insert(key.clone());
        }
    }

    /// Moves the truth to `rv`; with `strict`, every change in between
    /// that the filter sees is reported as missed.
    fn advance(&mut self, rv: u64, strict: bool, what: &str) {
        if self.at.is_some_and(|at| rv < at) || self.at.is_none() {
            // Backwards (already reported) or a first state: rebuild.
            let old: Vec<Key> = self.expected.keys().cloned().collect();
            self.expected = self.truth.state_at(rv, self.filter);
            self.next_change = self.truth.first_after(rv);
            for key in old
                .iter()
                .chain(self.expected.keys().cloned().collect::<Vec<_>>().iter())
            {
                self.touch(key);
            }
            for key in self.held.keys().cloned().collect::<Vec<_>>() {
                self.touch(&key);
            }
            self.at = Some(rv);
            return;
        }
        let mut missed = Vec::new();
        while let Some(change) = self.truth.changes.get(self.next_change) {
            if change.rv > rv {
                break;
            }
            self.next_change += 1;
            let before = self.expected.contains_key(&change.key);
            let after = change
                .object
                .as_ref()
                .and_then(|o| self.filter.view(&change.key, o));
            if strict && (before || after.is_some()) {
                missed.push(format!(
                    "{} {}@{}",
                    expected_kind(before, after.is_some()),
                    change.key,
                    change.rv
                ));
            }
            match after {
                Some(o) => {
                    self.expected.insert(change.key.clone(), o);
                }
                None => {
                    self.expected.remove(&change.key);
                }
            }
            let key = change.key.clone();
            self.touch(&key);
        }
        self.at = Some(rv);
        if !missed.is_empty() {
            self.violation(
                Guarantee::Reliable,
                what.to_owned(),
                format!(
                    "{} change(s) the filter sees were never delivered before it: {}",
                    missed.len(),
                    missed.into_iter().take(8).collect::<Vec<_>>().join(", ")
                ),
            );
        }
    }

    /// Reports a state mismatch (once per distinct set of differing keys).
    fn check_state(&mut self, what: &str, rv: u64) {
        if self.diff.is_empty() {
            self.reported_diff.clear();
            return;
        }
        if self.diff == self.reported_diff {
            return;
        }
        self.reported_diff = self.diff.clone();
        let show = |o: Option<&Arc<Obj>>| o.map_or("absent".to_owned(), |o| o.to_string());
        let details: Vec<String> = self
            .diff
            .iter()
            .take(4)
            .map(|k| {
                format!(
                    "{k}: expected {} / actual {}",
                    show(self.expected.get(k)),
                    show(self.held.get(k))
                )
            })
            .collect();
        self.violation(
            Guarantee::Atomic,
            what.to_owned(),
            format!(
                "state differs from the API server's at RV {rv} in {} object(s): {}",
                self.diff.len(),
                details.join("; ")
            ),
        );
    }

    /// Checks the RV of a change (or unit) against the stream so far.
    fn check_rv(&mut self, what: &str, rv: u64) -> bool {
        let (guarantee, detail) = if rv < self.last_rv {
            (
                Guarantee::Ordered,
                format!("RV went back from {}", self.last_rv),
            )
        } else if rv <= self.bookmark {
            (
                Guarantee::Bookmarkable,
                format!("delivered after a bookmark at {}", self.bookmark),
            )
        } else if rv <= self.last_change_rv {
            (
                Guarantee::Unique,
                format!(
                    "a second change at RV {} outside one unit",
                    self.last_change_rv
                ),
            )
        } else {
            return true;
        };
        self.violation(guarantee, what.to_owned(), detail);
        false
    }

    fn event(&mut self, event: &WatchEvent, phase: Phase) -> Phase {
        let d = match parse(event, self.filter.metadata_only) {
            Ok(d) => d,
            Err(e) => {
                self.violation(Guarantee::Protocol, summary(event), e);
                return phase;
            }
        };
        let what = summary(event);
        match phase {
            Phase::Snapshot(mut objects) => {
                if ends_initial_events(event) {
                    self.end_snapshot(&what, d.rv, objects);
                    return Phase::Live;
                }
                match (d.kind, d.key, d.obj) {
                    (EventType::Added, Some(key), Some(obj)) if !d.resync => {
                        if objects.insert(key.clone(), obj).is_some() {
                            self.violation(
                                Guarantee::Unique,
                                what,
                                "sent twice in one snapshot".into(),
                            );
                        }
                    }
                    _ => self.violation(
                        Guarantee::Protocol,
                        what,
                        "only ADDED events may precede the snapshot's end".into(),
                    ),
                }
                Phase::Snapshot(objects)
            }
            Phase::Unit(l, mut changes) if d.resync => {
                if d.rv != l {
                    self.violation(
                        Guarantee::Unique,
                        what,
                        format!("a re-sync unit at {l} holds an event at another RV"),
                    );
                    return Phase::Unit(l, changes);
                }
                if d.kind == EventType::Bookmark {
                    self.end_unit(&what, l, changes);
                    return Phase::Live;
                }
                changes.push((d.kind, d.key.unwrap_or_else(|| "".into()), d.obj));
                Phase::Unit(l, changes)
            }
            Phase::Unit(l, _) => {
                self.violation(
                    Guarantee::Protocol,
                    what.clone(),
                    format!("an ordinary event inside the unfinished re-sync unit at {l}; the unit is dropped"),
                );
                self.live(&what, d)
            }
            Phase::Live if d.resync => {
                // Checked once, at its start; a unit at a wrong RV is
                // still applied, so that its content is checked too.
                let _reported = self.check_rv(&what, d.rv);
                if d.kind == EventType::Bookmark {
                    self.end_unit(&what, d.rv, Vec::new());
                    return Phase::Live;
                }
                Phase::Unit(
                    d.rv,
                    vec![(d.kind, d.key.unwrap_or_else(|| "".into()), d.obj)],
                )
            }
            Phase::Live => self.live(&what, d),
        }
    }

    /// A live event or bookmark: a unit of its own.
    fn live(&mut self, what: &str, d: Delivery) -> Phase {
        let Some(at) = self.at else {
            self.violation(
                Guarantee::Protocol,
                what.to_owned(),
                "an event before any snapshot".into(),
            );
            return Phase::Live;
        };
        if d.kind == EventType::Bookmark {
            if !self.bookmarks {
                self.violation(
                    Guarantee::Protocol,
                    what.to_owned(),
                    "a bookmark to a subscriber that did not ask for bookmarks".into(),
                );
            }
            if d.rv < self.last_rv {
                self.violation(
                    Guarantee::Ordered,
                    what.to_owned(),
                    format!("bookmark RV went back from {}", self.last_rv),
                );
                return Phase::Live;
            }
            if d.rv > at {
                self.advance(d.rv, true, what);
            }
            self.last_rv = d.rv;
            self.bookmark = self.bookmark.max(d.rv);
            self.check_state(what, d.rv);
            return Phase::Live;
        }
        let (Some(key), Some(obj)) = (d.key, d.obj) else {
            self.violation(Guarantee::Protocol, what.to_owned(), "no object".into());
            return Phase::Live;
        };
        if !self.check_rv(what, d.rv) {
            return Phase::Live;
        }
        self.advance(d.rv - 1, true, what);
        // The truth's change at this RV must be this one, as the filter sees it.
        let expected = self.truth.at(d.rv).map(|change| {
            let before = self.expected.contains_key(&change.key);
            let after = change
                .object
                .as_ref()
                .and_then(|o| self.filter.view(&change.key, o));
            (
                change.key.clone(),
                expected_kind(before, after.is_some()),
                after,
            )
        });
        match &expected {
            None => self.violation(
                Guarantee::Reliable,
                what.to_owned(),
                format!("the API server made no change at RV {}", d.rv),
            ),
            Some((k, kind, after)) => {
                let right_object = match d.kind {
                    EventType::Deleted => true,
                    _ => after.as_deref() == Some(&*obj),
                };
                if *k != key || *kind != d.kind.as_str_name() || !right_object {
                    self.violation(
                        Guarantee::Reliable,
                        what.to_owned(),
                        format!(
                            "expected {kind} {k} ({}), got {:?} {key} ({obj})",
                            after.as_deref().map_or("-".to_owned(), |o| o.to_string()),
                            d.kind
                        ),
                    );
                }
            }
        }
        // Apply the event as the subscriber would.
        let held = self.held.contains_key(&key);
        match d.kind {
            EventType::Added if held => self.violation(
                Guarantee::Unique,
                what.to_owned(),
                "ADDED an object the subscriber already holds".into(),
            ),
            EventType::Modified | EventType::Deleted if !held => self.violation(
                Guarantee::Reliable,
                what.to_owned(),
                format!("{:?} of an object the subscriber does not hold", d.kind),
            ),
            EventType::Modified if self.held.get(&key).is_some_and(|h| **h == *obj) => self
                .violation(
                    Guarantee::Unique,
                    what.to_owned(),
                    "MODIFIED to the state the subscriber already holds".into(),
                ),
            _ => {}
        }
        if d.kind == EventType::Deleted {
            self.held.remove(&key);
        } else {
            self.held.insert(key.clone(), obj);
        }
        self.touch(&key);
        self.advance(d.rv, false, what);
        self.last_rv = d.rv;
        self.last_change_rv = d.rv;
        self.check_state(what, d.rv);
        Phase::Live
    }

    fn end_snapshot(&mut self, what: &str, rv: u64, objects: HashMap<Key, Arc<Obj>>) {
        if rv < self.last_rv {
            self.violation(
                Guarantee::Ordered,
                what.to_owned(),
                format!("a snapshot at {rv} after RV {} was delivered", self.last_rv),
            );
        }
        if rv < self.truth.start_rv {
            self.violation(
                Guarantee::Protocol,
                what.to_owned(),
                format!(
                    "a snapshot older than the truth's start {}",
                    self.truth.start_rv
                ),
            );
            return;
        }
        self.figures.snapshots += 1;
        let old: Vec<Key> = self.held.keys().cloned().collect();
        self.held = objects;
        for key in old {
            self.touch(&key);
        }
        // A snapshot replaces the state: nothing in between is owed.
        self.advance(rv, false, what);
        for key in self.held.keys().cloned().collect::<Vec<_>>() {
            self.touch(&key);
        }
        self.last_rv = self.last_rv.max(rv);
        self.last_change_rv = self.last_change_rv.max(rv);
        self.bookmark = self.bookmark.max(rv);
        self.reported_diff.clear();
        self.check_state(what, rv);
    }

    fn end_unit(&mut self, what: &str, l: u64, changes: Vec<(EventType, Key, Option<Arc<Obj>>)>) {
        if self.at.is_none() {
            self.violation(
                Guarantee::Protocol,
                what.to_owned(),
                "a re-sync unit before any snapshot".into(),
            );
            return;
        }
        self.figures.resyncs += 1;
        *self.figures.on(self.replica).units.entry(l).or_default() += 1;
        let mut seen = BTreeSet::new();
        for (kind, key, obj) in changes {
            if !seen.insert(key.clone()) {
                self.violation(
                    Guarantee::Unique,
                    what.to_owned(),
                    format!("{key} twice in one re-sync unit"),
                );
            }
            let held = self.held.get(&key).cloned();
            let wrong = match (kind, &held, &obj) {
                (EventType::Added, None, Some(_)) => None,
                (EventType::Added, Some(_), _) => Some("ADDED an object it holds"),
                (EventType::Modified, Some(h), Some(o)) if h == o => {
                    Some("MODIFIED to the state it already holds")
                }
                (EventType::Modified, Some(_), Some(_)) => None,
                (EventType::Modified, None, _) => Some("MODIFIED an object it does not hold"),
                (EventType::Deleted, Some(_), _) => None,
                (EventType::Deleted, None, _) => Some("DELETED an object it does not hold"),
                _ => Some("a malformed re-sync event"),
            };
            if let Some(wrong) = wrong {
                self.violation(
                    Guarantee::Unique,
                    what.to_owned(),
                    format!("re-sync unit at {l}: {wrong}: {key}"),
                );
            }
            match (kind, obj) {
                (EventType::Deleted, _) | (_, None) => {
                    self.held.remove(&key);
                }
                (_, Some(o)) => {
                    self.held.insert(key.clone(), o);
                }
            }
            self.touch(&key);
        }
        // What the upstream lost is replaced by the unit: no change in
        // between is owed, but the result must equal the truth at L.
        if self.at.is_some_and(|at| l > at) {
            self.advance(l, false, what);
        }
        self.last_rv = self.last_rv.max(l);
        self.last_change_rv = self.last_change_rv.max(l);
        self.bookmark = self.bookmark.max(l);
        self.check_state(what, l);
    }

    fn ending(&mut self, ending: &Ending, phase: &Phase, received: usize, asked: Option<u64>) {
        if matches!(ending, Ending::HungUp) {
            match phase {
                Phase::Unit(..) => self.figures.hang_ups_in_unit += 1,
                Phase::Snapshot(_) => self.figures.hang_ups_in_snapshot += 1,
                Phase::Live => {}
            }
        }
        let Ending::Failed {
            code,
            reason,
            resource_version,
            message,
        } = ending
        else {
            return;
        };
        let what = format!("{code:?} {reason} rv={resource_version:?}: {message}");
        match code {
            Code::OutOfRange if reason == "Expired" => {
                self.figures.expired += 1;
                self.figures.on(self.replica).expired += 1;
            }
            Code::ResourceExhausted => self.figures.cut_offs += 1,
            other => {
                self.figures
                    .other_failures
                    .entry(format!("{other:?} {reason}").trim_end().to_owned())
                    .or_insert_with(|| (0, bounded(message, 160)))
                    .0 += 1;
            }
        }
        if matches!(
            code,
            Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition
        ) {
            self.violation(
                Guarantee::Protocol,
                what.clone(),
                "a valid request was refused".into(),
            );
        }
        let named = resource_version.filter(|rv| *rv > 0);
        if !matches!(code, Code::ResourceExhausted | Code::Unavailable) {
            return;
        }
        let (Some(at), Some(named)) = (self.at, named) else {
            return;
        };
        if matches!(phase, Phase::Snapshot(_)) {
            return;
        }
        if code == &Code::ResourceExhausted && received == 0 && asked == Some(named) {
            self.violation(
                Guarantee::Resumable,
                what.clone(),
                format!("a resume from {named} was cut off before delivering anything, naming the same RV: no progress"),
            );
        }
        if named < at {
            self.violation(
                Guarantee::Resumable,
                what,
                format!("the status names RV {named}, behind the resume point {at}"),
            );
        } else if named > at {
            // The subscriber resumes from there: a promise that it holds
            // everything up to it.
            self.advance(named, true, &what);
            self.last_rv = self.last_rv.max(named);
            self.bookmark = self.bookmark.max(named);
            self.check_state(&what, named);
        }
    }
}

/// The event a change becomes for a filter, by whether the object passed
/// it before and after.
fn expected_kind(before: bool, after: bool) -> &'static str {
    match (before, after) {
        (false, true) => "ADDED",
        (true, true) => "MODIFIED",
        (true, false) => "DELETED",
        (false, false) => "-",
    }
}

fn parse(event: &WatchEvent, metadata_only: bool) -> Result<Delivery, String> {
    let rv = event
        .resource_version
        .parse()
        .map_err(|_| format!("resourceVersion {:?}", event.resource_version))?;
    let kind = event.r#type();
    let (key, obj) = match kind {
        EventType::Bookmark => (None, None),
        EventType::Added | EventType::Modified | EventType::Deleted => {
            let (k, o) =
                Obj::from_json(&event.object, metadata_only).map_err(|e| format!("{e:#}"))?;
            (Some(k), Some(Arc::new(o)))
        }
        EventType::Unspecified => return Err("an event of no type".into()),
    };
    Ok(Delivery {
        kind,
        rv,
        resync: event.resync,
        key,
        obj,
    })
}

fn summary(event: &WatchEvent) -> String {
    // Whole or metadata-only, the object's key is in its metadata.
    let name = serde_json::from_str::<serde_json::Value>(&event.object)
        .ok()
        .and_then(|o| {
            let meta = &o["metadata"];
            Some(format!(
                "{}/{}",
                meta["namespace"].as_str()?,
                meta["name"].as_str()?
            ))
        })
        .unwrap_or_default();
    format!(
        "{}{} {} at RV {}",
        event.r#type().as_str_name(),
        if event.resync { " (resync)" } else { "" },
        name,
        event.resource_version
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{
        model::{NameTerm, Requirement},
        truth::Change,
    };

    /// A truth: `initial` at RV 10, then `changes` as (rv, name, app label
    /// or None for a deletion).
    fn truth(initial: &[(&str, u64, &str)], changes: &[(u64, &str, Option<&str>)]) -> TruthLog {
        let obj = |rv, app: &str| {
            Arc::new(Obj {
                rv,
                labels: [("app".to_owned(), app.to_owned())].into(),
                data: BTreeMap::new(),
            })
        };
        TruthLog {
            start_rv: 10,
            initial: initial
                .iter()
                .map(|(name, rv, app)| (format!("ns/{name}").into(), obj(*rv, app)))
                .collect(),
            changes: changes
                .iter()
                .map(|(rv, name, app)| Change {
                    rv: *rv,
                    key: format!("ns/{name}").into(),
                    object: app.map(|a| obj(*rv, a)),
                })
                .collect(),
        }
    }

    fn event(kind: EventType, rv: u64, name: &str, object_rv: u64, app: &str) -> Entry {
        Entry::Event(WatchEvent {
            r#type: kind as i32,
            resource_version: rv.to_string(),
            object: serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": "ns", "name": name,
                             "resourceVersion": object_rv.to_string(),
                             "labels": {"app": app}},
            })
            .to_string(),
            resync: false,
            head_resource_version: String::new(),
        })
    }

    fn resync(mut entry: Entry) -> Entry {
        if let Entry::Event(e) = &mut entry {
            e.resync = true;
        }
        entry
    }

    fn bookmark(rv: u64, end: bool, resync: bool) -> Entry {
        let annotations = if end {
            serde_json::json!({"k8s.io/initial-events-end": "true"})
        } else {
            serde_json::json!({})
        };
        Entry::Event(WatchEvent {
            r#type: EventType::Bookmark as i32,
            resource_version: rv.to_string(),
            object: serde_json::json!({"metadata": {"resourceVersion": rv.to_string(), "annotations": annotations}})
                .to_string(),
            resync,
            head_resource_version: String::new(),
        })
    }

    fn connect(replica: usize, rv: &str, snapshot: bool) -> Entry {
        Entry::Connect {
            at: tokio::time::Instant::now(),
            replica,
            resource_version: rv.to_owned(),
            snapshot,
        }
    }

    fn cut_off(rv: u64) -> Entry {
        Entry::End(Ending::Failed {
            code: Code::ResourceExhausted,
            reason: "SubscriberLagged".into(),
            resource_version: Some(rv),
            message: String::new(),
        })
    }

    /// Checks `entries` for a subscriber selecting `app=a` (or everything).
    fn run(truth: &TruthLog, selective: bool, entries: Vec<Entry>) -> Vec<(Guarantee, String)> {
        let filter = Filter {
            requirements: if selective {
                vec![Requirement::Equals("app", "a")]
            } else {
                vec![]
            },
            ..Filter::default()
        };
        run_filtered(truth, filter, entries)
    }

    fn run_filtered(
        truth: &TruthLog,
        filter: Filter,
        entries: Vec<Entry>,
    ) -> Vec<(Guarantee, String)> {
        let life = Life {
            id: 1,
            filter,
            slow: false,
            bookmarks: true,
            compressed: false,
            entries,
            gave_up: None,
        };
        check(truth, &life)
            .0
            .into_iter()
            .map(|v| (v.guarantee, format!("{}: {}", v.event, v.detail)))
            .collect()
    }

    use EventType::{Added, Deleted, Modified};

    /// x at 5, then: y created at 11, x relabelled out of app=a at 12, y
    /// deleted at 13, z created at 14.
    fn history() -> TruthLog {
        truth(
            &[("x", 5, "a")],
            &[
                (11, "y", Some("a")),
                (12, "x", Some("b")),
                (13, "y", None),
                (14, "z", Some("a")),
            ],
        )
    }

    #[test]
    fn an_exact_life_with_snapshot_resumes_cut_offs_and_a_resync_unit_passes() {
        let t = history();
        let v = run(
            &t,
            true,
            vec![
                connect(0, "", true),
                event(Added, 10, "x", 5, "a"),
                bookmark(10, true, false),
                event(Added, 11, "y", 11, "a"),
                Entry::End(Ending::HungUp),
                connect(1, "11", false),
                // x leaves the selector: DELETED with its last state.
                event(Deleted, 12, "x", 5, "a"),
                cut_off(12),
                connect(0, "12", false),
                // A re-sync unit over (12, 14]: y's deletion and z's
                // creation, at 14, applied together; first interrupted.
                resync(event(Deleted, 14, "y", 11, "a")),
                Entry::End(Ending::HungUp),
                connect(0, "12", false),
                resync(event(Deleted, 14, "y", 11, "a")),
                resync(event(Added, 14, "z", 14, "a")),
                bookmark(14, false, true),
                bookmark(20, false, false),
            ],
        );
        assert_eq!(v, []);
    }

    /// A metadata-only subscriber pinned to one name: its state is the
    /// truth's objects of that name without their data. Whole objects, or
    /// an object of another name, are caught.
    #[test]
    fn a_metadata_only_subscriber_pinned_to_a_name_is_held_to_its_view() {
        let mut t = history();
        for change in &mut t.changes {
            if let Some(o) = &mut change.object {
                Arc::make_mut(o).data = [("value".to_owned(), change.rv.to_string())].into();
            }
        }
        let filter = Filter {
            name: Some(NameTerm::Equals("y".into())),
            metadata_only: true,
            ..Filter::default()
        };
        // `event`'s object as the API server's PartialObjectMetadata.
        let partial = |kind: EventType, rv: u64, name: &str, object_rv: u64| {
            let mut entry = event(kind, rv, name, object_rv, "a");
            if let Entry::Event(e) = &mut entry {
                let mut object: serde_json::Value = serde_json::from_str(&e.object).unwrap();
                object["kind"] = "PartialObjectMetadata".into();
                object["apiVersion"] = "meta.k8s.io/v1".into();
                e.object = object.to_string();
            }
            entry
        };
        let life = |third: Entry| {
            vec![
                connect(0, "", true),
                bookmark(10, true, false),
                partial(Added, 11, "y", 11),
                third,
                bookmark(14, false, false),
            ]
        };
        assert_eq!(
            run_filtered(&t, filter.clone(), life(partial(Deleted, 13, "y", 11))),
            []
        );
        let whole = run_filtered(&t, filter.clone(), life(event(Deleted, 13, "y", 11, "a")));
        assert!(
            whole.iter().any(|(g, detail)| *g == Guarantee::Protocol
                && detail.contains("not a PartialObjectMetadata")),
            "{whole:?}"
        );
        let other = run_filtered(&t, filter, life(partial(Modified, 12, "x", 12)));
        assert!(
            other.iter().any(|(g, _)| *g == Guarantee::Reliable),
            "{other:?}"
        );
    }

    #[test]
    fn a_resync_published_as_ordinary_events_is_caught() {
        // What the server did before re-sync units: the difference as
        // ordinary events at the objects' RVs, deletions at L.
        let t = history();
        let v = run(
            &t,
            true,
            vec![
                connect(0, "", true),
                event(Added, 10, "x", 5, "a"),
                bookmark(10, true, false),
                event(Added, 14, "z", 14, "a"),
                event(Deleted, 14, "x", 5, "a"),
            ],
        );
        let kinds: Vec<Guarantee> = v.iter().map(|(g, _)| *g).collect();
        assert!(kinds.contains(&Guarantee::Reliable), "{v:?}");
        assert!(kinds.contains(&Guarantee::Unique), "{v:?}");
    }

    #[test]
    fn what_the_upstream_lost_must_come_as_a_unit_even_an_empty_one() {
        // y lives and dies inside the gap (11..13): nothing of the re-sync
        // at 14 concerns a subscriber at 10 but the unit's end. A plain
        // bookmark at 14 instead claims y's changes were delivered.
        let t = truth(&[("x", 5, "a")], &[(11, "y", Some("a")), (13, "y", None)]);
        let at_ten = || {
            vec![
                connect(0, "", true),
                event(Added, 10, "x", 5, "a"),
                bookmark(10, true, false),
            ]
        };
        let mut closed = at_ten();
        closed.push(bookmark(14, false, true));
        assert_eq!(run(&t, true, closed), []);
        let mut plain = at_ten();
        plain.push(bookmark(14, false, false));
        let v = run(&t, true, plain);
        assert_eq!(
            v.first().map(|(g, _)| *g),
            Some(Guarantee::Reliable),
            "{v:?}"
        );
    }

    #[test]
    fn every_guarantee_can_fail() {
        let t = history();
        let snapshot = || {
            vec![
                connect(0, "", true),
                event(Added, 10, "x", 5, "a"),
                bookmark(10, true, false),
            ]
        };
        let with = |more: Vec<Entry>| {
            let mut e = snapshot();
            e.extend(more);
            run(&t, true, e)
        };
        let first = |v: Vec<(Guarantee, String)>| v.first().map(|(g, _)| *g);

        // Atomic: a snapshot missing an object.
        assert_eq!(
            first(run(
                &t,
                true,
                vec![connect(0, "", true), bookmark(10, true, false)]
            )),
            Some(Guarantee::Atomic)
        );
        // Reliable: y's creation (11) missed before x's transition (12).
        assert_eq!(
            first(with(vec![event(Deleted, 12, "x", 5, "a")])),
            Some(Guarantee::Reliable)
        );
        // Ordered: back to 11 after 12.
        assert_eq!(
            first(with(vec![
                event(Added, 11, "y", 11, "a"),
                event(Deleted, 12, "x", 5, "a"),
                event(Added, 11, "y", 11, "a"),
            ])),
            Some(Guarantee::Ordered)
        );
        // Unique: the same change twice.
        assert_eq!(
            first(with(vec![
                event(Added, 11, "y", 11, "a"),
                event(Added, 11, "y", 11, "a"),
            ])),
            Some(Guarantee::Unique)
        );
        // Bookmarkable: a change at or below a bookmark's RV.
        assert_eq!(
            first(with(vec![
                bookmark(11, false, false),
                event(Added, 11, "y", 11, "a")
            ])),
            // The bookmark at 11 itself already skipped y's creation.
            Some(Guarantee::Reliable)
        );
        assert_eq!(
            first(with(vec![
                event(Added, 11, "y", 11, "a"),
                event(Deleted, 12, "x", 5, "a"),
                bookmark(12, false, false),
                event(Deleted, 12, "x", 5, "a"),
            ])),
            Some(Guarantee::Bookmarkable)
        );
        // Resumable: cut off at once, naming the same RV.
        assert_eq!(
            first(with(vec![
                Entry::End(Ending::HungUp),
                connect(0, "10", false),
                cut_off(10),
            ])),
            Some(Guarantee::Resumable)
        );
        // A re-sync unit that leaves the subscriber unequal to the truth
        // at its RV (z missing).
        assert_eq!(
            first(with(vec![
                event(Added, 11, "y", 11, "a"),
                event(Deleted, 12, "x", 5, "a"),
                resync(event(Deleted, 14, "y", 11, "a")),
                bookmark(14, false, true),
            ])),
            Some(Guarantee::Atomic)
        );
        // A re-sync unit repeating an object the subscriber already holds
        // unchanged (a relist must compare semantically).
        assert_eq!(
            first(with(vec![
                resync(event(Modified, 11, "x", 5, "a")),
                bookmark(11, false, true),
            ])),
            Some(Guarantee::Unique)
        );
        // A unit's RV shared with an earlier change.
        assert_eq!(
            first(with(vec![
                event(Added, 11, "y", 11, "a"),
                resync(event(Deleted, 11, "x", 5, "a")),
            ])),
            Some(Guarantee::Unique)
        );
        // Resuming from a point inside an unfinished unit is a harness bug.
        assert_eq!(
            first(with(vec![
                resync(event(Deleted, 14, "y", 11, "a")),
                Entry::End(Ending::HungUp),
                connect(0, "14", false),
            ])),
            Some(Guarantee::Protocol)
        );
    }
}
