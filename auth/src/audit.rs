//! The audit log: one JSON line per access decision the API server was
//! asked for (each SubjectAccessReview made, never a cached answer: the
//! review is the decision, and a cached answer repeats one already logged)
//! and one per watch stream end, in the spirit of the API server's own
//! audit events (`audit.k8s.io/v1` Event) and levels ([`AuditLevel`]).
//!
//! A line names the user (name, UID, groups, extra), the verb, the object
//! (group, version, resource, namespace, name) or non-resource URL, the
//! decision and the authorizer's reason, the client's address and when;
//! at [`AuditLevel::Request`] also what the request asked beyond that
//! (selectors, resourceVersion, options). Never a credential: no token
//! ever reaches this module (an [`Identity`] holds none), and never object
//! data.
//!
//! Writing never holds up a request: lines go through a bounded queue to
//! one writer task ([`AuditWriter`]), and past the rate bound (a token
//! bucket of `--audit-max-lines-per-second`, its burst one second of it)
//! or a full queue a line is dropped and counted
//! (`kube_fanout_audit_lines_total{outcome="dropped"}`); the next line let
//! through is preceded by one summary line saying how many were dropped
//! (at most one summary a second), so the log can never grow faster than
//! the bound, however many decisions a flood of callers causes.

use std::{
    borrow::Cow,
    collections::BTreeMap,
    fmt,
    net::IpAddr,
    num::NonZeroU32,
    str::FromStr,
    sync::{Arc, Mutex},
    time::Duration,
};

use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use serde::Serialize;
use tokio::{
    io::{AsyncWrite, AsyncWriteExt, BufWriter},
    sync::mpsc,
    time::Instant,
};
use tonic::{Code, Status};

use k8s_openapi::jiff;

use super::{Attributes, Identity, reviews::NonResourceAttributes};

/// The `apiVersion` of every line: its schema (docs/security.md, "Audit log").
pub const API_VERSION: &str = "audit.kube-fanout.io/v1";

/// Lines queued for the writer at most; past it lines are dropped, so a
/// stalled destination costs at most this many lines of memory.
const QUEUE_LINES: usize = 4096;

/// The least time between two summaries of dropped lines.
const SUMMARY_INTERVAL: Duration = Duration::from_secs(1);

/// After the server is told to stop, how long the writer waits for one
/// more line (the stream ends of the watches the shutdown ends) before it
/// stops too.
const STOP_GRACE: Duration = Duration::from_millis(250);

/// The most characters of a reason or status message a line quotes
/// (kube-fanout's own messages, which quote callers' input with a bound
/// already, and the authorizer's reasons stay well under it).
const MESSAGE_LIMIT: usize = 1024;

/// How much an audit line says, as the API server's audit policy levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuditLevel {
    /// No audit log (the default).
    #[default]
    None,
    /// Who asked for what, the decision and its reason, from where and
    /// when.
    Metadata,
    /// [`AuditLevel::Metadata`] and what the request asked beyond its
    /// verb and object: selectors, resourceVersion, options.
    Request,
}

impl AuditLevel {
    /// The level as the API server's audit policy spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditLevel::None => "None",
            AuditLevel::Metadata => "Metadata",
            AuditLevel::Request => "Request",
        }
    }
}

impl fmt::Display for AuditLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str().to_ascii_lowercase())
    }
}

impl FromStr for AuditLevel {
    type Err = String;

    /// `none`, `metadata` or `request`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(AuditLevel::None),
            "metadata" => Ok(AuditLevel::Metadata),
            "request" => Ok(AuditLevel::Request),
            _ => Err(format!(
                "{} is not an audit level: none, metadata or request",
                kube_fanout_core::quote::quote(s)
            )),
        }
    }
}

/// What a request asked beyond its verb and object, logged at
/// [`AuditLevel::Request`]. Empty fields are left out of the line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestOptions {
    /// The label selector.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
    /// The field selector.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field_selector: String,
    /// The resourceVersion asked for.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// A List's page size.
    #[serde(skip_serializing_if = "is_zero")]
    pub limit: u32,
    /// A List's continue token (a position in the cache, no credential).
    #[serde(rename = "continue", skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
    /// A Watch asked for its initial events.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub send_initial_events: bool,
    /// A Watch asked for bookmarks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_bookmarks: bool,
    /// Only the objects' metadata asked for.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub metadata_only: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One request as its audit lines name it: the ID its lines share (a
