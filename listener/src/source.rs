//! Where a connection comes from, as the per-source bounds count it: a
//! client's IPv4 address, or its IPv6 /64 (the block one host is usually
//! given, so that one host cannot take a fresh bound per address).

use std::net::{IpAddr, Ipv6Addr};

/// Where a connection comes from, for the per-source bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    /// The source of a connection from `ip`: the address itself for IPv4
    /// (an IPv4-mapped IPv6 address included), its /64 for IPv6.
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Source(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                Source(IpAddr::V6(Ipv6Addr::from(prefix)))
            }
        }
    }
}

impl Source {
    /// The address (IPv6: the /64's first address).
    pub(crate) fn ip(&self) -> IpAddr {
        self.0
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_sources_are_their_64_and_mapped_ipv4_is_ipv4() {
        let a = Source::of(ip("2001:db8:1:2:aaaa::1"));
        assert_eq!(a, Source::of(ip("2001:db8:1:2:bbbb::2")));
        assert_ne!(a, Source::of(ip("2001:db8:1:3::1")));
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(
            Source::of(ip("::ffff:10.0.0.1")),
            Source::of(ip("10.0.0.1"))
        );
        assert_eq!(Source::of(ip("10.0.0.1")).to_string(), "10.0.0.1");
    }
}
