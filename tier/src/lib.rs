//! A tier: a kube-fanout whose stores are fed by another kube-fanout (its
//! parent) instead of the API server, so that the API server sees only the
//! parents' watches however many leaves and subscribers are added.
//!
//! Per served type a [`Feed`] keeps one gRPC Watch on the parent, through
//! the client library's [`Client`](kube_fanout_client::Client) (its TLS,
//! token and list of addresses): a snapshot, then live events and
//! bookmarks. The parent's resourceVersions are the API server's and pass
//! through unchanged, so a subscriber resumes on a leaf, a parent or a
//! replica that watches the API server alike. What the parent sends maps
//! onto the store's writes one to one:
//!
//! - its snapshot replaces the store at the snapshot's RV (the first fills
//!   it; a later one, after the parent answered Expired, publishes the
//!   difference as a re-sync unit and records the gap, as a relist does);
//! - a live event is applied, a bookmark moves the store's RV;
//! - a re-sync unit is received whole and published as the same unit at
//!   the same RV, with the same gap ([`Store::apply_unit`]).
//!
//! The store moves only by finished units, so its RV is always the point
//! to resume from: a parent that goes away is replaced by the next
//! address, from there.
//!
//! [`discover`] takes the types' kind, scope and selectable fields from the
//! parent's ListResources. The feed's watch asks for head bookmarks: each
//! bookmark says where the parent was as it sent it, at least every
//! second, so each store knows how far behind the parent it is without a
//! call of its own.
//!
//! [`Store::apply_unit`]: kube_fanout_core::store::Store::apply_unit

mod discovery;
mod error;
mod feed;
mod state;
#[cfg(test)]
mod tests;

pub use discovery::{DiscoveryError, discover};
pub use error::FeedError;
pub use feed::Feed;
pub use state::State;
