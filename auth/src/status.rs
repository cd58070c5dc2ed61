//! The gRPC status of each [`AuthError`]: here, not in the service's
//! error mapping, because the authentication layer refuses a call with it
//! before the service sees the call (and the orphan rule puts the impl
//! with the error).

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::{AuthError, Exceeded};

impl From<AuthError> for Status {
    fn from(err: AuthError) -> Self {
        let message = err.to_string();
        match err {
            AuthError::MissingCredentials(_)
            | AuthError::CertificateNotVerified(_)
            | AuthError::CertificateWithoutUser(_)
            | AuthError::HeaderTooLarge { .. }
            | AuthError::InvalidToken(_)
            | AuthError::TokenRevoked(_)
            | AuthError::IdentityChanged
            | AuthError::CertificateExpired(_) => Status::unauthenticated(message),
            AuthError::Denied { attributes, .. } => {
                let metadata: std::collections::HashMap<String, String> = [
                    ("group".to_owned(), attributes.group.clone()),
                    ("resource".to_owned(), attributes.resource.clone()),
                    ("name".to_owned(), attributes.name.clone()),
                ]
                .into();
                Status::with_error_details(
                    Code::PermissionDenied,
                    message,
                    ErrorDetails::with_error_info(
                        kube_fanout_proto::FORBIDDEN,
                        kube_fanout_proto::ERROR_DOMAIN,
                        metadata,
                    ),
                )
            }
            AuthError::NonResourceDenied { .. } => Status::permission_denied(message),
            // Cheaper than a review: refused at once, told when to retry.
            // The caller's own bound is its quota; the total one is the
            // server's load.
            AuthError::Throttled {
                exceeded,
                retry_after,
                ..
            } => {
                let code = match exceeded {
                    Exceeded::Source(_) => Code::ResourceExhausted,
                    Exceeded::Total => Code::Unavailable,
                };
                let mut details = ErrorDetails::with_retry_info(Some(retry_after));
                details.set_error_info(
                    kube_fanout_proto::TOKEN_REVIEWS_THROTTLED,
                    kube_fanout_proto::ERROR_DOMAIN,
                    std::collections::HashMap::new(),
                );
                Status::with_error_details(code, message, details)
            }
            // The source's own doing, like its review budget.
            AuthError::ShutOut(out) => {
                let mut details = ErrorDetails::with_retry_info(Some(out.retry_after));
                details.set_error_info(
                    kube_fanout_proto::AUTHENTICATION_FAILURES_EXCEEDED,
                    kube_fanout_proto::ERROR_DOMAIN,
                    std::collections::HashMap::new(),
                );
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            // Fail closed: unknown is no, and the caller may retry.
            AuthError::Unavailable { .. } => Status::unavailable(message),
            AuthError::LimitExceeded { .. } => Status::resource_exhausted(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttled_caller_learns_when_to_retry() {
        let throttled = |exceeded| -> Status {
            AuthError::Throttled {
                exceeded,
                limit: "5/s, bursts of 20".into(),
                retry_after: std::time::Duration::from_millis(200),
            }
            .into()
        };
        let own = throttled(Exceeded::Source("10.0.0.1".into()));
        assert_eq!(own.code(), Code::ResourceExhausted);
        assert_eq!(
            own.message(),
            "too many token reviews for unknown tokens from 10.0.0.1: at most 5/s, bursts of 20; retry in 200ms"
        );
        let retry = own.get_details_retry_info().expect("RetryInfo");
        assert_eq!(
            retry.retry_delay,
            Some(std::time::Duration::from_millis(200))
        );
        let info = own.get_details_error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "TokenReviewsThrottled");
        assert_eq!(throttled(Exceeded::Total).code(), Code::Unavailable);
    }
}