/// watch's decision, its re-checks and its end), when it came and from
/// where.
#[derive(Debug, Clone)]
pub struct RequestAudit {
    id: Arc<str>,
    received: Timestamp,
    started: Instant,
    source: Option<IpAddr>,
    /// Kept at [`AuditLevel::Request`] only.
    options: Option<Arc<RequestOptions>>,
    /// A re-check of an open watch's permission, not the request's own.
    recheck: bool,
}

impl RequestAudit {
    /// The same request, for the re-checks of its open watch.
    pub(crate) fn recheck(&self) -> Self {
        RequestAudit {
            recheck: true,
            ..self.clone()
        }
    }
}

/// What a decision is about.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// A resource (Get, List, Watch).
    Resource(&'a Attributes),
    /// A non-resource URL (`/metrics`).
    NonResource(&'a NonResourceAttributes),
}

/// What the API server answered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Decision<'a> {
    /// Allowed, for this reason.
    Allow(&'a str),
    /// Denied, for this reason.
    Deny(&'a str),
    /// No answer (fail closed): why.
    Error(&'a super::AuthError),
}

/// The audit log's writer end, or nothing when it is off. Cheap to clone.
#[derive(Clone, Default)]
pub struct AuditLog {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    level: AuditLevel,
    bound: Mutex<Bound>,
    queue: mpsc::Sender<Queued>,
    counters: AuditCounters,
}

impl fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditLog")
            .field("level", &self.level())
            .finish_non_exhaustive()
    }
}

/// A line for the writer: an event, or the summary of dropped ones
/// (not counted as written).
#[derive(Debug)]
enum Queued {
    Event(String),
    Summary(String),
}

/// The token bucket, and what was dropped since the last summary.
#[derive(Debug)]
struct Bound {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
    dropped: u64,
    summarized: Option<Instant>,
}

impl Bound {
    fn new(per_second: NonZeroU32) -> Self {
        let rate = f64::from(per_second.get());
        Bound {
            rate,
            burst: rate,
            tokens: rate,
            at: Instant::now(),
            dropped: 0,
            summarized: None,
        }
    }

    /// A line let through now, if the bucket has a token for it.
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How many lines to report dropped before the one let through now:
    /// all since the last summary, if that was at least
    /// [`SUMMARY_INTERVAL`] ago.
    fn summary(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .summarized
            .is_none_or(|at| now.saturating_duration_since(at) >= SUMMARY_INTERVAL);
        if self.dropped == 0 || !due {
            return None;
        }
        self.summarized = Some(now);
        Some(std::mem::take(&mut self.dropped))
    }
}

impl AuditLog {
    /// No audit log.
    pub fn off() -> Self {
        AuditLog::default()
    }

    /// An audit log at `level` (off at [`AuditLevel::None`]) of at most
    /// `max_lines_per_second` lines (bursts of as many), and the writer
    /// that writes its lines out.
    pub fn new(level: AuditLevel, max_lines_per_second: NonZeroU32) -> (Self, AuditWriter) {
        let (queue, lines) = mpsc::channel(QUEUE_LINES);
        let counters = AuditCounters::default();
        let log = (level != AuditLevel::None).then(|| {
            Arc::new(Inner {
                level,
                bound: Mutex::new(Bound::new(max_lines_per_second)),
                queue,
                counters: counters.clone(),
            })
        });
        (AuditLog { inner: log }, AuditWriter { lines, counters })
    }

    /// The level lines are written at.
    pub fn level(&self) -> AuditLevel {
        self.inner.as_ref().map_or(AuditLevel::None, |i| i.level)
    }

    /// What it counts, for the metrics registry.
    pub fn counters(&self) -> Option<&AuditCounters> {
        self.inner.as_ref().map(|i| &i.counters)
    }

    /// The audit context of a request just received from `source`, with
    /// `options` (asked for only at [`AuditLevel::Request`]); `None` when
    /// the log is off.
    pub fn request(
        &self,
        source: Option<IpAddr>,
        options: impl FnOnce() -> RequestOptions,
    ) -> Option<RequestAudit> {
        let inner = self.inner.as_ref()?;
        Some(RequestAudit {
            id: audit_id().into(),
            received: Timestamp::now(),
            started: Instant::now(),
            source,
            options: (inner.level == AuditLevel::Request).then(|| Arc::new(options())),
            recheck: false,
        })
    }

    /// Logs a decision the API server was asked for.
    pub(crate) fn decision(
        &self,
        request: &RequestAudit,
        identity: &Identity,
        target: Target<'_>,
        decision: Decision<'_>,
    ) {
        let (decision, reason) = match decision {
            Decision::Allow(reason) => ("allow", Cow::Borrowed(reason)),
            Decision::Deny(reason) => ("deny", Cow::Borrowed(reason)),
            Decision::Error(why) => ("error", Cow::Owned(why.to_string())),
        };
        let reason = cut(&reason, MESSAGE_LIMIT);
        self.write(|level| {
            line(
                level,
                "Decision",
                request,
                identity,
                target,
                Stage::Decision { decision, reason },
            )
        });
    }

    /// Builds the line `build` makes at the log's level, if the rate bound
    /// lets one through now, and queues it; otherwise counts it dropped.
    fn write(&self, build: impl FnOnce(AuditLevel) -> String) {
        let Some(inner) = &self.inner else { return };
        let now = Instant::now();
        let summary = {
            let mut bound = inner.bound.lock().unwrap_or_else(|e| e.into_inner());
            if !bound.take(now) {
                bound.dropped += 1;
                drop(bound);
                inner.counters.dropped();
                return;
            }
            bound.summary(now)
        };
        if let Some(dropped) = summary
            && inner
                .queue
                .try_send(Queued::Summary(summary_line(dropped)))
                .is_err()
        {
            // Not reported after all: reported with the next summary.
            inner.lost(dropped);
        }
        if inner
            .queue
            .try_send(Queued::Event(build(inner.level)))
            .is_err()
        {
            inner.counters.dropped();
            inner.lost(1);
        }
    }
}

impl Inner {
    /// `lines` that will not be written after all, for the next summary.
    fn lost(&self, lines: u64) {
        let mut bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        bound.dropped += lines;
    }
}

/// A watch's end, logged when its stream is dropped: with the status it
/// ended with (none: its client cancelled it or went away), what it
/// delivered, and how long it was open.
#[derive(Debug)]
pub struct StreamAudit {
    log: AuditLog,
    request: RequestAudit,
    identity: Identity,
    attributes: Attributes,
    events: u64,
    bytes: u64,
    status: Option<(Code, String)>,
}

impl StreamAudit {
    pub(crate) fn new(
        log: AuditLog,
        request: RequestAudit,
        identity: Identity,
        attributes: Attributes,
    ) -> Self {
        StreamAudit {
            log,
            request,
            identity,
            attributes,
            events: 0,
            bytes: 0,
            status: None,
        }
    }

    /// Counts an item of the stream: `size(item)` events and bytes, or the
    /// status the stream ends with.
    pub fn observe<T>(&mut self, item: &Result<T, Status>, size: impl FnOnce(&T) -> (u64, u64)) {
        match item {
            Ok(item) => {
                let (events, bytes) = size(item);
                self.events += events;
                self.bytes += bytes;
            }
            Err(status) if self.status.is_none() => {
                self.status = Some((status.code(), status.message().to_owned()));
            }
            Err(_) => {}
        }
    }
}

impl Drop for StreamAudit {
    fn drop(&mut self) {
        let (code, message) = self.status.take().unwrap_or_else(|| {
            (
                Code::Cancelled,
                "the stream ended without a status from kube-fanout: its client cancelled it or went away".to_owned(),
            )
        });
        let end = Stage::StreamEnd {
            response_status: ResponseStatus {
                code: code as i32,
                status: code_name(code),
                message: cut(&message, MESSAGE_LIMIT),
            },
            events: self.events,
            bytes: self.bytes,
            duration_seconds: self.request.started.elapsed().as_secs_f64(),
        };
        let (request, identity, attributes) = (&self.request, &self.identity, &self.attributes);
        self.log.write(|level| {
            line(
                level,
                "StreamEnd",
                request,
                identity,
                Target::Resource(attributes),
                end,
            )
        });
    }
}

/// Writes the queued lines to a destination, one task for the whole log.
#[derive(Debug)]
pub struct AuditWriter {
    lines: mpsc::Receiver<Queued>,
    counters: AuditCounters,
}

impl AuditWriter {
    /// Writes every line to `sink` (flushed as soon as no other is
    /// waiting), until every [`AuditLog`] is dropped, or `stop` resolves
    /// and no line came for a moment after. Lines are counted written once
    /// flushed; a write that fails loses what was not flushed (counted
    /// dropped, logged once until writes succeed again): like the API
    /// server's log backend, the audit log never stops kube-fanout.
    pub async fn run<W: AsyncWrite + Unpin>(mut self, sink: W, stop: impl Future<Output = ()>) {
        let mut sink = BufWriter::new(sink);
        let mut failing = false;
        // Events written into the buffer and not yet flushed.
        let mut unflushed = 0;
        tokio::pin!(stop);
        let mut stopping = false;
        loop {
            let next = if stopping {
                tokio::time::timeout(STOP_GRACE, self.lines.recv())
                    .await
                    .unwrap_or(None)
            } else {
                tokio::select! {
                    next = self.lines.recv() => next,
                    () = &mut stop => {
                        stopping = true;
                        continue;
                    }
                }
            };
            let Some(queued) = next else { break };
            let (text, event) = match queued {
                Queued::Event(text) => (text, 1),
                Queued::Summary(text) => (text, 0),
            };
            unflushed += event;
            let written = match sink.write_all(text.as_bytes()).await {
                Ok(()) if self.lines.is_empty() => sink.flush().await.map(|()| true),
                Ok(()) => Ok(false),
                Err(err) => Err(err),
            };
            match written {
                Ok(false) => {}
                Ok(true) => {
                    self.counters.written(std::mem::take(&mut unflushed));
                    failing = false;
                }
                Err(err) => {
                    self.counters.dropped_n(std::mem::take(&mut unflushed));
                    if !failing {
                        tracing::warn!(error = %err, "cannot write the audit log: lines are lost until a write succeeds");
                    }
                    failing = true;
                }
            }
        }
        match sink.flush().await {
            Ok(()) => self.counters.written(unflushed),
            Err(err) => {
                self.counters.dropped_n(unflushed);
                tracing::warn!(error = %err, "cannot write the audit log's last lines");
            }
        }
    }
}

/// The audit log's counters.
#[derive(Debug, Clone, Default)]
pub struct AuditCounters {
    lines: Family<[(&'static str, &'static str); 1], Counter>,
}

impl AuditCounters {
    fn written(&self, lines: u64) {
        self.lines
            .get_or_create(&[("outcome", "written")])
            .inc_by(lines);
    }

    fn dropped(&self) {
        self.dropped_n(1);
    }

    fn dropped_n(&self, lines: u64) {
        self.lines
            .get_or_create(&[("outcome", "dropped")])
            .inc_by(lines);
    }

    /// Adds the counters to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        // Both outcomes from the start, so a graph of drops starts at 0.
        for outcome in ["written", "dropped"] {
            let _ = self.lines.get_or_create(&[("outcome", outcome)]);
        }
        registry.register(
            "kube_fanout_audit_lines",
            "Audit log events (decisions and stream ends; not the summaries of drops) by outcome: written, or dropped (over --audit-max-lines-per-second, the writer's queue full, or a write failed).",
            self.lines.clone(),
        );
    }
}

