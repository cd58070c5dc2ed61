//! Snapshots encoded once for every subscriber that takes them together.
//!
//! A restart herd (hundreds of subscribers asking for the same type at
//! once) is served one snapshot: the store hands out one copy per point
//! ([`Store::snapshot`](crate::store::Store::snapshot)), and subscribers
//! with the same filter and projection send the same ADDEDs at the same
//! resourceVersion, so the same bytes. Here those bytes are written once,
//! as complete gRPC messages (length-prefixed `WatchEvent`s, see
//! [`OwnWatchEvent::put_framed`]) in chunks of about [`CHUNK_BYTES`], and
//! every subscriber of the snapshot hands the same chunks to its
//! connection: no encode, no copy into a per-call buffer, no step of the
//! subscription per object. What is left per subscriber is what its own
//! connection does with the bytes (TLS and the socket).
//!
//! A chunk is built by the first subscriber that needs it, after the one
//! before it (so a chunk's objects start where the last one's end), while
//! the encoding's lock is held: subscribers that reach it meanwhile wait
//! for it rather than build it too.
//!
//! A chunk is kept only when it has company: when another subscriber of
//! the encoding is still sending it as the chunk is built. A lone
//! subscriber's chunks go as soon as they are sent, so its memory is
//! reused at once: kept, a lone plaintext snapshot of 28.7 MB cost 90-150
//! ms of CPU instead of 30-40 (the cost of holding that much fresh memory,
//! most likely its page faults; not measured apart). A subscriber that
//! finds a chunk not kept builds it again, and keeps it if it has company
//! by then.
//!
//! Memory is bounded twice. Chunks are kept only while some subscriber of
//! the snapshot has not finished sending it (the encoding goes when its
//! last [`FramedSnapshot`] does), and all kept chunks together hold at most
//! the `max_retained_bytes` given to [`SharedSnapshots::new`]; a chunk built
//! past that bound is handed on and forgotten, and each later subscriber
//! that reaches it builds it again for itself, which costs what a snapshot
//! cost before it was shared.
//!
//! A call that negotiated gRPC message compression gets its messages
//! compressed the same way ([`Compression`]), once for all who share the
//! encoding, so a compressed herd pays for one compression of the snapshot
//! rather than one per subscriber.

use std::{
    fmt,
    io::Write as _,
    ops::Range,
    sync::{
        Arc, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::{BufMut, Bytes, BytesMut};
use kube_fanout_proto::{
    v1::EventType,
    wire::{OwnWatchEvent, put_frame_header},
};
use parking_lot::Mutex;

use crate::{
    filter::Filter,
    object::{Object, ResourceVersion},
    projection::Projection,
};

/// About how many bytes of framed events one chunk holds (a chunk ends
/// with the first event that reaches this).
pub const CHUNK_BYTES: usize = 64 * 1024;

/// How a call's messages are compressed (gRPC message compression, as the
/// call negotiated it): each message on its own, flagged compressed in
/// its frame, as tonic compresses the call's other messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Not compressed.
    #[default]
    None,
    /// gzip, at tonic's level (6).
    Gzip,
    /// zstd, at zstd's default level (tonic's).
    Zstd,
}

/// Where a subscription's snapshot is sent from framed: the shared
/// encodings, and the compression of the call.
#[derive(Debug, Clone)]
pub struct SnapshotFrames {
    /// The encodings shared by the subscribers of the same snapshot.
    pub shared: Arc<SharedSnapshots>,
    /// The call's compression.
    pub compression: Compression,
}

/// The encodings of the snapshots being sent now, shared by whoever sends
/// the same one, within a bound on the bytes they keep.
#[derive(Debug)]
pub struct SharedSnapshots {
    counts: Arc<Counts>,
    /// Every encoding some subscriber still sends; dead ones are dropped
    /// from the list as the next one joins.
    open: Mutex<Vec<Weak<Encoding>>>,
}

/// What [`SharedSnapshots`] keeps and has done, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SharedSnapshotStats {
    /// Bytes of chunks kept now.
    pub retained_bytes: u64,
    /// The most they may hold.
    pub limit_bytes: u64,
    /// Chunks encoded for the first time.
    pub chunks_built: u64,
    /// Chunks handed to a subscriber from what was kept: encodings saved.
    pub chunks_shared: u64,
    /// Chunks encoded again because they were not kept (the bound).
    pub chunks_rebuilt: u64,
}

