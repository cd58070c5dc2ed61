//! Proves that no library crate of the workspace has an import cycle
//! between its modules (see the `kube_fanout_devtools` crate docs); run
//! by `scripts/module-cycles`. Every workspace member with a library is
//! checked, from `cargo metadata`. Exits 1 naming each cycle, 0 with a line
//! per crate otherwise. With `--imports`, also prints every import between
//! modules, with the first path that makes it.

use std::{path::PathBuf, process::ExitCode};

use anyhow::{Context, bail};
use serde::Deserialize;

#[derive(Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    workspace_members: Vec<String>,
}

#[derive(Deserialize)]
struct Package {
    id: String,
    name: String,
    targets: Vec<Target>,
}

#[derive(Deserialize)]
struct Target {
    kind: Vec<String>,
    src_path: PathBuf,
}

fn main() -> anyhow::Result<ExitCode> {
    let list_imports = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--imports") => true,
        Some(other) => bail!("unknown argument {other:?}; usage: module-cycles [--imports]"),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Metadata =
        serde_json::from_slice(&output.stdout).context("reading cargo metadata's output")?;
    let mut failed = false;
    let mut packages: Vec<&Package> = metadata
        .packages
        .iter()
        .filter(|p| metadata.workspace_members.contains(&p.id))
        .collect();
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    for package in packages {
        let Some(lib) = package
            .targets
            .iter()
            .find(|t| t.kind.iter().any(|k| k == "lib"))
        else {
            continue;
        };
        let report = kube_fanout_devtools::check(&lib.src_path)
            .with_context(|| format!("reading the modules of {}", package.name))?;
        if list_imports {
            for (from, to, path) in report.imports() {
                println!("{}: {from} -> {to} ({path})", package.name);
            }
        }
        if report.cycles.is_empty() {
            println!(
                "{}: {} modules, {} imports between them, no cycle",
                package.name,
                report.tree.modules.len(),
                report.count()
            );
        } else {
            failed = true;
            for cycle in report.describe_cycles() {
                eprintln!("module cycle in {}: {cycle}", package.name);
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
