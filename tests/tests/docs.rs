//! The documentation holds together: no relative link or anchor in
//! README.md, BENCHMARKS.md and docs/ points nowhere, every alert of the
//! alerting rules links to its own section of the runbooks, and the
//! architecture page names every crate at the layer `scripts/layers` checks.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, ensure};
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// Where the alerting rules' runbook URLs point: this repository's main
/// branch on GitHub, under which each names a file and a heading.
const RUNBOOK_BASE: &str = "https://github.com/kube-fanout/kube-fanout/blob/main/";

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What one Markdown page holds: the anchors of its headings, and the
/// destinations of its links and images.
#[derive(Debug, Default)]
struct Page {
    anchors: BTreeSet<String>,
    links: Vec<String>,
}

/// GitHub's anchor for a heading's text: lower case, letters, digits, `-`
/// and `_` kept, spaces made `-`, everything else dropped.
fn slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Reads a page's headings (each anchor once; a repeated heading gets
/// `-1`, `-2`, ... as on GitHub) and links.
fn page(markdown: &str) -> Page {
    let mut page = Page::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_default();
                page.anchors.insert(match *n {
                    0 => base,
                    n => format!("{base}-{n}"),
                });
                *n += 1;
            }
            Event::Text(text) | Event::Code(text) => {
                if let Some(heading) = heading.as_mut() {
                    heading.push_str(&text);
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links.push(dest_url.into_string());
            }
            _ => {}
        }
    }
    page
}

/// Every link in `pages` (paths relative to the root) that leads nowhere:
/// a relative path that names no file or directory, or an anchor that
/// names no heading of its page. Links with a scheme are not followed.
fn dangling(pages: &BTreeMap<PathBuf, Page>, exists: impl Fn(&Path) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for (from, page) in pages {
        for link in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                from.clone()
            } else {
                normalize(&from.parent().unwrap_or(Path::new("")).join(path))
            };
            if !path.is_empty() && !exists(&target) {
                found.push(format!("{}: {link}: no such file", from.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            match pages.get(&target) {
                Some(linked) if linked.anchors.contains(anchor) => {}
                Some(_) => found.push(format!(
                    "{}: {link}: {} has no heading #{anchor}",
                    from.display(),
                    target.display()
                )),
                None => found.push(format!(
                    "{}: {link}: an anchor into {}, which is not a checked page",
                    from.display(),
                    target.display()
                )),
            }
        }
    }
    found
}

/// `path` with its `.` and `..` segments resolved, as a relative path.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The checked pages, by path relative to the root: README.md,
/// BENCHMARKS.md and every page under docs/.
fn docs() -> Result<BTreeMap<PathBuf, Page>> {
    let root = root();
    let mut paths = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(root.join(&dir)).with_context(|| dir.display().to_string())?
        {
            let entry = entry?;
            let relative = dir.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                dirs.push(relative);
            } else if relative.extension().is_some_and(|e| e == "md") {
                paths.push(relative);
            }
        }
    }
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path))
                .with_context(|| path.display().to_string())?;
            Ok((path, page(&text)))
        })
        .collect()
}

#[test]
fn no_relative_link_or_anchor_in_the_docs_points_nowhere() -> Result<()> {
    let pages = docs()?;
    ensure!(pages.len() > 10, "only {} pages found", pages.len());
    let root = root();
    let found = dangling(&pages, |path| root.join(path).exists());
    ensure!(found.is_empty(), "dangling links:\n{}", found.join("\n"));
    Ok(())
}

