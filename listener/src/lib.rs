//! kube-fanout's listener: how connections come in and go. It owns the
//! accept loop (plaintext or TLS, with certificate reload) in [`tls`],
//! what each connection carries ([`tls::ConnInfo`]), the bounds on
//! connections and handshakes ([`connections`]), HTTP/2 [`keepalive`],
//! and retiring connections at their maximum age ([`retire`]).
//!
//! It sits on tonic's transport and rustls only; auth sits on it (for
//! [`tls::ConnInfo`]), never the other way round.

pub mod connections;
pub mod keepalive;
pub mod retire;
pub mod tls;