/// Where a line is in a request's life.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(untagged)]
enum Stage<'a> {
    Decision {
        decision: &'static str,
        reason: &'a str,
    },
    StreamEnd {
        #[serde(rename = "responseStatus")]
        response_status: ResponseStatus<'a>,
        events: u64,
        bytes: u64,
        #[serde(rename = "durationSeconds")]
        duration_seconds: f64,
    },
}

/// The status a stream ended with.
#[derive(Debug, Clone, Copy, Serialize)]
struct ResponseStatus<'a> {
    /// The gRPC code's number.
    code: i32,
    /// Its canonical name (`PERMISSION_DENIED`).
    status: &'static str,
    message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: &'static str,
    #[serde(rename = "auditID")]
    audit_id: &'a str,
    stage: &'static str,
    request_received_timestamp: &'a Timestamp,
    stage_timestamp: Timestamp,
    user: User<'a>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    source_ips: Vec<String>,
    verb: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<ObjectRef<'a>>,
    #[serde(rename = "nonResourceURL", skip_serializing_if = "Option::is_none")]
    non_resource_url: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    recheck: bool,
    #[serde(flatten)]
    stage_fields: Stage<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request: Option<&'a RequestOptions>,
}

#[derive(Serialize)]
struct User<'a> {
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    groups: &'a [String],
    #[serde(skip_serializing_if = "no_extra")]
    extra: &'a BTreeMap<String, Vec<String>>,
}

