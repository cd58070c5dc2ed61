//! Every way a request can fail, and the one place that maps each to a
//! gRPC status (an [`AuthError`]'s status is the auth crate's own, which
//! its tower layer answers with too; this mapping passes it on). Statuses that a client must act on (Expired, lagging) carry
//! a `google.rpc.ErrorInfo` with a machine-readable reason and the
//! resourceVersion to act on.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use kube_fanout_auth::AuthError;
use kube_fanout_core::{
    filter::FilterError,
    object::{ObjectError, ResourceVersion},
    on_demand::{DiscoveryError, ResolveError},
    paging::PageError,
    quote::quote,
    resource::GroupVersionResource,
    store::ReadError,
    subscription::WatchError,
};

use crate::{input::InputError, list_budget::ListTooLarge};

/// Why a request was refused or a stream ended.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request names no resource.
    #[error(
        "the request names no resource: set resource.version and resource.resource (and resource.group outside the core group)"
    )]
    MissingResource,
    /// The resource is not one this server serves. The served types are
    /// not listed: ListResources shows a caller the ones it may list.
    #[error("resource {} is not served here (ListResources shows the served types you may list)", quote(&.0.to_string()))]
    UnknownResource(GroupVersionResource),
    /// The resource is neither configured nor startable on demand now.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// A request field past its bound or of the wrong shape.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A malformed selector.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// A resourceVersion that is not a number.
    #[error("invalid resourceVersion: {0}")]
    ResourceVersion(#[from] ObjectError),
    /// Get found nothing.
    #[error("{resource} {} not found", quote(.key))]
    NotFound {
        /// The resource type.
        resource: GroupVersionResource,
        /// `namespace/name`.
        key: String,
    },
    /// A Get without a name.
    #[error("the request names no object: set name")]
    MissingName,
    /// A List page could not be cut.
    #[error(transparent)]
    Page(#[from] PageError),
    /// The watch could not start or continue.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The caller is unknown or not allowed.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// An unpaged List larger than one List may be.
    #[error(transparent)]
    ListTooLarge(#[from] ListTooLarge),
}

impl From<ReadError> for RequestError {
    fn from(err: ReadError) -> Self {
        RequestError::Watch(err.into())
    }
}

/// A status whose ErrorInfo names `reason` alone.
fn with_bare_reason(code: Code, message: String, reason: &str) -> Status {
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(
            reason,
            kube_fanout_proto::ERROR_DOMAIN,
            std::collections::HashMap::<String, String>::new(),
        ),
    )
}

/// The status of a type that could not be served: as a type not served
/// (NOT_FOUND) when it is not configured, not allowed on demand, or not
/// served upstream either; RESOURCE_EXHAUSTED over the bound of
/// on-demand types; FAILED_PRECONDITION for a type kube-fanout cannot
/// index or read the fields of; UNAVAILABLE, NotSynced with a retry
/// delay, when discovery failed, and when the server is stopping.
fn resolve_status(err: ResolveError, message: String) -> Status {
    match err {
        ResolveError::NotServed(_) | ResolveError::NotAllowed { .. } => Status::not_found(message),
        ResolveError::Discovery(d) if d.is_unknown() => Status::not_found(message),
        ResolveError::Discovery(d) => match d.as_ref() {
            DiscoveryError::Unindexable(_)
            | DiscoveryError::Resource(
                kube_fanout_core::resource::ResourceError::SelectableField { .. },
            ) => Status::failed_precondition(message),
            _ => not_synced(message),
        },
        ResolveError::TooManyTypes { .. } => Status::resource_exhausted(message),
        ResolveError::ShuttingDown => Status::unavailable(message),
    }
}

/// A status whose ErrorInfo names `reason` and the resourceVersion to act on.
fn with_reason(code: Code, message: String, reason: &str, rv: ResourceVersion) -> Status {
    let metadata: std::collections::HashMap<String, String> =
        [("resourceVersion".to_owned(), rv.to_string())].into();
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, kube_fanout_proto::ERROR_DOMAIN, metadata),
    )
}

/// How long a caller refused for a type not synced yet is told to wait:
/// the API server's own Retry-After while its watch cache initialises
/// starts at 1 s (KEP-4568).
pub const NOT_SYNCED_RETRY_AFTER: Duration = Duration::from_secs(1);

/// UNAVAILABLE for a type whose cache has not synced: ErrorInfo reason
/// NotSynced, and a RetryInfo, as the API server answers 429 with
/// Retry-After while its cache initialises.
fn not_synced(message: String) -> Status {
    let mut details = ErrorDetails::with_error_info(
        kube_fanout_proto::NOT_SYNCED,
        kube_fanout_proto::ERROR_DOMAIN,
        std::collections::HashMap::<String, String>::new(),
    );
    details.set_retry_info(Some(NOT_SYNCED_RETRY_AFTER));
    Status::with_error_details(Code::Unavailable, message, details)
}

