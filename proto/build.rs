//! Generates the gRPC code and the descriptor set that server reflection
//! serves. protoc comes from protoc-bin-vendored so a fresh machine builds
//! with no manual step.
//!
//! The messages and the client are generated as usual. The server is
//! generated on its own, over those messages, with [`ServerCodec`] and with
//! `WatchEvent` replaced by `EncodedWatchEvent`: the server encodes each
//! event once and writes the same bytes to every subscriber (see
//! `src/lib.rs`). On the wire nothing changes, so clients and grpcurl still
//! see `kubefanout.v1.WatchEvent`.

use std::env;

const PROTOS: &[&str] = &["proto/kubefanout/v1/fanout.proto"];
const INCLUDES: &[&str] = &["proto"];

fn protoc() -> Result<prost_build::Config, Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    Ok(config)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // Without the `grpc` feature: the messages alone, no tonic.
    if env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return Ok(protoc()?.compile_protos(PROTOS, INCLUDES)?);
    }
    grpc()
}

#[cfg(not(feature = "grpc"))]
fn grpc() -> Result<(), Box<dyn std::error::Error>> {
    unreachable!("called only with the grpc feature")
}

#[cfg(feature = "grpc")]
fn grpc() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_server(false)
        .file_descriptor_set_path(out.join("kubefanout_descriptor.bin"))
        .compile_with_config(protoc()?, PROTOS, INCLUDES)?;
    let server_out = out.join("server");
    std::fs::create_dir_all(&server_out)?;
    tonic_prost_build::configure()
        .build_client(false)
        .out_dir(&server_out)
        .extern_path(".kubefanout.v1", "crate::v1")
        .extern_path(
            ".kubefanout.v1.WatchEvent",
            "crate::wire::EncodedWatchEvent",
        )
        .codec_path("crate::wire::ServerCodec")
        .compile_with_config(protoc()?, PROTOS, INCLUDES)?;
    Ok(())
}
