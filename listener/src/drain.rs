//! How the connections end when the server stops: within a bound, whatever
//! their clients do, while a request in flight still gets its answer.
//!
//! A stopping server ends every watch at once (the stores close their
//! subscriptions; each stream's last message is a status naming the
//! resourceVersion to resume from) and tells each connection to go (an
//! HTTP/2 GOAWAY). A watch whose client reads what it is sent goes then.
//! One whose client does not is stuck behind HTTP/2 flow control: what was
//! already handed to the transport waits for window the client does not
//! give, and the status waits behind it, for as long as the client takes
//! to read (a subscriber at 200 ms an event with a megabyte in flight:
//! minutes). Nothing at the level of a stream can overtake it: a stream's
//! frames leave in order, and hyper does not poll the body of a stream
//! whose window is closed, so even a reset waits.
//!
//! So the drain closes connections. Once it has begun ([`Drain::begin`]),
//! a connection with no request in flight but streams (watches, whatever
//! their backlog) is closed [`DrainGrace::streams`] later, and every
//! connection [`DrainGrace::requests`] later: the requests in flight
//! (Lists, Gets, a history handed to a starting replica) get that long to
//! be answered. Closed, a connection's client sees its streams end
//! UNAVAILABLE, after what reached it; it resumes from the last event it
//! read, which is exact (a resume point) and no later than anything the
//! server dropped. A server tells which requests count
//! ([`crate::requests::CountRequestsLayer`]); streams that never end by
//! themselves (watches) must not, or the drain waits for them the whole
//! grace.
//!
//! Each connection looks at the drain with every read (hyper always has
//! one pending): before the drain, a waker registration and one atomic
//! load; during it, a timer until the connection's deadline. The drain
//! wakes every open connection as it begins, and a connection's last
//! request in flight wakes it as it ends, so that none waits for a read
//! the client may never cause.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::Context,
    time::Duration,
};

use futures::{FutureExt, task::AtomicWaker};
use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};

/// How long a drain waits before it closes connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainGrace {
    /// A connection with no request in flight (only streams, such as
    /// watches, or nothing) is closed this long after the drain began: the
    /// time a stream's last messages and status, already written, take to
    /// leave.
    pub streams: Duration,
    /// Every connection is closed this long after the drain began, its
    /// requests in flight answered or not.
    pub requests: Duration,
}

impl Default for DrainGrace {
    /// Half a second for streams (their statuses are written at once; the
    /// bound is what a stream stuck behind a client that does not read
    /// costs), 10 s for requests (a List of a large store, compressed,
    /// to a slow client).
    fn default() -> Self {
        DrainGrace {
            streams: Duration::from_millis(500),
            requests: Duration::from_secs(10),
        }
    }
}

/// What a drain did, for the log line at the end of a shutdown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Connections open when the drain began.
    pub open_at_start: u64,
    /// Connections it closed at [`DrainGrace::streams`]: no request was in
    /// flight, but a stream was (or the client had not closed it yet).
    pub closed_with_streams: u64,
    /// Connections it closed at [`DrainGrace::requests`], requests still
    /// in flight.
    pub closed_with_requests: u64,
}

/// The drain of every listener of a server (cheap to clone: all clones
/// are the same). Until [`Drain::begin`], it does nothing.
#[derive(Debug, Clone)]
pub struct Drain(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    grace: DrainGrace,
    began: OnceLock<Instant>,
    /// The open connections, by an id of their own, so that the drain can
    /// wake each as it begins.
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    open_at_start: AtomicU64,
    closed_with_streams: AtomicU64,
    closed_with_requests: AtomicU64,
}

/// What one connection and the requests on it share.
#[derive(Debug, Default)]
struct ConnState {
    /// The connection's task, woken when the drain begins and when its
    /// last request in flight ends.
    waker: AtomicWaker,
    /// Requests in flight ([`crate::requests::CountRequestsLayer`]).
    in_flight: AtomicUsize,
}

impl Default for Drain {
    /// A drain with the default grace ([`DrainGrace::default`]).
    fn default() -> Self {
        Drain::new(DrainGrace::default())
    }
}

impl Drain {
    /// A drain that will wait `grace`.
    pub fn new(grace: DrainGrace) -> Self {
        Drain(Arc::new(Shared {
            grace,
            began: OnceLock::new(),
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
            open_at_start: AtomicU64::new(0),
            closed_with_streams: AtomicU64::new(0),
            closed_with_requests: AtomicU64::new(0),
        }))
    }

    /// Begins the drain (a second call changes nothing): every connection
    /// is closed within its grace from now, and woken to count it.
    pub fn begin(&self) {
        if self.0.began.set(Instant::now()).is_err() {
            return;
        }
        let open = self.0.open.lock();
        self.0
            .open_at_start
            .store(open.len() as u64, Ordering::Relaxed);
        for state in open.values() {
            state.waker.wake();
        }
    }

    /// When the drain began, if it has.
    pub fn began(&self) -> Option<Instant> {
        self.0.began.get().copied()
    }

    /// The grace it waits.
    pub fn grace(&self) -> DrainGrace {
        self.0.grace
    }

