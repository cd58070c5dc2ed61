//! A container's resource limits two ways, in the same units so that a
//! test can compare them: as its pod spec asks (`resources.limits`, the
//! API server's quantities) and as the cgroup the kubelet made for it
//! enforces them (the memory limit and the CFS quota, cgroup v1 or v2).
//! The spec is only a request: what holds the process is the cgroup.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, Result, bail};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Where the cgroup hierarchies are mounted.
const CGROUP_FS: &str = "/sys/fs/cgroup";

/// Memory and CPU limits; `None` where there is none.
#[derive(Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most memory the container may use, in bytes.
    pub memory_bytes: Option<u64>,
    /// The CPU time it may use, in thousandths of a CPU (the CFS quota
    /// over its period).
    pub cpu_millis: Option<u64>,
}

impl Limits {
    /// What a container's `resources.limits` asks for (absent: none).
    pub fn asked(limits: Option<&BTreeMap<String, Quantity>>) -> Result<Self> {
        let get = |name: &str| limits.and_then(|l| l.get(name)).map(|q| q.0.as_str());
        Ok(Limits {
            memory_bytes: get("memory").map(bytes).transpose()?,
            cpu_millis: get("cpu").map(millicpus).transpose()?,
        })
    }

    /// What the cgroups of process `pid` enforce, read from the files the
    /// kernel enforces them by: with cgroup v1 memory.limit_in_bytes and
    /// cpu.cfs_quota_us / cpu.cfs_period_us in the memory and cpu
    /// hierarchies, with v2 memory.max and cpu.max.
    pub fn enforced(pid: u32) -> Result<Self> {
        let cgroups = read(format!("/proc/{pid}/cgroup"))?;
        let v1 = |controller: &str| {
            cgroups.lines().find_map(|line| {
                let mut fields = line.splitn(3, ':');
                let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                // A hierarchy holding several controllers (cpu,cpuacct) is
                // mounted under the list's name.
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then(|| PathBuf::from(format!("{CGROUP_FS}/{controllers}{path}")))
            })
        };
        if let (Some(memory), Some(cpu)) = (v1("memory"), v1("cpu")) {
            let memory_bytes: u64 = parse(&read(memory.join("memory.limit_in_bytes"))?)?;
            let quota: i64 = parse(&read(cpu.join("cpu.cfs_quota_us"))?)?;
            let period: u64 = parse(&read(cpu.join("cpu.cfs_period_us"))?)?;
            return Ok(Limits {
                // No limit reads as the page counter's maximum, 2^63 bytes
                // rounded down to a page: no machine has memory near it.
                memory_bytes: (memory_bytes < 1 << 62).then_some(memory_bytes),
                // No quota reads as -1.
                cpu_millis: u64::try_from(quota).ok().map(|q| q * 1000 / period),
            });
        }
        let path = cgroups
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .with_context(|| {
                format!("process {pid} is in no memory and cpu v1 cgroup and no v2 cgroup")
            })?;
        let dir = PathBuf::from(format!("{CGROUP_FS}{path}"));
        let memory = read(dir.join("memory.max"))?;
        let cpu = read(dir.join("cpu.max"))?;
        let (quota, period) = cpu
            .split_once(' ')
            .with_context(|| format!("cpu.max is not QUOTA PERIOD: {cpu:?}"))?;
        Ok(Limits {
            memory_bytes: (memory != "max").then(|| parse(&memory)).transpose()?,
            cpu_millis: (quota != "max")
                .then(|| {
                    Ok::<_, anyhow::Error>(parse::<u64>(quota)? * 1000 / parse::<u64>(period)?)
                })
                .transpose()?,
        })
    }
}

/// A control file's content, trimmed, with its path in the error.
fn read(path: impl Into<PathBuf>) -> Result<String> {
    let path = path.into();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.trim().to_owned())
}

fn parse<T: std::str::FromStr>(text: &str) -> Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    text.parse()
        .with_context(|| format!("{text:?} is not a number"))
}

/// A memory quantity in bytes: an integer with no suffix, a decimal one
/// (k, M, G, T, P, E) or a binary one (Ki ... Ei). The forms the chart
/// does not use (fractions, exponents) are refused rather than guessed.
fn bytes(quantity: &str) -> Result<u64> {
    const SUFFIXES: [(&str, u64); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    let (number, unit) = SUFFIXES
        .iter()
        .find_map(|&(suffix, unit)| quantity.strip_suffix(suffix).map(|n| (n, unit)))
        .unwrap_or((quantity, 1));
    let number: u64 = number
        .parse()
        .with_context(|| format!("memory quantity {quantity:?} is not an integer with a suffix"))?;
    number
        .checked_mul(unit)
        .with_context(|| format!("memory quantity {quantity:?} overflows"))
}

/// A CPU quantity in thousandths of a CPU: `NNNm`, or whole CPUs with at
/// most three decimals (`2`, `0.5`).
fn millicpus(quantity: &str) -> Result<u64> {
    let wrong = || format!("CPU quantity {quantity:?} is neither NNNm nor a number of CPUs");
    if let Some(millis) = quantity.strip_suffix('m') {
        return millis.parse().with_context(wrong);
    }
    let (whole, fraction) = quantity.split_once('.').unwrap_or((quantity, ""));
    if fraction.len() > 3 {
        bail!(wrong());
    }
    let whole: u64 = whole.parse().with_context(wrong)?;
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<3}").parse().with_context(wrong)?
    };
    Ok(whole * 1000 + fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_convert_as_kubernetes_reads_them() {
        assert_eq!(bytes("1Gi").unwrap(), 1 << 30);
        assert_eq!(bytes("256Mi").unwrap(), 256 << 20);
        assert_eq!(bytes("500M").unwrap(), 500_000_000);
        assert_eq!(bytes("1234").unwrap(), 1234);
        assert!(bytes("1.5Gi").is_err());
        assert_eq!(millicpus("100m").unwrap(), 100);
        assert_eq!(millicpus("2").unwrap(), 2000);
        assert_eq!(millicpus("0.5").unwrap(), 500);
        assert_eq!(millicpus("1.25").unwrap(), 1250);
        assert!(millicpus("0.0001").is_err());
    }
}
