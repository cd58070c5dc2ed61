//! How a request field breaks its bound or its shape: what validation
//! finds and the error mapping reports. Apart from both so that neither
//! imports the other.

/// A field of a request that breaks its bound or its shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Longer than its bound.
    #[error("{field} {quoted} is {len} bytes; at most {max} are accepted")]
    TooLong {
        /// The request field.
        field: &'static str,
        /// The input, quoted with a bound.
        quoted: String,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// More selector terms than the bound.
    #[error("{field} {quoted} has {terms} terms; at most {max} are accepted")]
    TooManyTerms {
        /// The request field.
        field: &'static str,
        /// The input, quoted with a bound.
        quoted: String,
        /// How many terms it has (at least).
        terms: usize,
        /// The bound.
        max: usize,
    },
    /// Not of the shape the API server accepts.
    #[error("{field} {quoted} is invalid: {rule}")]
    Invalid {
        /// The request field.
        field: &'static str,
        /// The input, quoted with a bound.
        quoted: String,
        /// The rule it breaks.
        rule: &'static str,
    },
}
