//! The tiers of a fault run (issue 27): two leaves, C and D, fed by the
//! two replicas A and B as their parents (`--upstream-fanout`), each
//! parent behind a stable address of its own (a [`Forwarder`], as a
//! Service would be), so that a parent restarted on a new port is found
//! again and a killed one breaks its leaves' watches. C names A first, D
//! names B first: they follow different parents, and fail over to the
//! other when theirs dies. Here: starting them, which parent a leaf
//! follows, a leaf's failover, and the run's figures by tier.

use std::{fmt, net::SocketAddr, path::Path, time::Duration};

use anyhow::{Context, Result};

use super::{checker::Figures, replica::Replica};
use crate::{
    eventually::{Look, eventually},
    forwarder::Forwarder,
};

/// The run's servers 0 and 1 are the parents (A, B); the leaves follow.
pub const PARENTS: usize = 2;

/// A's index: the parent whose API server is restarted.
const A: usize = 0;

/// How long a leaf may take to resume on its other parent.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// The stable addresses in front of the parents.
pub struct Tiers {
    services: Vec<Forwarder>,
}

impl Tiers {
    /// Puts a stable address in front of each of `servers` (the parents)
    /// and starts the leaves C and D (appended to `servers`, synced) with
    /// `binary`, `kubeconfig` and `flags` (beyond the listeners and the
    /// parents), logging into `dir`.
    pub async fn start(
        servers: &mut Vec<Replica>,
        binary: &Path,
        kubeconfig: &Path,
        flags: &[String],
        dir: &Path,
    ) -> Result<Tiers> {
        let mut services = Vec::new();
        for parent in servers.iter() {
            services.push(Forwarder::start(parent.addr).await?);
        }
        let tiers = Tiers { services };
        for (name, order) in [("C", [A, 1]), ("D", [1, A])] {
            let parents: Vec<String> = order
                .iter()
                .map(|p| format!("http://{}", tiers.services[*p].addr))
                .collect();
            let mut leaf = flags.to_vec();
            leaf.push(format!("--upstream-fanout={}", parents.join(",")));
            servers.push(Replica::start(name, binary, kubeconfig, &leaf, dir).await?);
        }
        Ok(tiers)
    }

    /// The stable address in front of `parent`.
    pub fn service(&self, parent: usize) -> SocketAddr {
        self.services[parent].addr
    }

    /// Sends the leaves' new connections to `parent` at `addr`, where it
    /// listens since its restart.
    pub fn parent_restarted(&self, parent: usize, addr: SocketAddr) {
        self.services[parent].point_at(addr);
    }

    /// The parent `leaf` follows now, by its ListResources' `upstream`
    /// (`None`: none of them, as while it fails over), and how many
    /// snapshots it took from its parents so far.
    pub async fn following(&self, leaf: &Replica) -> Result<(Option<usize>, u64)> {
        let status = leaf.status().await?;
        Ok((self.parent_named(&status.upstream), status.lists))
    }

    fn parent_named(&self, upstream: &str) -> Option<usize> {
        self.services
            .iter()
            .position(|s| upstream == format!("kube-fanout http://{}/", s.addr))
    }

    /// Waits until `leaf`, which followed the killed parent `from`, has a
    /// watch open on another; whether it resumed there from its store's
    /// RV, as it should (no snapshot beyond the `lists` it had taken).
    pub async fn wait_failover(&self, leaf: &Replica, from: usize, lists: u64) -> Result<bool> {
        eventually(format!(
            "leaf {} watching a parent other than {from}",
            leaf.name
        ))
        .within(FAILOVER_TIMEOUT)
        .every(Duration::from_millis(200))
        .until_done(async || {
            Ok(match leaf.status().await {
                Ok(s)
                    if self.parent_named(&s.upstream).is_some_and(|p| p != from)
                        && s.reflector_phase == "watching" =>
                {
                    Look::Done(s.lists == lists)
                }
                Ok(s) => Look::NotYet(format!("{}, {}", s.upstream, s.reflector_phase)),
                Err(e) => Look::NotYet(format!("{e:#}")),
            })
        })
        .await
        .with_context(|| format!("its log:\n{}", leaf.log_tail()))
    }
}

/// What the tiers' faults did.
#[derive(Debug, Clone, Default)]
pub struct TierFaults {
    /// kill -9 + restart of a leaf.
    pub leaf_kills: usize,
    /// Subscribers the leaves had when killed (each moved elsewhere).
    pub subscribers_on_killed_leaves: u64,
    /// Leaves that followed a killed parent and moved to the other.
    pub leaf_failovers: usize,
    /// Of those, the ones that resumed there from their store's RV
    /// (without a new snapshot).
    pub resumed_failovers: usize,
    /// Leaves following A when its API server was killed, summed over
    /// the restarts: A's re-sync units pass through them.
    pub leaves_following_a: usize,
}

