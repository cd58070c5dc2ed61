//! On-demand types (off unless `--on-demand-resources` is given): a
//! Watch, List or Get for a type that is not configured, once
//! authorized, discovers the type on the API server and starts its
//! reflector, within an [`AllowList`] and a bound on how many such types
//! are held; a type nobody has used for the idle time is stopped and its
//! store freed, and one the API server stops serving (its CRD deleted)
//! ends its subscribers and is dropped.
//!
//! The core decides when types start and stop ([`OnDemand`]); what
//! discovery and a reflector are comes from the wiring above it
//! ([`Upstream`]), so the core stays free of the reflector and of gRPC.
//! Its parts: the [`allow`]-list, the [`error`]s, the [`upstream`] it
//! starts types through, its [`options`], its [`counters`], and the
//! [`types`] it holds.

pub mod allow;
pub mod counters;
pub mod error;
pub mod options;
#[cfg(test)]
mod tests;
pub mod types;
pub mod upstream;

pub use allow::{AllowList, Pattern, PatternError};
pub use error::{DiscoveryError, ResolveError};
pub use options::OnDemandOptions;
pub use types::OnDemand;
pub use upstream::{Reflecting, Upstream};
