//! Asking the real API server for Tables (`as=Table`) and printing the
//! same objects with kube-fanout-printers, for the differential tests of
//! `tests/tests/printers.rs`: the raw requests, the rule that makes ages
//! comparable, and a readable account of where two Tables differ.

use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use http::{Request, header};
use kube_fanout_printers::{ListMeta, PrinterError, TableOptions, TablePrinter};
use serde::Deserialize;
use serde_json::{Value, value::RawValue};

/// kubectl get's Accept header.
pub const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// The Accept header of a client that only takes v1beta1 Tables.
pub const V1BETA1_ACCEPT: &str = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";

/// A GET of `path` with `accept`, its body as text.
pub async fn get(client: &kube::Client, path: &str, accept: &str) -> Result<String> {
    let request = Request::get(path)
        .header(header::ACCEPT, accept)
        .body(Vec::new())?;
    client
        .request_text(request)
        .await
        .with_context(|| format!("GET {path} ({accept})"))
}

/// A request of `method` on `path` with a JSON body (a merge patch for
/// PATCH), its answer parsed.
pub async fn send(client: &kube::Client, method: &str, path: &str, body: &Value) -> Result<Value> {
    let content_type = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, content_type)
        .body(serde_json::to_vec(body)?)?;
    let text = client
        .request_text(request)
        .await
        .with_context(|| format!("{method} {path}: {body}"))?;
    Ok(serde_json::from_str(&text)?)
}

/// A list answer with its items as the API server wrote them.
#[derive(Debug, Deserialize)]
pub struct RawList {
    /// The list's metadata.
    #[serde(default)]
    pub metadata: RawListMeta,
    /// The items, each the API server's JSON of it.
    pub items: Vec<Box<RawValue>>,
}

/// A list's metadata.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RawListMeta {
    /// The list's resourceVersion.
    pub resource_version: String,
    /// Its continue token.
    #[serde(rename = "continue")]
    pub continue_token: String,
    /// Items left after this page.
    pub remaining_item_count: Option<i64>,
}

impl RawList {
    /// The list's metadata as the printer takes it.
    pub fn meta(&self) -> ListMeta<'_> {
        ListMeta {
            resource_version: &self.metadata.resource_version,
            continue_token: &self.metadata.continue_token,
            remaining_item_count: self.metadata.remaining_item_count,
        }
    }

    /// The items' JSON.
    pub fn items(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|i| i.get())
    }
}

/// The instants the API server may have printed a Table at, given that
/// it answered between `before` and `after`: it measures ages to its clock
/// when it converts. An age changes only where the clock passes a whole
/// number of seconds after a timestamp; the tests' own timestamps are in
/// whole seconds, so for them the second is enough, but the API server
/// stamps some objects of its own (events) to the microsecond. So the
/// window is read every millisecond, its ends included; two ticks of
/// different timestamps less than a millisecond apart could hide the
/// instant between them.
pub fn instants(before: SystemTime, after: SystemTime) -> Vec<SystemTime> {
    let window = after.duration_since(before).unwrap_or_default();
    let steps = window.as_millis().min(5_000) as u64;
    let mut instants: Vec<SystemTime> = (0..=steps)
        .map(|ms| before + Duration::from_millis(ms))
        .collect();
    instants.push(after);
    instants
}

/// Requires `print` at one of `instants` to write `theirs` exactly (the
/// API server's body, its trailing newline aside); else an error that says
/// where the Tables differ, at the first of the instants.
pub fn require_same(
    what: &str,
    theirs: &str,
    instants: &[SystemTime],
    print: impl Fn(SystemTime) -> Result<String, PrinterError>,
) -> Result<()> {
    let theirs = theirs.strip_suffix('\n').unwrap_or(theirs);
    let mut first = None;
    for &now in instants {
        let ours = print(now).with_context(|| format!("{what}: printing"))?;
        if ours == theirs {
            return Ok(());
        }
        first.get_or_insert(ours);
    }
    let ours = first.context("no instant to print at")?;
    bail!("{what}: the Tables differ: {}", difference(theirs, &ours))
}

