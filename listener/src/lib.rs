//! kube-fanout's listener: how connections come in and go. It owns the
//! accept loop every listener shares ([`accept`]), each connection and
//! what it carries to the gRPC layers ([`conn::ConnInfo`]), TLS with its
//! certificate and client CA reloaded on change ([`tls`]), the bounds on
//! connections and handshakes ([`connections`]), the budget of failed
//! authentications per [`source`] ([`failures`]) and each connection's
//! [`standing`] with the authentication layer, HTTP/2 [`keepalive`],
//! retiring connections at their maximum age ([`retire`]), and closing
//! them within a bound when the server stops ([`drain`], which waits for
//! the [`requests`] in flight).
//!
//! Inside, imports run down: `accept` sits on `conn`,
//! `connections`, `drain`, `gate`, `keepalive` and `retire`; `gate` on `failures`
//! and `source`; `requests` on `conn` and `drain`; `conn` on `connections`,
//! `drain`, `standing` and `retire`; `connections` on `standing`, `gate`,
//! `failures` and `source`; `standing` on `failures` and `source`; `failures` on `clock`
//! and `source`; `tls` on `reload`; `peer` on `tls`.
//!
//! It sits on tonic's transport, rustls and kube-fanout-x509 only; auth sits on it (for
//! [`conn::ConnInfo`]), never the other way round.

pub mod accept;
pub mod clock;
pub mod conn;
pub mod connections;
pub mod drain;
pub mod failures;
mod gate;
pub mod keepalive;
pub mod peer;
mod reload;
pub mod requests;
pub mod retire;
pub mod source;
pub mod standing;
pub mod tls;
