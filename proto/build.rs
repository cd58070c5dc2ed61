//! Generates the gRPC code and the descriptor set that server reflection
//! serves. protoc comes from protoc-bin-vendored so a fresh machine builds
//! with no manual step.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let out = PathBuf::from(env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("kubefanout_descriptor.bin"))
        .compile_with_config(config, &["proto/kubefanout/v1/fanout.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