/// Where two Tables' JSON first differ: a path and both values, or the
/// first differing bytes when they are equal as JSON (then only their
/// encoding differs).
pub fn difference(theirs: &str, ours: &str) -> String {
    let (Ok(a), Ok(b)) = (
        serde_json::from_str::<Value>(theirs),
        serde_json::from_str::<Value>(ours),
    ) else {
        return format!("not both JSON:\n theirs: {theirs}\n ours:   {ours}");
    };
    if let Some(found) = first_difference("", &a, &b) {
        // The whole row, for the reader to see which object it is.
        let row = found
            .strip_prefix(".rows[")
            .and_then(|r| r.split(']').next())
            .and_then(|i| i.parse::<usize>().ok())
            .map(|i| {
                format!(
                    "\n theirs: {}\n ours:   {}",
                    a["rows"][i]["cells"], b["rows"][i]["cells"]
                )
            })
            .unwrap_or_default();
        return format!("{found}{row}");
    }
    let at = theirs
        .bytes()
        .zip(ours.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(theirs.len().min(ours.len()));
    let window = |s: &str| {
        s.get(at.saturating_sub(60)..(at + 60).min(s.len()))
            .unwrap_or("")
            .to_owned()
    };
    format!(
        "equal as JSON, encoded differently at byte {at}:\n theirs: …{}…\n ours:   …{}…",
        window(theirs),
        window(ours)
    )
}

fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort_unstable();
            keys.dedup();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => first_difference(&format!("{path}.{k}"), p, q),
                (p, q) => Some(format!("{path}.{k}: theirs {p:?}, ours {q:?}")),
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            let found = x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (p, q))| first_difference(&format!("{path}[{i}]"), p, q));
            found.or_else(|| {
                (x.len() != y.len())
                    .then(|| format!("{path}: theirs has {} entries, ours {}", x.len(), y.len()))
            })
        }
        _ => (a != b).then(|| format!("{path}: theirs {a}, ours {b}")),
    }
}

/// A list of `resource` (its path) and the API server's Table of the
/// same list at the same resourceVersion (an Exact read, or the continue
/// token's, so writes meanwhile by the API server itself do not get in),
/// compared byte for byte with
/// `printer`'s. `query` adds parameters to both requests (a limit), and
/// `table_query` to the Table's only (includeObject, `-`).
#[allow(clippy::too_many_arguments)]
pub async fn compare_list(
    client: &kube::Client,
    printer: &TablePrinter,
    path: &str,
    query: &str,
    table_query: &str,
    accept: &str,
    options: &TableOptions,
) -> Result<usize> {
    let separator = |q: &str| {
        if q.is_empty() {
            String::new()
        } else {
            format!("&{q}")
        }
    };
    let list: RawList = serde_json::from_str(
        &get(
            client,
            &format!("{path}?{}", query.trim_start_matches('&')),
            "application/json",
        )
        .await?,
    )?;
    // A continue token holds the resourceVersion of its list; the API
    // server takes no other with it.
    let pin = if query.contains("continue=") {
        String::new()
    } else {
        format!(
            "resourceVersion={}&resourceVersionMatch=Exact",
            list.metadata.resource_version
        )
    };
    let at = format!("{path}?{pin}{}{}", separator(query), separator(table_query));
    let before = SystemTime::now();
    let theirs = get(client, &at, accept).await?;
    let after = SystemTime::now();
    require_same(
        &format!("LIST {at}"),
        &theirs,
        &instants(before, after),
        |now| printer.list_table(list.items(), &list.meta(), options, now),
    )?;
    Ok(list.items.len())
}

/// A GET of one object and the API server's Table of it, compared byte for
/// byte with `printer`'s (nothing writes the test's own objects between
/// the two GETs).
pub async fn compare_object(
    client: &kube::Client,
    printer: &TablePrinter,
    path: &str,
    table_query: &str,
    options: &TableOptions,
) -> Result<()> {
    let object = get(client, path, "application/json").await?;
    let at = format!("{path}?{table_query}");
    let before = SystemTime::now();
    let theirs = get(client, &at, KUBECTL_ACCEPT).await?;
    let after = SystemTime::now();
    require_same(
        &format!("GET {at}"),
        &theirs,
        &instants(before, after),
        |now| printer.object_table(object.trim_end(), options, now),
    )
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn a_difference_is_named_by_its_path() {
        let theirs = r#"{"rows":[{"cells":["a","1/1"]}]}"#;
        assert_eq!(
            difference(theirs, r#"{"rows":[{"cells":["a","0/1"]}]}"#),
            ".rows[0].cells[1]: theirs \"1/1\", ours \"0/1\"\n theirs: [\"a\",\"1/1\"]\n ours:   [\"a\",\"0/1\"]"
        );
        assert!(
            difference(r#"{"a":"<"}"#, r#"{"a":"\u003c"}"#)
                .starts_with("equal as JSON, encoded differently at byte 6")
        );
    }

    #[test]
    fn instants_cover_the_window_every_millisecond_and_its_ends() {
        let t = UNIX_EPOCH + Duration::from_micros(10_900_500);
        let got = instants(t, t + Duration::from_micros(2_300));
        let at = |us: u64| UNIX_EPOCH + Duration::from_micros(us);
        assert_eq!(
            got,
            vec![
                at(10_900_500),
                at(10_901_500),
                at(10_902_500),
                at(10_902_800)
            ]
        );
    }
}
