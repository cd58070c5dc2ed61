//! Why a Table could not be printed. Every case means the same to a
//! caller serving the API: pass the request on to the API server, which
//! answers it (with its Table, or with its own error).

/// A Table that cannot be printed here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrinterError {
    /// An object given to print is not a JSON object.
    #[error("an object to print as a Table is not JSON: {0}")]
    NotJson(String),
    /// An object holds a value the API server could not have decoded (a
    /// timestamp that is not RFC 3339, say), so it would not print it either.
    #[error("an object to print as a Table holds {what}")]
    Unreadable {
        /// What the object holds.
        what: &'static str,
    },
    /// The API server's printer fails on this object (an owner reference
    /// with an apiVersion of two slashes, say): it answers with an error,
    /// not a Table.
    #[error("the API server cannot print this object as a Table: {0}")]
    Unprintable(&'static str),
    /// A custom resource's printer column cannot be printed here as the API
    /// server prints it (a JSONPath it cannot parse, or one with `range`).
    #[error("custom resource printer column {index} (counted from 0): {reason}")]
    Column {
        /// Which of the CRD version's additionalPrinterColumns.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A CustomResourceDefinition given to take printer columns from does
    /// not have the version asked for, or is not a CRD.
    #[error("not a CustomResourceDefinition with version {version:?}")]
    NoSuchVersion {
        /// The version asked for.
        version: String,
    },
}