fn no_extra(extra: &&BTreeMap<String, Vec<String>>) -> bool {
    extra.is_empty()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef<'a> {
    resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    api_group: &'a str,
    api_version: &'a str,
}

/// One event line (newline included).
fn line(
    level: AuditLevel,
    stage: &'static str,
    request: &RequestAudit,
    identity: &Identity,
    target: Target<'_>,
    fields: Stage<'_>,
) -> String {
    let (verb, object_ref, non_resource_url) = match target {
        Target::Resource(a) => (
            a.verb.as_str(),
            Some(ObjectRef {
                resource: &a.resource,
                namespace: &a.namespace,
                name: &a.name,
                api_group: &a.group,
                api_version: &a.version,
            }),
            None,
        ),
        Target::NonResource(a) => (a.verb, None, Some(a.path)),
    };
    let line = Line {
        kind: "Event",
        api_version: API_VERSION,
        level: level.as_str(),
        audit_id: &request.id,
        stage,
        request_received_timestamp: &request.received,
        stage_timestamp: Timestamp::now(),
        user: User {
            username: &identity.user,
            uid: &identity.uid,
            groups: &identity.groups,
            extra: &identity.extra,
        },
        source_ips: request.source.iter().map(ToString::to_string).collect(),
        verb,
        object_ref,
        non_resource_url,
        recheck: request.recheck,
        stage_fields: fields,
        request: request.options.as_deref(),
    };
    let mut text = serde_json::to_string(&line).expect("an audit line is plain JSON");
    text.push('\n');
    text
}

