//! Bounds on what a caller sends, checked before anything else looks at a
//! request: before it is authorized (so the decision cache is keyed only
//! by values of bounded size and valid shape), parsed or cached.
//!
//! Where the API server has a rule, it is the API server's:
//! - a namespace is a DNS-1123 label (at most 63 characters);
//! - an object name is what the API server accepts as a path segment
//!   (`IsValidPathSegmentName`: not `.` or `..`, no `/` or `%`), so a Get of
//!   `ns/x` cannot look up a namespaced object by its cache key; the API
//!   server has no length rule for path segments, but nearly every type's
//!   names are DNS-1123 subdomains, so names are bounded at theirs (253);
//! - a group is a DNS-1123 subdomain (or empty, the core group), a version
//!   and a resource are DNS-1123 labels (a CRD's versions and plural are
//!   DNS-1035 labels, which are DNS-1123 labels too);
//! - label keys and values are checked by the selector parser with the
//!   API server's rules (keys: a DNS-1123 subdomain prefix of at most 253
//!   and a name of at most 63; values at most 63).
//!
//! The API server bounds selectors only by its URL length; kube-fanout keeps
//! a parsed selector for as long as a watch is open (up to
//! `--max-watches-per-caller` of them per caller) and evaluates it for every
//! event, so a selector is bounded at [`MAX_SELECTOR_BYTES`] and
//! [`MAX_SELECTOR_TERMS`] comma-separated terms (the values of an `in` set
//! count one each): a parsed selector then holds at most about
//! `100 × (317 + 63)` bytes of keys and values, and matching an event
//! costs at most 100 comparisons per subscriber, where an unbounded one
//! (a 3.6 MB `!a,!a,...`) parsed into 1.2 M requirements and ~75 MiB.

use kube_fanout_proto::v1::{self as pb, GetRequest, ListRequest, WatchRequest};

use kube_fanout_auth::{Attributes, Verb};
use kube_fanout_core::{
    filter::selected_name,
    names::{is_dns1123_label, is_dns1123_subdomain},
    quote::quote,
    resource::GroupVersionResource,
};

use crate::{error::RequestError, input::InputError};

/// Longest namespace: a DNS-1123 label.
pub const MAX_NAMESPACE: usize = 63;
/// Longest object name: a DNS-1123 subdomain.
pub const MAX_NAME: usize = 253;
/// Longest API group: a DNS-1123 subdomain.
pub const MAX_GROUP: usize = 253;
/// Longest version or resource: a DNS-1123 label.
pub const MAX_LABEL: usize = 63;
/// Longest label or field selector, in bytes.
pub const MAX_SELECTOR_BYTES: usize = 4096;
/// Most comma-separated terms in a label or field selector.
pub const MAX_SELECTOR_TERMS: usize = 100;
/// Longest resourceVersion: an etcd revision, a u64 in decimal.
pub const MAX_RESOURCE_VERSION: usize = 20;
/// Longest `continue` token: a resourceVersion, `:`, and the key
/// (`namespace/name`) of the last object sent.
pub const MAX_CONTINUE: usize = MAX_RESOURCE_VERSION + 1 + MAX_NAMESPACE + 1 + MAX_NAME;
/// Largest request message kube-fanout decodes, after decompression
/// (tonic's `max_decoding_message_size`). Every field at its bound (two
/// selectors of 4 KiB, names, a token) encodes in under 10 KiB; the rest
/// is room for fields a newer client may add. Larger requests are refused
/// before they are decompressed past this, so a few KB of gzip cannot make
/// kube-fanout hold megabytes.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

const DNS1123_LABEL: &str = "it must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit)";
const DNS1123_SUBDOMAIN: &str =
    "it must be a DNS-1123 subdomain (DNS-1123 labels separated by '.')";
const PATH_SEGMENT: &str = "a name may not be '.' or '..' nor contain '/' or '%'";

fn too_long(field: &'static str, input: &str, max: usize) -> Result<(), InputError> {
    if input.len() <= max {
        return Ok(());
    }
    Err(InputError::TooLong {
        field,
        quoted: quote(input).to_string(),
        len: input.len(),
        max,
    })
}

