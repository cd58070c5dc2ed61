//! The classic BPF program that keeps shut-out sources out of a listening
//! socket (Linux only: socket filters are `SO_ATTACH_FILTER`, which
//! socket2 offers on Linux and Android alone). See [`super`].

use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use socket2::{SockFilter, SockRef};
use tokio::net::TcpListener;

use crate::source::Source;

/// Most sources the program holds (at 5 instructions an IPv6 source, far
/// within the kernel's 4,096 instructions).
pub(crate) const MAX_FILTERED: usize = 256;

// Classic BPF opcodes (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const LD_B_ABS: u16 = 0x30;
const ALU_AND_K: u16 = 0x54;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `SKF_NET_OFF`: offsets from here are into the network (IP) header.
const NET: u32 = 0xfff0_0000;
const ACCEPT: u32 = u32::MAX;
const DROP: u32 = 0;

/// A program that drops packets from `sources` and accepts all others.
pub(crate) fn program(sources: &[Source]) -> Vec<SockFilter> {
    let ins = SockFilter::new;
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for source in sources.iter().take(MAX_FILTERED) {
        match source.ip() {
            IpAddr::V4(ip) => v4.push(ip),
            IpAddr::V6(prefix) => v6.push(prefix),
        }
    }
    let v4_section: Vec<SockFilter> = std::iter::once(ins(LD_W_ABS, 0, 0, NET + 12))
        .chain(v4.iter().flat_map(|ip: &Ipv4Addr| {
            // Equal: fall into the drop; else skip it.
            [ins(JMP_JEQ_K, 0, 1, u32::from(*ip)), ins(RET_K, 0, 0, DROP)]
        }))
        .chain(std::iter::once(ins(RET_K, 0, 0, ACCEPT)))
        .collect();
    let v6_section: Vec<SockFilter> = v6
        .iter()
        .flat_map(|prefix: &Ipv6Addr| {
            let bits = u128::from(*prefix);
            let (high, low) = ((bits >> 96) as u32, (bits >> 64) as u32);
            [
                ins(LD_W_ABS, 0, 0, NET + 8),
                ins(JMP_JEQ_K, 0, 3, high),
                ins(LD_W_ABS, 0, 0, NET + 12),
                ins(JMP_JEQ_K, 0, 1, low),
                ins(RET_K, 0, 0, DROP),
            ]
        })
        .chain(std::iter::once(ins(RET_K, 0, 0, ACCEPT)))
        .collect();
    // The IP version, then a jump to its section (`ja` takes a 32-bit
    // offset; the conditional jumps' 8-bit ones stay within a source).
    let head = [
        ins(LD_B_ABS, 0, 0, NET),
        ins(ALU_AND_K, 0, 0, 0xf0),
        ins(JMP_JEQ_K, 0, 1, 0x40),
        ins(JMP_JA, 0, 0, 3),
        ins(JMP_JEQ_K, 0, 1, 0x60),
        ins(JMP_JA, 0, 0, 1 + v4_section.len() as u32),
        ins(RET_K, 0, 0, ACCEPT),
    ];
    head.into_iter()
        .chain(v4_section)
        .chain(v6_section)
        .collect()
}

/// Puts `sources`' program on `listener`, or takes any off if none.
pub(crate) fn apply(listener: &TcpListener, sources: &[Source]) -> io::Result<()> {
    let socket = SockRef::from(listener);
    if sources.is_empty() {
        match socket.detach_filter() {
            // ENOENT: none was attached.
            Err(err) if err.raw_os_error() != Some(2) => Err(err),
            _ => Ok(()),
        }
    } else {
        socket.attach_filter(&program(sources))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn connects(from: IpAddr, to: std::net::SocketAddr) -> bool {
        let socket = match from {
            IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .unwrap();
        socket.bind((from, 0).into()).unwrap();
        // A dropped SYN is retried after a second: a connect that has not
        // completed in 300 ms on loopback was dropped.
        tokio::time::timeout(Duration::from_millis(300), socket.connect(to))
            .await
            .is_ok_and(|c| c.is_ok())
    }

    fn source(s: &str) -> Source {
        Source::of(s.parse().unwrap())
    }

    #[tokio::test]
    async fn the_program_drops_the_sources_syns_and_lets_the_others_connect() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        apply(&listener, &[source("127.0.0.2"), source("127.0.0.4")]).unwrap();
        assert!(connects(ip("127.0.0.1"), addr).await);
        assert!(!connects(ip("127.0.0.2"), addr).await, "127.0.0.2 got in");
        assert!(connects(ip("127.0.0.3"), addr).await);
        assert!(!connects(ip("127.0.0.4"), addr).await, "127.0.0.4 got in");
        // Taken off: everyone connects again.
        apply(&listener, &[]).unwrap();
        assert!(connects(ip("127.0.0.2"), addr).await);
        apply(&listener, &[]).unwrap();
    }

    #[tokio::test]
    async fn ipv6_sources_are_dropped_by_their_64() {
        let Ok(listener) = TcpListener::bind("[::1]:0").await else {
            return; // No IPv6 loopback here.
        };
        let addr = listener.local_addr().unwrap();
        let loopback = IpAddr::V6(Ipv6Addr::LOCALHOST);
        // ::1 is in ::/64; a filter for another /64 lets it in.
        apply(&listener, &[source("2001:db8::1")]).unwrap();
        assert!(connects(loopback, addr).await);
        apply(&listener, &[source("2001:db8::1"), source("::1")]).unwrap();
        assert!(!connects(loopback, addr).await, "::1 got in");
        // An IPv4 source in the same program does not match IPv6 packets.
        apply(&listener, &[source("127.0.0.1")]).unwrap();
        assert!(connects(loopback, addr).await);
    }

    #[test]
    fn the_program_holds_at_most_its_bound() {
        let many: Vec<Source> = (0..1000u32)
            .map(|i| Source::of(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))))
            .collect();
        // Head, load, two instructions a source, accept; the v6 accept.
        assert_eq!(program(&many).len(), 7 + 1 + 2 * MAX_FILTERED + 1 + 1);
    }
}
