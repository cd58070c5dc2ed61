//! Per-caller bounds, so one misbehaving client cannot take the server:
//! how many watches it holds open and how many initial snapshots (a
//! watch's initial events, or a List) it has in flight at once.

use std::{fmt, net::IpAddr, sync::Arc};

use dashmap::DashMap;

use crate::{error::AuthError, identity::Identity};
use kube_fanout_core::quote::quote;
use kube_fanout_listener::conn::ConnInfo;

/// Who a bound is counted for. Structured, so no user name can collide
/// with another caller's key (a user named `"alice (pod 1)"` is not alice's
/// pod 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// An authenticated user, and the pod its bound ServiceAccount token
    /// was issued for, if any.
    User {
        /// The user name.
        user: String,
        /// The pod's UID.
        pod: Option<String>,
    },
    /// An unauthenticated caller (`--auth=none`), by its address.
    Address(IpAddr),
    /// An unauthenticated caller whose address is unknown.
    Anonymous,
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::User { user, pod: None } => write!(f, "user {}", quote(user)),
            Caller::User {
                user,
                pod: Some(pod),
            } => write!(f, "user {} (pod {})", quote(user), quote(pod)),
            Caller::Address(ip) => write!(f, "caller {ip}"),
            Caller::Anonymous => write!(f, "an anonymous caller"),
        }
    }
}

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Held {
    /// An open watch.
    Watch,
    /// A snapshot being sent.
    Snapshot,
}

impl Held {
    fn plural(self) -> &'static str {
        match self {
            Held::Watch => "watches",
            Held::Snapshot => "initial snapshots",
        }
    }
}

/// The most each caller may hold; 0 means no bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallerLimits {
    /// Open watches.
    pub watches: usize,
    /// Snapshots in flight.
    pub snapshots: usize,
}

/// Counts what each caller holds.
#[derive(Debug, Default)]
pub struct Limiter {
    limits: CallerLimits,
    held: DashMap<(Caller, Held), usize>,
}

/// One unit held until dropped.
#[derive(Debug)]
pub struct Permit {
    limiter: Arc<Limiter>,
    key: (Caller, Held),
}

impl Drop for Permit {
    fn drop(&mut self) {
        // Remove the entry at zero so idle callers cost no memory.
        self.limiter.held.remove_if_mut(&self.key, |_, n| {
            *n -= 1;
            *n == 0
        });
    }
}

/// The pod a bound ServiceAccount token was issued for, in the identity's
/// extra attributes (TokenReview reports it).
const POD_UID: &str = "authentication.kubernetes.io/pod-uid";

impl Limiter {
    /// A limiter enforcing `limits`.
    pub fn new(limits: CallerLimits) -> Arc<Self> {
        Arc::new(Limiter {
            limits,
            held: DashMap::new(),
        })
    }

    /// The caller of a request: its user, or (unauthenticated) its address.
    /// A ServiceAccount token bound to a pod names the pod too: the agents
    /// of a DaemonSet share one ServiceAccount, and each is a caller of its
    /// own (a per-node fanout of thousands must not hit one user's bound).
    pub fn caller(extensions: &http::Extensions) -> Caller {
        if let Some(identity) = extensions.get::<Identity>() {
            return Caller::User {
                user: identity.user.clone(),
                pod: identity
                    .extra
                    .get(POD_UID)
                    .and_then(|uids| uids.first())
                    .cloned(),
            };
        }
        extensions
            .get::<ConnInfo>()
            .and_then(|c| c.remote_addr)
            .map_or(Caller::Anonymous, |a| Caller::Address(a.ip()))
    }

    /// One more `what` for `caller`, if under its bound.
    pub fn acquire(self: &Arc<Self>, caller: &Caller, what: Held) -> Result<Permit, AuthError> {
        let max = match what {
            Held::Watch => self.limits.watches,
            Held::Snapshot => self.limits.snapshots,
        };
        let key = (caller.clone(), what);
        let mut held = self.held.entry(key.clone()).or_default();
        if max != 0 && *held >= max {
            return Err(AuthError::LimitExceeded {
                caller: caller.to_string(),
                what: what.plural(),
                open: *held,
            });
        }
        *held += 1;
        Ok(Permit {
            limiter: self.clone(),
            key,
        })
    }

