//! The command line: flags, commands and their arguments.

use clap::{Args, Parser, Subcommand};
use kube_fanout_client::proto::ResourceStatus;

use crate::output::Format;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-fanout",
    version,
    about = "Inspect a kube-fanout server"
)]
pub struct Cli {
    /// kube-fanout addresses (host:port or URL), tried in order.
    #[arg(
        long = "server",
        short = 's',
        env = "KUBE_FANOUT_SERVER",
        value_delimiter = ',',
        default_value = "127.0.0.1:50051",
        global = true
    )]
    pub servers: Vec<String>,
    /// Bearer token sent with every request.
    #[arg(long, env = "KUBE_FANOUT_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// File holding the bearer token, read again whenever it changes (a
    /// projected ServiceAccount token).
    #[arg(
        long,
        env = "KUBE_FANOUT_TOKEN_FILE",
        global = true,
        conflicts_with = "token"
    )]
    pub token_file: Option<std::path::PathBuf>,
    /// Use the credentials of the current kubeconfig user ($KUBECONFIG or
    /// ~/.kube/config): its token, token file or client certificate files.
    #[arg(long, global = true, conflicts_with_all = ["token", "token_file"])]
    pub kubeconfig_credentials: bool,
    /// PEM client certificate for mTLS (with --client-key).
    #[arg(
        long,
        env = "KUBE_FANOUT_CLIENT_CERT",
        global = true,
        requires = "client_key"
    )]
    pub client_cert: Option<std::path::PathBuf>,
    /// PEM key of --client-cert.
    #[arg(
        long,
        env = "KUBE_FANOUT_CLIENT_KEY",
        global = true,
        requires = "client_cert"
    )]
    pub client_key: Option<std::path::PathBuf>,
    /// Use TLS (implied by https:// addresses, --ca-file and --tls-server-name).
    #[arg(long, global = true)]
    pub tls: bool,
    /// PEM file of the CA that signed the server's certificate (default:
    /// the system's roots).
    #[arg(long, env = "KUBE_FANOUT_CA_FILE", global = true)]
    pub ca_file: Option<std::path::PathBuf>,
    /// Name to verify the server's certificate against.
    #[arg(long, global = true)]
    pub tls_server_name: Option<String>,
    /// Send the bearer token even in plaintext to a server that is not on
    /// loopback, where anyone on the path can read and replay it. Without
    /// it a token goes only over TLS or to 127.0.0.0/8, ::1 and localhost.
    #[arg(long, global = true)]
    pub insecure_plaintext_token: bool,
    /// Ask the server to compress what it sends (a large list over a slow
    /// link moves fewer bytes, at some CPU on both ends).
    #[arg(
        long,
        env = "KUBE_FANOUT_COMPRESSION",
        global = true,
        value_enum,
        default_value_t = Compression::None
    )]
    pub compression: Compression,
    #[command(subcommand)]
    pub command: Command,
}

/// The gRPC message compression `--compression` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The served resource types: sync state, resourceVersion, objects,
    /// subscribers.
    Resources {
        #[command(flatten)]
        output: OutputArg,
    },
    /// Lists objects of TYPE (v1/configmaps, configmaps, ConfigMap,
    /// deployments.apps ...).
    List {
        /// The resource type.
        r#type: String,
        #[command(flatten)]
        scope: Scope,
        /// Label selector.
        #[arg(long, short = 'l', default_value = "")]
        selector: String,
        /// Field selector, as the API server takes it for the type
        /// (metadata.name, metadata.namespace, and the type's own fields,
        /// such as a pod's spec.nodeName).
        #[arg(long, default_value = "")]
        field_selector: String,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Shows one object.
    Get {
        /// The resource type.
        r#type: String,
        /// The object's name.
        name: String,
        /// Namespace of the object.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Streams the changes of TYPE: the current objects first, or with
    /// --since only the changes after that resourceVersion.
    Watch {
        /// The resource type.
        r#type: String,
        #[command(flatten)]
        scope: Scope,
        /// Label selector.
        #[arg(long, short = 'l', default_value = "")]
        selector: String,
        /// Field selector, as for list.
        #[arg(long, default_value = "")]
        field_selector: String,
        /// Print only the changes after this resourceVersion.
        #[arg(long)]
        since: Option<String>,
        #[command(flatten)]
        output: OutputArg,
    },
}

#[derive(Debug, Args)]
pub struct Scope {
    /// Namespace to look in.
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// Look in every namespace.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
}

#[derive(Debug, Args)]
pub struct OutputArg {
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

impl Scope {
    /// The namespace the command asks about ("" for all of them).
    pub fn asked(&self) -> &str {
        if self.all_namespaces {
            ""
        } else {
            &self.namespace
        }
    }

    /// The namespace to ask the server for: "" for all namespaces or a
    /// cluster-scoped type.
    pub fn namespace_for(&self, served: &ResourceStatus) -> String {
        if self.all_namespaces || !served.namespaced {
            String::new()
        } else {
            self.namespace.clone()
        }
    }
}