#[derive(Debug, Default)]
struct Counts {
    limit: u64,
    retained: AtomicU64,
    built: AtomicU64,
    shared: AtomicU64,
    rebuilt: AtomicU64,
}

impl Counts {
    /// Takes `bytes` of the bound for a chunk to keep, if there is room.
    fn keep(&self, bytes: u64) -> bool {
        self.retained
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }
}

impl SharedSnapshots {
    /// Encodings that keep at most `max_retained_bytes` of chunks in all.
    pub fn new(max_retained_bytes: u64) -> Self {
        SharedSnapshots {
            counts: Arc::new(Counts {
                limit: max_retained_bytes,
                ..Counts::default()
            }),
            open: Mutex::new(Vec::new()),
        }
    }

    /// A subscriber's way through the ADDEDs of `objects` (a snapshot at
    /// `resource_version`) that `filter` matches, shown by `projection`,
    /// framed with `compression`: the encoding another subscriber of the
    /// same snapshot, filter, projection and compression is sending, or a
    /// new one.
    pub fn join(
        &self,
        objects: &Arc<[Arc<Object>]>,
        resource_version: ResourceVersion,
        filter: &Filter,
        projection: Projection,
        compression: Compression,
    ) -> FramedSnapshot {
        let mut open = self.open.lock();
        open.retain(|e| e.strong_count() > 0);
        let same = open.iter().filter_map(Weak::upgrade).find(|e| {
            Arc::ptr_eq(&e.objects, objects)
                && e.resource_version == resource_version
                && e.projection == projection
                && e.compression == compression
                && e.filter == *filter
        });
        let encoding = same.unwrap_or_else(|| {
            let encoding = Arc::new(Encoding::new(
                objects.clone(),
                resource_version,
                filter.clone(),
                projection,
                compression,
                self.counts.clone(),
            ));
            open.push(Arc::downgrade(&encoding));
            encoding
        });
        encoding.sending.fetch_add(1, Ordering::Relaxed);
        FramedSnapshot {
            encoding,
            next: 0,
            sending: true,
            hold: None,
        }
    }

    /// What is kept now and what has been done.
    pub fn stats(&self) -> SharedSnapshotStats {
        let c = &self.counts;
        SharedSnapshotStats {
            retained_bytes: c.retained.load(Ordering::Relaxed),
            limit_bytes: c.limit,
            chunks_built: c.built.load(Ordering::Relaxed),
            chunks_shared: c.shared.load(Ordering::Relaxed),
            chunks_rebuilt: c.rebuilt.load(Ordering::Relaxed),
        }
    }
}

/// One snapshot's ADDEDs for one filter and projection, in chunks built in
/// order.
struct Encoding {
    objects: Arc<[Arc<Object>]>,
    resource_version: ResourceVersion,
    filter: Filter,
    projection: Projection,
    compression: Compression,
    /// Where the filter's candidates lie in `objects`.
    candidates: Range<usize>,
    /// How many events, and bytes of messages (without their framing).
    events: u64,
    bytes: u64,
    /// The chunks built so far, each after the one before.
    chunks: Mutex<Vec<Chunk>>,
    /// The subscribers sending it now (joined, not finished).
    sending: AtomicU64,
    counts: Arc<Counts>,
}

/// The events of a range of the snapshot's objects, framed.
struct Chunk {
    objects: Range<usize>,
    /// The chunk, if it was kept within the bound.
    kept: Option<Bytes>,
}

