//! What can go wrong encoding an object.

use std::fmt;

/// How many characters of an input an error message quotes.
const QUOTE_LIMIT: usize = 100;

/// Why an object could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    /// The kind has no protobuf encoding here (not a built-in type of the
    /// pinned version, or one without a protobuf form, like Table).
    #[error("{kind} of {api_version} has no Kubernetes protobuf encoding here")]
    Unsupported {
        /// The object's apiVersion, quoted.
        api_version: Quoted,
        /// The object's kind, quoted.
        kind: Quoted,
    },
    /// The JSON is not an object of the kind, as Kubernetes' decoder
    /// would read it: the serde_json error, its message bounded.
    #[error("invalid JSON for {kind}: {message} (line {line}, column {column})")]
    Json {
        /// The kind being read.
        kind: String,
        /// What is wrong, at most about a hundred characters of input quoted.
        message: Quoted,
        /// Where in the JSON.
        line: usize,
        /// Where in the line.
        column: usize,
    },
    /// A watch event type the API server does not send.
    #[error("watch event type {0} is none of ADDED, MODIFIED, DELETED, BOOKMARK, ERROR")]
    EventType(Quoted),
}

impl TranscodeError {
    pub(crate) fn json(kind: &str, e: &serde_json::Error) -> Self {
        TranscodeError::Json {
            kind: kind.to_owned(),
            message: Quoted::plain(&e.to_string()),
            line: e.line(),
            column: e.column(),
        }
    }
}

/// An input in an error message, at most [`QUOTE_LIMIT`] characters of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quoted {
    text: String,
    quotes: bool,
}

impl Quoted {
    /// `input`, in quotes.
    pub(crate) fn new(input: &str) -> Self {
        Quoted {
            text: cut(input),
            quotes: true,
        }
    }

    /// A message that quotes input itself (serde_json's, or the encoder's
    /// own, already bounded), cut at a few times the bound.
    fn plain(message: &str) -> Self {
        Quoted {
            text: cut_at(message, 3 * QUOTE_LIMIT),
            quotes: false,
        }
    }
}

fn cut(input: &str) -> String {
    cut_at(input, QUOTE_LIMIT)
}

fn cut_at(input: &str, limit: usize) -> String {
    match input.char_indices().nth(limit) {
        None => input.to_owned(),
        Some((at, _)) => format!("{}… ({} bytes)", &input[..at], input.len()),
    }
}

impl fmt::Display for Quoted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.quotes {
            write!(f, "{:?}", self.text)
        } else {
            f.write_str(&self.text)
        }
    }
}

/// `input` quoted for a message built inside the encoder.
pub(crate) fn bounded(input: &str) -> Quoted {
    Quoted::new(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_cut_in_messages() {
        let long = "x".repeat(10_000);
        let shown = bounded(&long).to_string();
        assert!(shown.len() < 200, "{shown}");
        assert!(shown.ends_with("(10000 bytes)\""), "{shown}");
        assert_eq!(bounded("Pod").to_string(), "\"Pod\"");
    }
}
