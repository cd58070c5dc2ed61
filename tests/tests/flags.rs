//! Every flag of kube-fanout can be set from the environment, under one
//! naming scheme, and the flag reference (docs/flags.md, generated from
//! `--help` by scripts/docs-reference) documents each with its variable
//! (what the Helm chart and an operator rely on).

use clap::CommandFactory;
use kube_fanout::config::Config;

/// Flags whose variable is the one every kube tool reads, not ours.
const CONVENTIONAL: &[(&str, &str)] = &[("kubeconfig", "KUBECONFIG")];

#[test]
fn every_flag_has_an_environment_variable_in_the_flag_reference() {
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/flags.md"))
            .expect("docs/flags.md");
    let command = Config::command();
    let mut flags = 0;
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if ["help", "version"].contains(&long) {
            continue;
        }
        flags += 1;
        let want = CONVENTIONAL
            .iter()
            .find(|(flag, _)| *flag == long)
            .map_or_else(
                || format!("KUBE_FANOUT_{}", long.to_uppercase().replace('-', "_")),
                |(_, var)| (*var).to_owned(),
            );
        let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
        assert_eq!(env.as_deref(), Some(want.as_str()), "--{long}");
        // Its section: the heading, a blank line, then the line naming
        // its signature and variable.
        let heading = format!("### `--{long}`\n\n");
        let line = reference
            .split_once(&heading)
            .and_then(|(_, rest)| rest.lines().next())
            .unwrap_or_else(|| {
                panic!("docs/flags.md has no section for --{long}: run scripts/docs-reference")
            });
        assert!(
            line.contains(&format!("environment `{want}`")),
            "docs/flags.md's section of --{long} lacks {want}: {line}"
        );
    }
    assert!(flags >= 18, "only {flags} flags found");
}

/// kube-fanout run with only `env` (no flags) until it stops: its exit
/// status and stderr.
fn run_with_env(env: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-fanout-under-test"))
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("running kube-fanout");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn environment_variables_set_flags() {
    // Parsed (two resources from one comma-separated variable, a listen
    // address, a boolean): it goes on to read the kubeconfig, and fails there.
    let (ok, stderr) = run_with_env(&[
        ("KUBE_FANOUT_RESOURCE", "v1/configmaps,apps/v1/deployments"),
        ("KUBE_FANOUT_LISTEN", "127.0.0.1:0"),
        ("KUBE_FANOUT_LOG_JSON", "true"),
        ("KUBECONFIG", "/nonexistent/kubeconfig"),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("cannot read kubeconfig /nonexistent/kubeconfig"),
        "{stderr}"
    );
    // A bad value in a variable is refused like the flag's.
    let (ok, stderr) = run_with_env(&[
        ("KUBE_FANOUT_RESOURCE", "v1/configmaps"),
        ("KUBE_FANOUT_HISTORY_EVENTS", "0"),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("invalid value '0' for '--history-events"),
        "{stderr}"
    );
    let (ok, stderr) = run_with_env(&[]);
    assert!(!ok);
    assert!(stderr.contains("--resource <GVR>"), "{stderr}");
}