impl From<RequestError> for Status {
    fn from(err: RequestError) -> Self {
        let message = err.to_string();
        match err {
            RequestError::MissingResource
            | RequestError::MissingName
            | RequestError::Input(_)
            | RequestError::Filter(_)
            | RequestError::ResourceVersion(_) => Status::invalid_argument(message),
            RequestError::Page(PageError::Token(_)) => Status::invalid_argument(message),
            RequestError::Page(PageError::Read(read)) => RequestError::from(read).into(),
            RequestError::UnknownResource(_) | RequestError::NotFound { .. } => {
                Status::not_found(message)
            }
            RequestError::Resolve(resolve) => resolve_status(resolve, message),
            RequestError::Auth(auth) => auth.into(),
            RequestError::ListTooLarge(_) => Status::resource_exhausted(message),
            RequestError::Watch(watch) => {
                let reason = watch.reason();
                let (code, rv) = match watch {
                    WatchError::Read(ReadError::Expired { oldest, .. }) => {
                        (Code::OutOfRange, Some(oldest))
                    }
                    // The first point past the gap that this replica can
                    // serve exactly; the client takes a new snapshot anyway.
                    WatchError::Read(ReadError::InGap { gap, .. }) => {
                        (Code::OutOfRange, Some(gap.until))
                    }
                    WatchError::Read(ReadError::TooLarge { current, .. }) => {
                        (Code::DeadlineExceeded, Some(current))
                    }
                    WatchError::Read(ReadError::NotSynced) => return not_synced(message),
                    WatchError::ShuttingDown { resume_from }
                    | WatchError::ConnectionRetired { resume_from } => {
                        (Code::Unavailable, Some(resume_from))
                    }
                    WatchError::Lagged { resume_from } => {
                        (Code::ResourceExhausted, Some(resume_from))
                    }
                    WatchError::Removed(_) => {
                        return with_bare_reason(Code::NotFound, message, reason);
                    }
                };
                match rv {
                    Some(rv) => with_reason(code, message, reason, rv),
                    None => Status::new(code, message),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_fanout_core::quote::QUOTE_LIMIT;

    #[test]
    fn expired_carries_a_machine_readable_reason() {
        let status: Status = RequestError::from(ReadError::Expired {
            asked: ResourceVersion(5),
            oldest: ResourceVersion(9),
        })
        .into();
        assert_eq!(status.code(), Code::OutOfRange);
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "Expired");
        assert_eq!(
            info.metadata.get("resourceVersion").map(String::as_str),
            Some("9")
        );
        assert!(status.message().contains("too old"), "{}", status.message());
    }

    #[test]
    fn a_megabyte_of_input_is_not_echoed_back() {
        let huge = "w".repeat(1 << 20);
        let statuses: Vec<Status> = vec![
            RequestError::UnknownResource(GroupVersionResource {
                group: String::new(),
                version: "v1".into(),
                resource: huge.clone(),
            })
            .into(),
            RequestError::NotFound {
                resource: GroupVersionResource {
                    group: String::new(),
                    version: "v1".into(),
                    resource: "configmaps".into(),
                },
                key: huge.clone(),
            }
            .into(),
            RequestError::from(huge.parse::<ResourceVersion>().unwrap_err()).into(),
            RequestError::from(
                kube_fanout_core::filter::Filter::new(
                    "",
                    &format!("{huge}=x"),
                    "",
                    &kube_fanout_core::fields::SelectableFields::default(),
                )
                .unwrap_err(),
            )
            .into(),
            RequestError::from(
                kube_fanout_core::filter::Filter::new(
                    "",
                    "",
                    &format!("{huge}=x"),
                    &kube_fanout_core::fields::SelectableFields::default(),
                )
                .unwrap_err(),
            )
            .into(),
        ];
        for status in statuses {
            let message = status.message();
            assert!(
                message.len() < 600,
                "{} bytes: {:.300}",
                message.len(),
                message
            );
            assert!(
                message.contains(&format!("{}\"… (", "w".repeat(QUOTE_LIMIT - 3))),
                "{message}"
            );
        }
    }

    #[test]
    fn not_synced_is_unavailable_with_its_reason_and_a_retry_delay() {
        let status: Status = RequestError::from(ReadError::NotSynced).into();
        assert_eq!(status.code(), Code::Unavailable);
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "NotSynced");
        let retry = status.get_details_retry_info().expect("RetryInfo");
        assert_eq!(retry.retry_delay, Some(NOT_SYNCED_RETRY_AFTER));
        assert!(
            status.message().contains("not synced"),
            "{}",
            status.message()
        );
    }

    #[test]
    fn a_lagging_subscriber_learns_where_to_resume() {
        let status: Status = RequestError::from(WatchError::Lagged {
            resume_from: ResourceVersion(77),
        })
        .into();
        assert_eq!(status.code(), Code::ResourceExhausted);
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(
            info.metadata.get("resourceVersion").map(String::as_str),
            Some("77")
        );
    }
}