/// The line reporting `dropped` lines.
fn summary_line(dropped: u64) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Summary {
        kind: &'static str,
        api_version: &'static str,
        stage_timestamp: Timestamp,
        dropped: u64,
    }
    let mut text = serde_json::to_string(&Summary {
        kind: "LinesDropped",
        api_version: API_VERSION,
        stage_timestamp: Timestamp::now(),
        dropped,
    })
    .expect("an audit line is plain JSON");
    text.push('\n');
    text
}

/// A new audit ID: a random (version 4) UUID, as the API server's.
fn audit_id() -> String {
    let mut bytes = [0u8; 16];
    // The system's random source does not fail on the platforms tokio
    // runs on; were it to, an ID of zeros still leaves every line whole.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// A wall-clock time, written as RFC 3339 in UTC with microseconds (the
/// API server's `MicroTime`).
#[derive(Debug, Clone, Copy)]
struct Timestamp(jiff::Timestamp);

impl Timestamp {
    fn now() -> Self {
        Timestamp(jiff::Timestamp::now())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{:.6}", self.0))
    }
}

/// `text`, cut to `limit` characters.
fn cut(text: &str, limit: usize) -> &str {
    match text.char_indices().nth(limit) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// The canonical name of a gRPC code.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::{
        Verb,
        fakes::{audit_lines as written, watch_configmaps},
    };

    fn per_second(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn bob() -> Identity {
        Identity {
            user: "system:serviceaccount:a:bob".into(),
            uid: "u-1".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            extra: BTreeMap::from([(
                "authentication.kubernetes.io/pod-name".to_owned(),
                vec!["bob-0".to_owned()],
            )]),
        }
    }

    fn source() -> Option<IpAddr> {
        Some("127.0.0.7".parse().unwrap())
    }

    fn options() -> RequestOptions {
        RequestOptions {
            label_selector: "app=x".into(),
            resource_version: "42".into(),
            send_initial_events: true,
            ..RequestOptions::default()
        }
    }

    /// An RFC 3339 UTC time with microseconds, as the API server writes them.
    fn is_micro_time(value: &Value) -> bool {
        let text = value.as_str().unwrap_or_default();
        text.len() == "2026-12-02T05:00:00.123456Z".len()
            && text.ends_with('Z')
            && text.as_bytes()[10] == b'T'
            && text.as_bytes()[19] == b'.'
    }

    #[tokio::test]
    async fn a_decision_line_names_who_asked_what_and_the_answer_and_request_level_adds_the_options()
     {
        let mut lines = Vec::new();
        for level in [AuditLevel::Metadata, AuditLevel::Request] {
            let (log, writer) = AuditLog::new(level, per_second(10));
            let request = log.request(source(), options).unwrap();
            let attributes = Attributes {
                name: "cm-1".into(),
                verb: Verb::Get,
                ..watch_configmaps()
            };
            log.decision(
                &request,
                &bob(),
                Target::Resource(&attributes),
                Decision::Deny("no RBAC policy matched"),
            );
            lines.extend(written(log, writer).await);
        }
        let [metadata, request] = &mut lines[..] else {
            panic!("{lines:?}")
        };
        for line in [&mut *metadata, &mut *request] {
            let object = line.as_object_mut().unwrap();
            for time in ["requestReceivedTimestamp", "stageTimestamp"] {
                let at = object.remove(time).unwrap();
                assert!(is_micro_time(&at), "{time}: {at}");
            }
            let id = object.remove("auditID").unwrap();
            assert_eq!(id.as_str().unwrap().len(), 36, "a UUID: {id}");
            assert_eq!(id.as_str().unwrap().as_bytes()[14], b'4', "version 4: {id}");
        }
        let expected = |level: &str| {
            json!({
                "kind": "Event",
                "apiVersion": "audit.kube-fanout.io/v1",
                "level": level,
                "stage": "Decision",
                "user": {
                    "username": "system:serviceaccount:a:bob",
                    "uid": "u-1",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "extra": {"authentication.kubernetes.io/pod-name": ["bob-0"]},
                },
                "sourceIPs": ["127.0.0.7"],
                "verb": "get",
                "objectRef": {"resource": "configmaps", "namespace": "a", "name": "cm-1", "apiVersion": "v1"},
                "decision": "deny",
                "reason": "no RBAC policy matched",
            })
        };
        assert_eq!(*metadata, expected("Metadata"));
        let mut with_options = expected("Request");
        with_options["request"] =
            json!({"labelSelector": "app=x", "resourceVersion": "42", "sendInitialEvents": true});
        assert_eq!(*request, with_options);
    }

    #[tokio::test]
    async fn a_non_resource_decision_names_its_url_and_an_error_its_cause() {
        let (log, writer) = AuditLog::new(AuditLevel::Metadata, per_second(10));
        let request = log.request(None, RequestOptions::default).unwrap();
        let metrics = NonResourceAttributes {
            verb: "get",
            path: "/metrics",
        };
        let down = crate::AuthError::Unavailable {
            review: "SubjectAccessReview",
            message: "connection refused".into(),
        };
        log.decision(
            &request,
            &bob(),
            Target::NonResource(&metrics),
            Decision::Error(&down),
        );
        let line = &written(log, writer).await[0];
        assert_eq!(line["verb"], "get");
        assert_eq!(line["nonResourceURL"], "/metrics");
        assert!(line.get("objectRef").is_none() && line.get("sourceIPs").is_none());
        assert_eq!(line["decision"], "error");
        assert_eq!(
            line["reason"],
            "cannot verify the request: SubjectAccessReview failed: connection refused"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_end_says_how_it_ended_what_it_delivered_and_for_how_long() {
        let (log, writer) = AuditLog::new(AuditLevel::Metadata, per_second(10));
        let request = log.request(source(), options).unwrap();
        let mut denied = StreamAudit::new(log.clone(), request.clone(), bob(), watch_configmaps());
        let mut cancelled = StreamAudit::new(log.clone(), request, bob(), watch_configmaps());
        for item in [
            Ok("abc"),
            Ok("de"),
            Err(Status::permission_denied("revoked")),
        ] {
            denied.observe(&item, |e| (1, e.len() as u64));
        }
        // A later status is not the one the stream ended with.
        denied.observe::<&str>(&Err(Status::internal("later")), |e| (1, e.len() as u64));
        tokio::time::advance(Duration::from_millis(2500)).await;
        drop(denied);
        cancelled.observe(&Ok("x"), |e| (1, e.len() as u64));
        drop(cancelled);
        let lines = written(log, writer).await;
        let ends: Vec<_> = lines
            .iter()
            .map(|l| {
                (
                    l["stage"].clone(),
                    l["responseStatus"].clone(),
                    l["events"].clone(),
                    l["bytes"].clone(),
                    l["durationSeconds"].clone(),
                )
            })
            .collect();
        let cancelled_status = json!({
            "code": 1,
            "status": "CANCELLED",
            "message": "the stream ended without a status from kube-fanout: its client cancelled it or went away",
        });
        assert_eq!(
            ends,
            [
                (
                    json!("StreamEnd"),
                    json!({"code": 7, "status": "PERMISSION_DENIED", "message": "revoked"}),
                    json!(2),
                    json!(5),
                    json!(2.5)
                ),
                (
                    json!("StreamEnd"),
                    cancelled_status,
                    json!(1),
                    json!(1),
                    json!(2.5)
                ),
            ]
        );
        assert_eq!(lines[0]["auditID"], lines[1]["auditID"]);
        assert_eq!(lines[0]["verb"], "watch");
        assert!(lines[0].get("request").is_none(), "Metadata level");
    }

    fn counted(counters: &AuditCounters) -> String {
        let mut registry = Registry::default();
        counters.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    /// Past the bound lines are dropped and counted; the next line written
    /// is preceded by one summary of them, at most one a second.
    #[tokio::test(start_paused = true)]
    async fn past_the_rate_lines_are_dropped_counted_and_summarized_once_lines_are_written_again() {
        let (log, writer) = AuditLog::new(AuditLevel::Metadata, per_second(10));
        let counters = log.counters().unwrap().clone();
        let request = log.request(source(), options).unwrap();
        let decide = |n: usize| {
            for _ in 0..n {
                let target = Target::Resource(&watch_configmaps());
                log.decision(&request, &bob(), target, Decision::Allow(""));
            }
        };
        let advance = |ms| tokio::time::advance(Duration::from_millis(ms));
        decide(25); // a burst of 10 written, 15 dropped
        advance(150).await; // 1.5 lines' worth
        decide(1); // the summary of 15, and the line
        decide(5); // dropped: half a line's worth left
        advance(1000).await;
        decide(1); // the summary of 5, and the line
        decide(20); // 9 written, 11 dropped
        advance(500).await;
        decide(1); // written, but half a second after the last summary
        advance(600).await;
        decide(1); // the summary of 11, and the line
        let lines = written(log, writer).await;
        let kinds: Vec<String> = lines
            .iter()
            .map(|l| match l["kind"].as_str().unwrap() {
                "LinesDropped" => format!("dropped {}", l["dropped"]),
                kind => kind.to_owned(),
            })
            .collect();
        let mut expected = vec!["Event".to_owned(); 10];
        expected.extend(["dropped 15".into(), "Event".into()]);
        expected.extend(["dropped 5".into(), "Event".into()]);
        expected.extend(vec!["Event".to_owned(); 9 + 1]);
        expected.extend(["dropped 11".into(), "Event".into()]);
        assert_eq!(kinds, expected);
        let text = counted(&counters);
        for line in [
            "kube_fanout_audit_lines_total{outcome=\"written\"} 23",
            "kube_fanout_audit_lines_total{outcome=\"dropped\"} 31",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(lines[10]["apiVersion"], API_VERSION);
        assert!(is_micro_time(&lines[10]["stageTimestamp"]));
    }

    #[tokio::test]
    async fn the_log_is_off_at_level_none_and_levels_parse_as_the_flag_spells_them() {
        let (log, writer) = AuditLog::new(AuditLevel::None, per_second(10));
        assert!(log.request(source(), || unreachable!()).is_none());
        assert!(log.counters().is_none());
        assert!(written(log, writer).await.is_empty());
        for (text, level) in [
            ("none", AuditLevel::None),
            ("Metadata", AuditLevel::Metadata),
            ("REQUEST", AuditLevel::Request),
        ] {
            assert_eq!(text.parse::<AuditLevel>(), Ok(level));
            assert_eq!(level.to_string().parse::<AuditLevel>(), Ok(level));
        }
        assert_eq!(
            "all".parse::<AuditLevel>(),
            Err("\"all\" is not an audit level: none, metadata or request".into())
        );
    }
}
