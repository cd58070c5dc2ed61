//! The error of every parser in this crate.

/// Why Go cannot parse a certificate: its own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

impl ParseError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        ParseError(message.into())
    }
}