impl Encoding {
    fn new(
        objects: Arc<[Arc<Object>]>,
        resource_version: ResourceVersion,
        filter: Filter,
        projection: Projection,
        compression: Compression,
        counts: Arc<Counts>,
    ) -> Self {
        let candidates = filter.candidates(&objects);
        let mut encoding = Encoding {
            objects,
            resource_version,
            filter,
            projection,
            compression,
            candidates,
            events: 0,
            bytes: 0,
            chunks: Mutex::new(Vec::new()),
            sending: AtomicU64::new(0),
            counts,
        };
        let (events, bytes) = encoding.matching(encoding.candidates.clone()).fold(
            (0, 0),
            |(events, bytes), object| {
                (
                    events + 1,
                    bytes + encoding.event(object).encoded_len() as u64,
                )
            },
        );
        (encoding.events, encoding.bytes) = (events, bytes);
        encoding
    }

    /// The objects of `range` that the filter matches.
    fn matching(&self, range: Range<usize>) -> impl Iterator<Item = &Object> {
        self.objects[range]
            .iter()
            .map(|o| &**o)
            .filter(|o| self.filter.matches_candidate(o))
    }

    /// The ADDED of `object`, as a subscriber's own snapshot would send it
    /// (see `crate::codec`).
    fn event(&self, object: &Object) -> OwnWatchEvent {
        OwnWatchEvent::new(
            EventType::Added,
            self.resource_version.0,
            self.projection.json(object),
            false,
        )
    }

    /// Chunk `k`, built now if it is the next one; `None` past the last.
    /// A subscriber asks for its chunks in order, so `k` is at most the
    /// number built so far.
    fn chunk(&self, k: usize) -> Option<Bytes> {
        let mut chunks = self.chunks.lock();
        if let Some(chunk) = chunks.get_mut(k) {
            if let Some(bytes) = &chunk.kept {
                self.counts.shared.fetch_add(1, Ordering::Relaxed);
                return Some(bytes.clone());
            }
            // Built again under the lock, so that a subscriber that
            // reaches it meanwhile finds it kept rather than builds it too.
            self.counts.rebuilt.fetch_add(1, Ordering::Relaxed);
            let (bytes, _) = self.build(chunk.objects.clone(), usize::MAX);
            chunk.kept = self.keep(&bytes);
            return Some(bytes);
        }
        debug_assert_eq!(k, chunks.len(), "chunks are asked for in order");
        let from = chunks
            .last()
            .map_or(self.candidates.start, |c| c.objects.end);
        let (bytes, end) = self.build(from..self.candidates.end, CHUNK_BYTES);
        if bytes.is_empty() {
            // Nothing the filter matches is left.
            return None;
        }
        self.counts.built.fetch_add(1, Ordering::Relaxed);
        chunks.push(Chunk {
            objects: from..end,
            kept: self.keep(&bytes),
        });
        Some(bytes)
    }

    /// `bytes` to keep, if another subscriber is sending the snapshot and
    /// the bound has room for them.
    fn keep(&self, bytes: &Bytes) -> Option<Bytes> {
        let company = self.sending.load(Ordering::Relaxed) >= 2;
        (company && self.counts.keep(bytes.len() as u64)).then(|| bytes.clone())
    }

    /// The framed events of the matching objects of `range`, up to the
    /// first that brings them to `max` bytes; and where they end.
    fn build(&self, range: Range<usize>, max: usize) -> (Bytes, usize) {
        let mut buf = BytesMut::with_capacity(CHUNK_BYTES.min(max) + 4096);
        let mut compressor = Compressor::new(self.compression);
        let mut end = range.start;
        for (at, object) in self.objects[range.clone()].iter().enumerate() {
            end = range.start + at + 1;
            if self.filter.matches_candidate(object) {
                let event = self.event(object);
                match &mut compressor {
                    None => event.put_framed(&mut buf),
                    Some(compressor) => compressor.put_framed(&event, &mut buf),
                }
                if buf.len() >= max {
                    break;
                }
            }
        }
        (buf.freeze(), end)
    }
}

