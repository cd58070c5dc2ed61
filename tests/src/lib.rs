//! Test support for kube-fanout's end-to-end tests: a real kube-apiserver
//! and etcd on loopback ([`controlplane`]), and kube-fanout itself started
//! in process against them ([`fanout`]) or as its binary ([`process`]), a
//! cluster with a real node that runs the chart's pods ([`node`]), the real
//! helm ([`helm`]), the randomized fault test of the Watch contract
//! ([`faults`]) with a stand-in for a Service in front of restarting
//! servers ([`forwarder`]), and the check that a watching client printed
//! every change once, in order ([`changes`]), the metrics reference page
//! rendered from servers' expositions ([`metrics_reference`]), Tables
//! (`as=Table`) of the API server beside kube-fanout-printers' ([`tables`]),
//! and generated client certificate chains for the differential test
//! against Go ([`certgen`]).

pub mod certgen;
pub mod changes;
pub mod clients;
pub mod controlplane;
pub mod eventually;
pub mod fanout;
pub mod faults;
pub mod forwarder;
pub mod helm;
pub mod metrics_reference;
// Network namespaces, a kubelet on containerd: the real node is Linux only.
#[cfg(target_os = "linux")]
pub mod node;
pub mod pki;
pub mod process;
pub mod proxy;
pub mod rbac;
pub mod support;
pub mod tables;

/// Sends the tests' and kube-fanout's logs to the test output (shown for
/// failing tests); `RUST_LOG` picks the level, `info` by default (without
/// the client's errors while the control plane is still starting).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,kube_client::client::builder=off")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}