fn invalid(field: &'static str, input: &str, rule: &'static str) -> InputError {
    InputError::Invalid {
        field,
        quoted: quote(input).to_string(),
        rule,
    }
}

/// A namespace: empty (all namespaces) or a DNS-1123 label.
pub fn namespace(field: &'static str, ns: &str) -> Result<(), InputError> {
    too_long(field, ns, MAX_NAMESPACE)?;
    if ns.is_empty() || is_dns1123_label(ns) {
        Ok(())
    } else {
        Err(invalid(field, ns, DNS1123_LABEL))
    }
}

/// An object name: empty (none) or a path segment name of at most
/// [`MAX_NAME`] bytes.
pub fn name(field: &'static str, name: &str) -> Result<(), InputError> {
    too_long(field, name, MAX_NAME)?;
    if name == "." || name == ".." || name.contains(['/', '%']) {
        Err(invalid(field, name, PATH_SEGMENT))
    } else {
        Ok(())
    }
}

/// A label or field selector: at most [`MAX_SELECTOR_BYTES`] and
/// [`MAX_SELECTOR_TERMS`] comma-separated terms. Counted before parsing,
/// over every comma (an escaped one in a field selector too, which can
/// only over-count).
pub fn selector(field: &'static str, selector: &str) -> Result<(), InputError> {
    too_long(field, selector, MAX_SELECTOR_BYTES)?;
    let terms = selector.bytes().filter(|b| *b == b',').count() + 1;
    if terms > MAX_SELECTOR_TERMS {
        return Err(InputError::TooManyTerms {
            field,
            quoted: quote(selector).to_string(),
            terms,
            max: MAX_SELECTOR_TERMS,
        });
    }
    Ok(())
}

/// A resource reference: the group a DNS-1123 subdomain (or empty), the
/// version and resource DNS-1123 labels.
fn resource(r: Option<&pb::ResourceRef>) -> Result<GroupVersionResource, RequestError> {
    let r = r
        .filter(|r| !r.version.is_empty() && !r.resource.is_empty())
        .ok_or(RequestError::MissingResource)?;
    too_long("resource.group", &r.group, MAX_GROUP)?;
    if !r.group.is_empty() && !is_dns1123_subdomain(&r.group) {
        return Err(invalid("resource.group", &r.group, DNS1123_SUBDOMAIN).into());
    }
    for (field, value) in [
        ("resource.version", &r.version),
        ("resource.resource", &r.resource),
    ] {
        too_long(field, value, MAX_LABEL)?;
        if !is_dns1123_label(value) {
            return Err(invalid(field, value, DNS1123_LABEL).into());
        }
    }
    Ok(GroupVersionResource {
        group: r.group.clone(),
        version: r.version.clone(),
        resource: r.resource.clone(),
    })
}

/// What a request asks to see, every part of it checked: the only values
/// that authorization (and its decision cache) is ever given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The resource type.
    pub gvr: GroupVersionResource,
    /// The namespace; empty for all.
    pub namespace: String,
    /// The object name (a Get's, or the one a field selector pins); empty
    /// for none.
    pub name: String,
}

impl Scope {
    fn new(r: Option<&pb::ResourceRef>, ns: &str, object: &str) -> Result<Scope, RequestError> {
        let gvr = resource(r)?;
        namespace("namespace", ns)?;
        name("name", object)?;
        Ok(Scope {
            gvr,
            namespace: ns.to_owned(),
            name: object.to_owned(),
        })
    }

    /// A List or Watch's scope, once its selectors, resourceVersion and
    /// continue token are within their bounds; the name is the one its
    /// field selector pins, as the API server authorizes it.
    fn filtered(
        r: Option<&pb::ResourceRef>,
        ns: &str,
        label_selector: &str,
        field_selector: &str,
        resource_version: &str,
    ) -> Result<Scope, RequestError> {
        selector("labelSelector", label_selector)?;
        selector("fieldSelector", field_selector)?;
        too_long("resourceVersion", resource_version, MAX_RESOURCE_VERSION)?;
        Scope::new(r, ns, &selected_name(field_selector))
    }

    /// A Watch request's scope, the whole request checked.
    pub fn watch(r: &WatchRequest) -> Result<Scope, RequestError> {
        Scope::filtered(
            r.resource.as_ref(),
            &r.namespace,
            &r.label_selector,
            &r.field_selector,
            &r.resource_version,
        )
    }