/// Compresses one chunk's messages, each on its own.
struct Compressor {
    /// The message being compressed, then what it compressed to.
    message: Vec<u8>,
    compressed: Vec<u8>,
    /// zstd's context, made once a chunk; gzip without one.
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl Compressor {
    /// A compressor for `encoding`; `None` for none.
    fn new(encoding: Compression) -> Option<Self> {
        let zstd = match encoding {
            Compression::None => return None,
            Compression::Gzip => None,
            Compression::Zstd => Some(
                zstd::bulk::Compressor::new(zstd::DEFAULT_COMPRESSION_LEVEL)
                    .expect("zstd's default level is a valid level"),
            ),
        };
        Some(Compressor {
            message: Vec::new(),
            compressed: Vec::new(),
            zstd,
        })
    }

    /// Appends `event` compressed, framed as a compressed gRPC message.
    fn put_framed(&mut self, event: &OwnWatchEvent, buf: &mut BytesMut) {
        self.message.clear();
        event.put(&mut self.message);
        self.compressed.clear();
        // Into memory, with valid settings: neither can fail.
        match &mut self.zstd {
            Some(zstd) => {
                self.compressed = zstd
                    .compress(&self.message)
                    .expect("zstd compresses into memory");
            }
            None => {
                let mut gzip = flate2::write::GzEncoder::new(
                    std::mem::take(&mut self.compressed),
                    flate2::Compression::new(6),
                );
                gzip.write_all(&self.message)
                    .expect("gzip compresses into memory");
                self.compressed = gzip.finish().expect("gzip compresses into memory");
            }
        }
        put_frame_header(buf, true, self.compressed.len());
        buf.put_slice(&self.compressed);
    }
}

impl Drop for Encoding {
    fn drop(&mut self) {
        let kept: u64 = self
            .chunks
            .get_mut()
            .iter()
            .filter_map(|c| c.kept.as_ref())
            .map(|b| b.len() as u64)
            .sum();
        self.counts.retained.fetch_sub(kept, Ordering::Relaxed);
    }
}

/// One subscriber's way through a shared snapshot encoding: its chunks in
/// order, then `None`. It keeps what it was given to hold (the caller's
/// snapshot permit) until its last chunk has been taken.
pub struct FramedSnapshot {
    encoding: Arc<Encoding>,
    next: usize,
    /// Counted among the encoding's subscribers sending it.
    sending: bool,
    hold: Option<Box<dyn Send + Sync>>,
}

impl FramedSnapshot {
    /// How many events the snapshot sends.
    pub fn events(&self) -> u64 {
        self.encoding.events
    }

    /// The bytes of their messages, without the gRPC framing (as a
    /// delivery's encoded length counts them).
    pub fn bytes(&self) -> u64 {
        self.encoding.bytes
    }

    /// The next chunk of framed events, or `None` once all are taken.
    pub fn next_chunk(&mut self) -> Option<Bytes> {
        let chunk = self.encoding.chunk(self.next);
        match chunk {
            Some(_) => self.next += 1,
            None => self.finish(),
        }
        chunk
    }