    /// What it did so far.
    pub fn stats(&self) -> DrainStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        DrainStats {
            open_at_start: load(&self.0.open_at_start),
            closed_with_streams: load(&self.0.closed_with_streams),
            closed_with_requests: load(&self.0.closed_with_requests),
        }
    }

    /// A new connection's part in the drain, until it is dropped.
    pub(crate) fn join(&self) -> ConnDrain {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::default());
        self.0.open.lock().insert(id, state.clone());
        ConnDrain {
            drain: self.clone(),
            id,
            state,
            deadline: None,
        }
    }
}

/// One connection's part in the drain: whether it is to close now.
#[derive(Debug)]
pub(crate) struct ConnDrain {
    drain: Drain,
    id: u64,
    state: Arc<ConnState>,
    /// Once the drain has begun: the timer until the connection's
    /// deadline, as of its last look.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl ConnDrain {
    /// The counter of the connection's requests in flight, for the
    /// requests' extensions.
    pub(crate) fn requests(&self) -> Requests {
        Requests(self.state.clone())
    }

    /// Whether the connection is to be closed now; until then, the task
    /// `cx` belongs to is woken when that may have changed. Polled with
    /// every read.
    pub(crate) fn poll_close(&mut self, cx: &mut Context<'_>) -> bool {
        self.state.waker.register(cx.waker());
        let Some(began) = self.drain.began() else {
            return false;
        };
        let grace = self.drain.grace();
        let requests = self.state.in_flight.load(Ordering::Acquire);
        let due = began
            + if requests == 0 {
                grace.streams
            } else {
                grace.requests
            };
        if Instant::now() >= due {
            let counter = if requests == 0 {
                &self.drain.0.closed_with_streams
            } else {
                &self.drain.0.closed_with_requests
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let timer = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        // Ready only once `due` has passed, which the next look sees.
        if timer.poll_unpin(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        false
    }
}

impl Drop for ConnDrain {
    fn drop(&mut self) {
        self.drain.0.open.lock().remove(&self.id);
    }
}

/// The requests in flight on one connection (in its
/// [`ConnInfo`](crate::conn::ConnInfo)).
#[derive(Debug, Clone, Default)]
pub struct Requests(Arc<ConnState>);

impl Requests {
    /// Counts one request in flight until the guard is dropped.
    pub fn start(&self) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.0.clone())
    }

    /// How many are in flight.
    pub fn in_flight(&self) -> usize {
        self.0.in_flight.load(Ordering::Acquire)
    }
}

/// One request in flight, counted until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The connection may now be closed sooner (a drain's streams
            // grace); a look costs it one poll.
            self.0.waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Context<'static> {
        Context::from_waker(futures::task::noop_waker_ref())
    }

    /// Before the drain nothing is closed; once it began, a connection
    /// with a request in flight is closed at the requests' grace, one
    /// without at the streams' grace, counted by which.
    #[tokio::test(start_paused = true)]
    async fn connections_close_at_their_grace_by_whether_a_request_is_in_flight() {
        let grace = DrainGrace {
            streams: Duration::from_millis(500),
            requests: Duration::from_secs(10),
        };
        let drain = Drain::new(grace);
        let mut idle = drain.join();
        let mut busy = drain.join();
        let request = busy.requests().start();
        let mut cx = noop();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(!idle.poll_close(&mut cx) && !busy.poll_close(&mut cx));

        drain.begin();
        assert_eq!(drain.stats().open_at_start, 2);
        tokio::time::advance(grace.streams - Duration::from_millis(1)).await;
        assert!(!idle.poll_close(&mut cx));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(idle.poll_close(&mut cx));
        assert!(!busy.poll_close(&mut cx), "closed with a request in flight");
        tokio::time::advance(grace.requests - grace.streams - Duration::from_millis(1)).await;
        assert!(!busy.poll_close(&mut cx));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(busy.poll_close(&mut cx));
        let stats = drain.stats();
        assert_eq!(
            (stats.closed_with_streams, stats.closed_with_requests),
            (1, 1)
        );
        drop(request);
    }

    /// A connection whose last request ends after the streams' grace is
    /// closed then, woken by the request's end rather than at the
    /// requests' grace.
    #[tokio::test(start_paused = true)]
    async fn a_connection_closes_as_its_last_request_ends_past_the_streams_grace() {
        let drain = Drain::default();
        let mut conn = drain.join();
        let requests = conn.requests();
        let (first, second) = (requests.start(), requests.start());
        let woken = Arc::new(WakeCount::default());
        let waker = futures::task::waker(woken.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(!conn.poll_close(&mut cx));
        drain.begin();
        assert_eq!(woken.count(), 1, "woken as the drain began");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!conn.poll_close(&mut cx));
        drop(first);
        assert_eq!(woken.count(), 1, "woken before its last request ended");
        assert_eq!(requests.in_flight(), 1);
        drop(second);
        assert_eq!(woken.count(), 2, "not woken as its last request ended");
        assert!(conn.poll_close(&mut cx));
    }

    /// A dropped connection leaves the drain: it is not counted, nor woken.
    #[tokio::test]
    async fn a_closed_connection_leaves_the_drain() {
        let drain = Drain::default();
        let kept = drain.join();
        drop(drain.join());
        drain.begin();
        assert_eq!(drain.stats().open_at_start, 1);
        drop(kept);
    }

    #[derive(Default)]
    struct WakeCount(AtomicUsize);

    impl WakeCount {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl futures::task::ArcWake for WakeCount {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}