    /// A List request's scope, the whole request checked.
    pub fn list(r: &ListRequest) -> Result<Scope, RequestError> {
        too_long("continue", &r.r#continue, MAX_CONTINUE)?;
        Scope::filtered(
            r.resource.as_ref(),
            &r.namespace,
            &r.label_selector,
            &r.field_selector,
            "",
        )
    }

    /// A Get request's scope, the whole request checked; a Get must name
    /// an object.
    pub fn get(r: &GetRequest) -> Result<Scope, RequestError> {
        let scope = Scope::new(r.resource.as_ref(), &r.namespace, &r.name)?;
        if scope.name.is_empty() {
            return Err(RequestError::MissingName);
        }
        Ok(scope)
    }

    /// The scope of listing `resource` (a served type) in `namespace`, for
    /// ListResources.
    pub fn listing(resource: &pb::ResourceRef, ns: &str) -> Result<Scope, RequestError> {
        Scope::new(Some(resource), ns, "")
    }

    /// What authorization is asked about this scope.
    pub fn attributes(&self, verb: Verb) -> Attributes {
        Attributes {
            verb,
            group: self.gvr.group.clone(),
            version: self.gvr.version.clone(),
            resource: self.gvr.resource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn configmaps() -> Option<pb::ResourceRef> {
        Some(pb::ResourceRef {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
        })
    }

    fn list(f: impl FnOnce(&mut ListRequest)) -> Result<Scope, RequestError> {
        let mut request = ListRequest {
            resource: configmaps(),
            ..Default::default()
        };
        f(&mut request);
        Scope::list(&request)
    }

    fn refused(result: Result<Scope, RequestError>) -> String {
        match result {
            Err(RequestError::Input(err)) => err.to_string(),
            other => panic!("not refused for its input: {other:?}"),
        }
    }

    #[test]
    fn a_namespace_is_a_dns1123_label_of_at_most_63() {
        let at = "a".repeat(MAX_NAMESPACE);
        assert_eq!(list(|r| r.namespace = at.clone()).unwrap().namespace, at);
        let over = format!("{at}b");
        assert_eq!(
            refused(list(|r| r.namespace = over.clone())),
            format!("namespace {over:?} is 64 bytes; at most 63 are accepted")
        );
        for bad in ["A", "-a", "a-", "a.b", "a/b", "é"] {
            let message = refused(list(|r| r.namespace = bad.into()));
            assert!(message.contains("DNS-1123 label"), "{bad}: {message}");
        }
        assert_eq!(list(|_| ()).unwrap().namespace, "");
    }

    #[test]
    fn a_two_megabyte_namespace_is_refused_and_quoted_with_a_bound() {
        let huge = "a".repeat(2 << 20);
        let message = refused(list(|r| r.namespace = huge));
        assert!(message.len() < 300, "{message}");
        assert!(
            message.ends_with("(2097152 bytes) is 2097152 bytes; at most 63 are accepted"),
            "{message}"
        );
    }

    #[test]
    fn a_name_is_a_path_segment_of_at_most_253() {
        let get = |name: &str| {
            Scope::get(&GetRequest {
                resource: configmaps(),
                namespace: "ns".into(),
                name: name.into(),
                metadata_only: false,
            })
        };
        assert_eq!(get(&"n".repeat(MAX_NAME)).unwrap().name.len(), MAX_NAME);
        assert!(refused(get(&"n".repeat(MAX_NAME + 1))).contains("at most 253"));
        // A cluster-scoped Get of "ns/x" would otherwise read the cache key
        // of the namespaced object x.
        for bad in ["ns/x", ".", "..", "a%2Fb"] {
            let message = refused(get(bad));
            assert!(
                message.contains("may not be '.' or '..'"),
                "{bad}: {message}"
            );
        }
        assert!(matches!(get(""), Err(RequestError::MissingName)));
        // Names that are not DNS subdomains are still names.
        get("Mixed_Case:ok").unwrap();
    }

    #[test]
    fn a_name_pinned_by_a_field_selector_is_checked_and_authorized() {
        let scope = list(|r| r.field_selector = "metadata.name=a".into()).unwrap();
        assert_eq!(scope.attributes(Verb::List).name, "a");
        let message = refused(list(|r| r.field_selector = "metadata.name=ns/x".into()));
        assert!(message.starts_with("name \"ns/x\" is invalid"), "{message}");
    }

    #[test]
    fn a_resource_has_the_api_servers_shape_and_bounds() {
        let with = |group: &str, version: &str, resource: &str| {
            list(|r| {
                r.resource = Some(pb::ResourceRef {
                    group: group.into(),
                    version: version.into(),
                    resource: resource.into(),
                })
            })
        };
        with("apps", "v1", "deployments").unwrap();
        with("example.com", "v1beta1", "widgets").unwrap();
        assert!(refused(with(&"g".repeat(254), "v1", "x")).contains("at most 253"));
        assert!(refused(with("", &"v".repeat(64), "x")).contains("at most 63"));
        assert!(refused(with("", "v1", &"x".repeat(64))).contains("at most 63"));
        assert!(refused(with("Ex.com", "v1", "x")).contains("DNS-1123 subdomain"));
        assert!(refused(with("", "v1", "config/maps")).contains("DNS-1123 label"));
        assert!(matches!(
            with("", "", "x"),
            Err(RequestError::MissingResource)
        ));
    }

    #[test]
    fn selectors_are_bounded_in_bytes_and_terms() {
        // 100 terms of `!a` are 299 bytes: the term bound is reached first.
        let terms = |n: usize| vec!["!a"; n].join(",");
        list(|r| r.label_selector = terms(MAX_SELECTOR_TERMS)).unwrap();
        assert_eq!(
            refused(list(|r| r.label_selector = terms(MAX_SELECTOR_TERMS + 1))),
            format!(
                "labelSelector {} has 101 terms; at most 100 are accepted",
                quote(&terms(101))
            )
        );
        let values = format!("k in ({})", vec!["v"; MAX_SELECTOR_TERMS + 1].join(","));
        assert!(refused(list(|r| r.label_selector = values)).contains("has 101 terms"));
        let long = format!("a={}", "b".repeat(MAX_SELECTOR_BYTES));
        list(|r| r.label_selector = long[..MAX_SELECTOR_BYTES].into()).unwrap();
        assert!(refused(list(|r| r.label_selector = long.clone())).contains("at most 4096"));
        assert!(
            refused(list(|r| r.field_selector = long.clone())).starts_with("fieldSelector \"a=bbb")
        );
        assert!(
            refused(list(|r| r.field_selector = terms(MAX_SELECTOR_TERMS + 1)))
                .contains("has 101 terms")
        );
    }

    #[test]
    fn tokens_and_resource_versions_are_bounded() {
        let token = format!("{}:{}/{}", u64::MAX, "n".repeat(63), "x".repeat(253));
        assert_eq!(token.len(), MAX_CONTINUE);
        list(|r| r.r#continue = token.clone()).unwrap();
        assert!(refused(list(|r| r.r#continue = format!("{token}x"))).contains("at most 338"));
        let watch = |rv: &str| {
            Scope::watch(&WatchRequest {
                resource: configmaps(),
                resource_version: rv.into(),
                ..Default::default()
            })
        };
        watch(&u64::MAX.to_string()).unwrap();
        assert!(refused(watch(&"9".repeat(21))).contains("at most 20"));
    }

    /// The message bound leaves room for a request with every field at its
    /// bound.
    #[test]
    fn the_largest_valid_request_fits_the_message_bound() {
        let request = ListRequest {
            resource: Some(pb::ResourceRef {
                group: "g".repeat(MAX_GROUP),
                version: "v".repeat(MAX_LABEL),
                resource: "r".repeat(MAX_LABEL),
            }),
            namespace: "n".repeat(MAX_NAMESPACE),
            label_selector: "l".repeat(MAX_SELECTOR_BYTES),
            field_selector: "f".repeat(MAX_SELECTOR_BYTES),
            r#continue: "c".repeat(MAX_CONTINUE),
            limit: u32::MAX,
            metadata_only: true,
        };
        let len = request.encoded_len();
        assert!(len < MAX_REQUEST_BYTES / 4, "{len}");
    }
}