    /// How many `what` `caller` holds.
    pub fn held(&self, caller: &Caller, what: Held) -> usize {
        self.held.get(&(caller.clone(), what)).map_or(0, |n| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Caller {
        Caller::User {
            user: name.into(),
            pod: None,
        }
    }

    #[test]
    fn each_caller_is_bounded_on_its_own_and_permits_come_back() {
        let limiter = Limiter::new(CallerLimits {
            watches: 2,
            snapshots: 1,
        });
        let a1 = limiter.acquire(&user("a"), Held::Watch).unwrap();
        let _a2 = limiter.acquire(&user("a"), Held::Watch).unwrap();
        let err = limiter.acquire(&user("a"), Held::Watch).unwrap_err();
        assert_eq!(
            err.to_string(),
            "user \"a\" already has 2 watches open, the most allowed per caller"
        );
        // Another caller, and another kind, are not affected.
        let _b = limiter.acquire(&user("b"), Held::Watch).unwrap();
        let s = limiter.acquire(&user("a"), Held::Snapshot).unwrap();
        assert!(limiter.acquire(&user("a"), Held::Snapshot).is_err());
        drop(a1);
        drop(s);
        limiter.acquire(&user("a"), Held::Watch).unwrap();
        assert_eq!(limiter.held(&user("a"), Held::Snapshot), 0);
        assert!(limiter.held.get(&(user("a"), Held::Snapshot)).is_none());
    }

    /// The caller of a request by `user` with these extra attributes.
    fn caller_of(user: &str, extra: &[(&str, &str)]) -> Caller {
        let mut extensions = http::Extensions::new();
        extensions.insert(Identity {
            user: user.into(),
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), vec![(*v).to_owned()]))
                .collect(),
            ..Identity::default()
        });
        Limiter::caller(&extensions)
    }

    #[test]
    fn each_pod_of_a_service_account_is_a_caller_of_its_own() {
        let caller =
            |extra: &[(&str, &str)]| caller_of("system:serviceaccount:agents:node-agent", extra);
        let (a, b) = (caller(&[(POD_UID, "uid-a")]), caller(&[(POD_UID, "uid-b")]));
        assert_ne!(a, b);
        assert_eq!(
            a.to_string(),
            "user \"system:serviceaccount:agents:node-agent\" (pod \"uid-a\")"
        );
        assert_eq!(caller(&[]), user("system:serviceaccount:agents:node-agent"));
        let limiter = Limiter::new(CallerLimits {
            watches: 1,
            snapshots: 0,
        });
        let _a = limiter.acquire(&a, Held::Watch).unwrap();
        limiter.acquire(&b, Held::Watch).unwrap();
    }

    /// A user named like another caller's pod is a caller of its own.
    #[test]
    fn a_user_named_like_a_pod_of_another_is_not_that_pod() {
        let pod = caller_of("alice", &[(POD_UID, "1")]);
        let lookalike = caller_of("alice (pod 1)", &[]);
        assert_ne!(pod, lookalike);
        let limiter = Limiter::new(CallerLimits {
            watches: 1,
            snapshots: 0,
        });
        let _pod = limiter.acquire(&pod, Held::Watch).unwrap();
        limiter.acquire(&lookalike, Held::Watch).unwrap();
    }

    #[test]
    fn zero_means_unbounded() {
        let limiter = Limiter::new(CallerLimits::default());
        let permits: Vec<_> = (0..1000)
            .map(|_| limiter.acquire(&user("a"), Held::Watch).unwrap())
            .collect();
        assert_eq!(limiter.held(&user("a"), Held::Watch), permits.len());
    }
}