    fn finish(&mut self) {
        self.hold = None;
        if std::mem::take(&mut self.sending) {
            self.encoding.sending.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Keeps `hold` until the last chunk has been taken (or this drops).
    pub(crate) fn holding(mut self, hold: Option<Box<dyn Send + Sync>>) -> Self {
        self.hold = hold;
        self
    }
}

impl Drop for FramedSnapshot {
    fn drop(&mut self) {
        self.finish();
    }
}

impl fmt::Debug for FramedSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FramedSnapshot")
            .field("resource_version", &self.encoding.resource_version)
            .field("events", &self.encoding.events)
            .field("next_chunk", &self.next)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Buf;
    use kube_fanout_proto::v1::WatchEvent;
    use prost::Message;

    use super::*;
    use crate::{
        fields::SelectableFields,
        fixtures::{configmaps, object_in},
        store::{Snapshot, Store},
    };

    /// A store of `n` ConfigMaps of about 1 KiB in two namespaces, half of
    /// them labelled `app: x`.
    fn store(n: u64) -> Store {
        let store = Store::new(configmaps(), 100);
        let pad = "p".repeat(1000);
        let objects = (0..n)
            .map(|i| {
                let labels = if i % 2 == 0 {
                    format!(r#"{{"app":"x","pad":"{pad}"}}"#)
                } else {
                    format!(r#"{{"pad":"{pad}"}}"#)
                };
                object_in(
                    ["a", "b"][i as usize % 2],
                    &format!("o{i:05}"),
                    i + 1,
                    &labels,
                )
            })
            .collect();
        store.replace(objects, ResourceVersion(n + 7));
        store
    }

    /// Splits framed bytes into their messages, checking every frame's
    /// header.
    fn messages(mut framed: &[u8]) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        while framed.has_remaining() {
            assert_eq!(framed.get_u8(), 0, "not compressed");
            let len = framed.get_u32() as usize;
            out.push(WatchEvent::decode(&framed[..len]).unwrap());
            framed.advance(len);
        }
        out
    }

    fn all(mut framed: FramedSnapshot) -> (Vec<Bytes>, u64) {
        let mut chunks = Vec::new();
        while let Some(chunk) = framed.next_chunk() {
            chunks.push(chunk);
        }
        (chunks, framed.events())
    }

    fn filter(namespace: &str, labels: &str) -> Filter {
        Filter::new(namespace, labels, "", &SelectableFields::default()).unwrap()
    }

    /// A store of `n` objects (see [`store`]), a snapshot of it, and
    /// shared encodings keeping at most `bound` bytes.
    struct Fixture {
        store: Store,
        snapshot: Snapshot,
        shared: SharedSnapshots,
    }

    impl Fixture {
        fn new(n: u64, bound: u64) -> Self {
            let store = store(n);
            let snapshot = store.snapshot();
            Fixture {
                store,
                snapshot,
                shared: SharedSnapshots::new(bound),
            }
        }

        /// A subscriber's way through the snapshot as `filter` and
        /// `projection` show it, with `compression`.
        fn join_as(
            &self,
            filter: &Filter,
            projection: Projection,
            compression: Compression,
        ) -> FramedSnapshot {
            self.shared.join(
                &self.snapshot.objects,
                self.snapshot.resource_version,
                filter,
                projection,
                compression,
            )
        }

        /// The same, for all of it, in full.
        fn join(&self, compression: Compression) -> FramedSnapshot {
            self.join_as(&filter("", ""), Projection::Full, compression)
        }
    }

    /// Whatever the filter and projection, the chunks hold exactly the
    /// ADDEDs a subscriber's own snapshot sends, in order, at the
    /// snapshot's resourceVersion, each its own message; and the counts
    /// given up front are those of what the chunks hold.
    #[test]
    fn the_chunks_are_the_snapshot_events_framed() {
        let fixture = Fixture::new(300, u64::MAX);
        let snapshot = &fixture.snapshot;
        for (ns, labels) in [
            ("", ""),
            ("a", ""),
            ("", "app=x"),
            ("b", "app=x"),
            ("", "app=y"),
        ] {
            for projection in [Projection::Full, Projection::Metadata] {
                let filter = filter(ns, labels);
                let framed = fixture.join_as(&filter, projection, Compression::None);
                let bytes = framed.bytes();
                let (chunks, events) = all(framed);
                let got: Vec<WatchEvent> = chunks.iter().flat_map(|c| messages(c)).collect();
                let want: Vec<WatchEvent> = snapshot
                    .objects
                    .iter()
                    .filter(|o| filter.matches(o))
                    .map(|o| WatchEvent {
                        r#type: EventType::Added.into(),
                        resource_version: "307".into(),
                        object: projection.json(o).to_string(),
                        resync: false,
                        head_resource_version: String::new(),
                    })
                    .collect();
                assert_eq!(got, want, "{ns:?} {labels:?} {projection:?}");
                assert_eq!(events, want.len() as u64);
                let message_bytes: usize = want.iter().map(Message::encoded_len).sum();
                assert_eq!(bytes, message_bytes as u64);
                if projection == Projection::Full && !want.is_empty() {
                    // 300 KiB of objects or half that: several chunks, each
                    // about CHUNK_BYTES but the last.
                    assert!(chunks.len() >= 2, "{}", chunks.len());
                    for chunk in &chunks[..chunks.len() - 1] {
                        assert!((CHUNK_BYTES..CHUNK_BYTES + 2048).contains(&chunk.len()));
                    }
                }
            }
        }
    }

    /// With compression, every message is compressed on its own and
    /// flagged so; decompressed, the messages are those of the
    /// uncompressed encoding. Each compression is an encoding of its own.
    #[test]
    fn compressed_chunks_hold_the_same_messages_compressed() {
        use std::io::Read as _;
        let fixture = Fixture::new(200, u64::MAX);
        let join = |compression| fixture.join(compression);
        let (plain, _) = all(join(Compression::None));
        let plain: Vec<WatchEvent> = plain.iter().flat_map(|c| messages(c)).collect();
        for compression in [Compression::Gzip, Compression::Zstd] {
            let (chunks, _) = all(join(compression));
            let mut got = Vec::new();
            let mut wire = 0;
            for chunk in &chunks {
                wire += chunk.len();
                let mut framed = &chunk[..];
                while framed.has_remaining() {
                    assert_eq!(framed.get_u8(), 1, "flagged compressed");
                    let len = framed.get_u32() as usize;
                    let mut message = Vec::new();
                    match compression {
                        Compression::Gzip => {
                            flate2::read::GzDecoder::new(&framed[..len])
                                .read_to_end(&mut message)
                                .unwrap();
                        }
                        _ => message = zstd::decode_all(&framed[..len]).unwrap(),
                    }
                    got.push(WatchEvent::decode(&message[..]).unwrap());
                    framed.advance(len);
                }
            }
            assert_eq!(got, plain, "{compression:?}");
            // The padding compresses well: far fewer bytes on the wire.
            let message_bytes: usize = plain.iter().map(Message::encoded_len).sum();
            assert!(wire * 4 < message_bytes, "{compression:?}: {wire}");
        }
        assert_eq!(
            fixture.shared.stats().chunks_shared,
            0,
            "nothing shared across"
        );
    }

    /// Subscribers of the same snapshot, filter and projection get the
    /// very same chunks (one allocation each, built once); another filter,
    /// projection or snapshot gets its own encoding. Once the last of them
    /// is done, nothing stays kept.
    #[test]
    fn subscribers_of_one_snapshot_share_its_chunks() {
        let fixture = Fixture::new(200, u64::MAX);
        let (store, shared) = (&fixture.store, &fixture.shared);
        let join =
            |filter: &Filter, projection| fixture.join_as(filter, projection, Compression::None);
        let everything = filter("", "");
        let (first, mut second) = (
            join(&everything, Projection::Full),
            join(&everything, Projection::Full),
        );
        let (first, _) = all(first);
        let built = shared.stats().chunks_built;
        assert_eq!(built, first.len() as u64);
        let mut again = Vec::new();
        while let Some(chunk) = second.next_chunk() {
            again.push(chunk);
        }
        assert_eq!(first.len(), again.len());
        for (a, b) in first.iter().zip(&again) {
            assert_eq!(a.as_ptr(), b.as_ptr(), "the same bytes, not a copy");
        }
        let stats = shared.stats();
        assert_eq!((stats.chunks_built, stats.chunks_shared), (built, built));
        let total: usize = first.iter().map(Bytes::len).sum();
        assert_eq!(
            stats.retained_bytes, total as u64,
            "kept while the second is open"
        );
        drop(second);
        assert_eq!(shared.stats().retained_bytes, 0, "and no longer");

        let (metadata, _) = all(join(&everything, Projection::Metadata));
        let (labelled, _) = all(join(&filter("", "app=x"), Projection::Full));
        assert_ne!(metadata[0].as_ptr(), first[0].as_ptr());
        assert_ne!(labelled[0].as_ptr(), first[0].as_ptr());
        store.apply(
            crate::event::EventKind::Deleted,
            object_in("a", "o00000", 300, "{}"),
        );
        let newer = store.snapshot();
        let (after, _) = all(shared.join(
            &newer.objects,
            newer.resource_version,
            &everything,
            Projection::Full,
            Compression::None,
        ));
        assert_ne!(after[0].as_ptr(), first[0].as_ptr(), "a newer snapshot");
        assert_eq!(shared.stats().retained_bytes, 0, "every encoding is gone");
    }

    /// A lone subscriber keeps nothing: its chunks go once sent. One that
    /// joins while it sends builds the chunks already passed again and,
    /// having company, keeps them for whoever comes next.
    #[test]
    fn only_chunks_with_company_are_kept() {
        let fixture = Fixture::new(200, u64::MAX);
        let shared = &fixture.shared;
        let join = || fixture.join(Compression::None);
        let mut lone = join();
        let first = lone.next_chunk().unwrap();
        assert_eq!(shared.stats().retained_bytes, 0, "alone: nothing kept");
        let mut late = join();
        let again = late.next_chunk().unwrap();
        assert_eq!(again, first);
        assert_ne!(again.as_ptr(), first.as_ptr(), "built again");
        assert_eq!(shared.stats().retained_bytes, again.len() as u64);
        let mut third = join();
        assert_eq!(third.next_chunk().unwrap().as_ptr(), again.as_ptr());
        let stats = shared.stats();
        assert_eq!(
            (
                stats.chunks_built,
                stats.chunks_rebuilt,
                stats.chunks_shared
            ),
            (1, 1, 1)
        );
    }

    /// Past the bound, a chunk is not kept: each subscriber builds it for
    /// itself, with the same bytes, and the kept bytes never pass the
    /// bound.
    #[test]
    fn chunks_past_the_bound_are_built_again_not_kept() {
        let bound = (CHUNK_BYTES + 2048) as u64;
        let fixture = Fixture::new(200, bound);
        let shared = &fixture.shared;
        let join = || fixture.join(Compression::None);
        let (mut first, mut second) = (join(), join());
        let mut chunks = 0;
        while let Some(a) = first.next_chunk() {
            let b = second.next_chunk().expect("as many chunks");
            assert_eq!(a, b);
            assert_eq!(
                a.as_ptr() == b.as_ptr(),
                chunks == 0,
                "only the first is kept"
            );
            assert!(shared.stats().retained_bytes <= bound);
            chunks += 1;
        }
        assert_eq!(second.next_chunk(), None);
        let stats = shared.stats();
        assert_eq!(
            (
                stats.chunks_built,
                stats.chunks_shared,
                stats.chunks_rebuilt
            ),
            (chunks, 1, chunks - 1)
        );
    }

    /// The hold is kept until the last chunk has been taken.
    #[test]
    fn the_hold_is_kept_until_the_last_chunk() {
        let fixture = Fixture::new(100, u64::MAX);
        let hold = Arc::new(());
        let mut framed = fixture
            .join(Compression::None)
            .holding(Some(Box::new(hold.clone())));
        while framed.next_chunk().is_some() {
            assert_eq!(Arc::strong_count(&hold), 2);
        }
        assert_eq!(Arc::strong_count(&hold), 1);
    }
}