/// A run's figures by tier, from its subscribers' lives.
#[derive(Debug, Clone, Default)]
pub struct TierFigures {
    /// Watch calls to leaves.
    pub connections_on_leaves: usize,
    /// Resumes on a leaf after a connection to a parent.
    pub parent_to_leaf: usize,
    /// Resumes on a parent after a connection to a leaf.
    pub leaf_to_parent: usize,
    /// Resumes on a leaf after a connection to the other leaf.
    pub leaf_to_leaf: usize,
    /// Streams a leaf ended with Expired.
    pub expired_on_leaves: usize,
    /// Re-sync units received whole from leaves.
    pub units_on_leaves: usize,
    /// Their distinct RVs.
    pub unit_rvs_on_leaves: usize,
    /// Of those, the RVs of units also received from A: its relists'
    /// units passed on by a leaf, at the same RV.
    pub a_units_on_leaves: usize,
}

impl TierFigures {
    /// Sorts `figures` by tier.
    pub fn of(figures: &Figures) -> TierFigures {
        let is_leaf = |server: &usize| *server >= PARENTS;
        let mut t = TierFigures::default();
        let a_units = figures.servers.get(&A).map(|a| &a.units);
        let mut leaf_units = std::collections::BTreeSet::new();
        for (server, on) in &figures.servers {
            for (from, n) in &on.resumes_from {
                match (is_leaf(from), is_leaf(server)) {
                    (false, true) => t.parent_to_leaf += n,
                    (true, false) => t.leaf_to_parent += n,
                    (true, true) if from != server => t.leaf_to_leaf += n,
                    _ => {}
                }
            }
            if is_leaf(server) {
                t.connections_on_leaves += on.connections;
                t.expired_on_leaves += on.expired;
                t.units_on_leaves += on.units.values().sum::<usize>();
                leaf_units.extend(on.units.keys().copied());
            }
        }
        t.unit_rvs_on_leaves = leaf_units.len();
        t.a_units_on_leaves = leaf_units
            .iter()
            .filter(|rv| a_units.is_some_and(|a| a.contains_key(rv)))
            .count();
        t
    }

    /// Resumes that crossed from one tier to the other.
    pub fn resumes_across(&self) -> usize {
        self.parent_to_leaf + self.leaf_to_parent
    }
}

impl fmt::Display for TierFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connections to leaves, {} resumes across tiers ({} parent to leaf, {} leaf to parent), {} from leaf to leaf, {} Expired on leaves, {} re-sync units received from leaves ({} distinct RVs, {} of them A's relists' units)",
            self.connections_on_leaves,
            self.resumes_across(),
            self.parent_to_leaf,
            self.leaf_to_parent,
            self.leaf_to_leaf,
            self.expired_on_leaves,
            self.units_on_leaves,
            self.unit_rvs_on_leaves,
            self.a_units_on_leaves
        )
    }
}

impl fmt::Display for TierFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} leaf kill -9/restarts ({} subscribers on them moved), {} leaf failovers to the other parent ({} resumed from the leaf's RV), {} leaves following A at its API server's restarts",
            self.leaf_kills,
            self.subscribers_on_killed_leaves,
            self.leaf_failovers,
            self.resumed_failovers,
            self.leaves_following_a
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::checker::OnServer;

    /// Resumes are sorted by the tiers of the servers before and after,
    /// and a unit from a leaf counts as A's only at an RV A sent one at.
    #[test]
    fn figures_are_sorted_by_tier() {
        let on = |resumes: &[(usize, usize)], units: &[u64]| OnServer {
            connections: 1,
            resumes_from: resumes.iter().copied().collect(),
            units: units.iter().map(|rv| (*rv, 1)).collect(),
            expired: 1,
        };
        let figures = Figures {
            servers: [
                (0, on(&[(1, 5), (2, 3)], &[100])),
                (1, on(&[(0, 7), (3, 2)], &[])),
                (2, on(&[(0, 11), (2, 13), (3, 17)], &[100, 200])),
                (3, on(&[(1, 19)], &[100])),
            ]
            .into(),
            ..Figures::default()
        };
        let t = TierFigures::of(&figures);
        assert_eq!(
            (t.parent_to_leaf, t.leaf_to_parent, t.leaf_to_leaf),
            (11 + 19, 3 + 2, 17)
        );
        assert_eq!((t.connections_on_leaves, t.expired_on_leaves), (2, 2));
        assert_eq!(
            (t.units_on_leaves, t.unit_rvs_on_leaves, t.a_units_on_leaves),
            (3, 2, 1)
        );
    }
}