#[test]
fn every_alert_links_to_its_own_runbook_section() -> Result<()> {
    let pages = docs()?;
    let path = root().join("deploy/monitoring/kube-fanout.rules.yaml");
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&path).context("the alerting rules")?)?;
    let mut alerts = 0;
    let mut wrong = Vec::new();
    for group in rules["groups"].as_sequence().context("no rule groups")? {
        for rule in group["rules"]
            .as_sequence()
            .context("a group without rules")?
        {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let url = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
            let Some((file, anchor)) = url
                .strip_prefix(RUNBOOK_BASE)
                .and_then(|rest| rest.split_once('#'))
            else {
                wrong.push(format!(
                    "{alert}: runbook_url {url:?} is not {RUNBOOK_BASE}FILE#SECTION"
                ));
                continue;
            };
            if anchor != alert.to_lowercase() {
                wrong.push(format!(
                    "{alert}: runbook_url names #{anchor}, not its own section"
                ));
            }
            match pages.get(Path::new(file)) {
                Some(page) if page.anchors.contains(anchor) => {}
                Some(_) => wrong.push(format!("{alert}: {file} has no heading #{anchor}")),
                None => wrong.push(format!("{alert}: {file} is not a page of the docs")),
            }
        }
    }
    ensure!(alerts >= 18, "only {alerts} alerts found");
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}

/// The crates of `scripts/layers` with their layers (its `[crate]=N` lines).
/// (`scripts/module-cycles` keeps no list: it checks every library crate
/// `cargo metadata` names.)
fn layered_crates() -> Result<BTreeMap<String, String>> {
    let script = "scripts/layers";
    let text = std::fs::read_to_string(root().join(script)).context(script)?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (name, layer) = line.trim().strip_prefix('[')?.split_once("]=")?;
            Some((name.to_owned(), layer.to_owned()))
        })
        .collect())
}

/// The rows of the architecture page's table of crates by layer: each
/// crate (the first code span of its second cell) with its layer.
fn documented_layers(markdown: &str) -> BTreeMap<String, String> {
    markdown
        .lines()
        .filter_map(|line| {
            let mut cells = line.strip_prefix('|')?.split('|').map(str::trim);
            let layer = cells.next()?;
            if layer.is_empty() || !layer.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let name = cells.next()?.split('`').nth(1)?;
            Some((name.to_owned(), layer.to_owned()))
        })
        .collect()
}

#[test]
fn the_architecture_page_lists_every_crate_at_its_layer() -> Result<()> {
    let page = "docs/development/architecture.md";
    let documented = documented_layers(&std::fs::read_to_string(root().join(page)).context(page)?);
    let layers = layered_crates()?;
    ensure!(
        layers.len() >= 10,
        "only {} crates in scripts/layers",
        layers.len()
    );
    let only_page: Vec<_> = documented
        .iter()
        .filter(|(c, l)| layers.get(*c) != Some(l))
        .collect();
    let only_script: Vec<_> = layers
        .iter()
        .filter(|(c, l)| documented.get(*c) != Some(l))
        .collect();
    ensure!(
        only_page.is_empty() && only_script.is_empty(),
        "{page}'s table of crates by layer has {only_page:?}, scripts/layers {only_script:?} (crate, layer)"
    );
    Ok(())
}

#[test]
fn a_dangling_path_and_a_missing_anchor_are_found() {
    let pages: BTreeMap<PathBuf, Page> = [
        (
            PathBuf::from("README.md"),
            page("# Top\n\n[ok](docs/a.md#a-b) [here](#top) [gone](docs/b.md) [no](docs/a.md#nope) [web](https://x.io/#y)\n"),
        ),
        (PathBuf::from("docs/a.md"), page("# A `b`\n\n[up](../README.md#top) [self](#missing)\n")),
    ]
    .into();
    let found = dangling(&pages, |path| pages.contains_key(path));
    assert_eq!(
        found,
        [
            "README.md: docs/b.md: no such file",
            "README.md: docs/a.md#nope: docs/a.md has no heading #nope",
            "docs/a.md: #missing: docs/a.md has no heading #missing",
        ]
    );
}

#[test]
fn anchors_are_githubs_and_repeated_headings_are_numbered() {
    let page = page(
        "# Steady fanout\n## At 1,000 events/s: `--min-send-interval-ms`\n## Steady fanout\n### `--max-lag-events`\n",
    );
    let anchors: Vec<_> = page.anchors.iter().map(String::as_str).collect();
    assert_eq!(
        anchors,
        [
            "--max-lag-events",
            "at-1000-eventss---min-send-interval-ms",
            "steady-fanout",
            "steady-fanout-1",
        ]
    );
}
