//! Quoting a caller's input in an error message, with a bound: every
//! layer that names bad input in an error (selectors, names, tokens,
//! users) quotes it this one way.

/// How many characters of a caller's input an error message quotes.
pub const QUOTE_LIMIT: usize = 100;

/// Quotes `input` for an error message, bounded: a name or selector of a
/// megabyte is shown as its first [`QUOTE_LIMIT`] characters and its size,
/// so a bad request cannot make the answer (or a log line) that large.
pub fn quote(input: &str) -> Quoted<'_> {
    Quoted(input)
}

/// `input` in quotes, at most [`QUOTE_LIMIT`] characters of it (see [`quote`]).
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(&'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.char_indices().nth(QUOTE_LIMIT) {
            None => write!(f, "{:?}", self.0),
            Some((cut, _)) => write!(f, "{:?}… ({} bytes)", &self.0[..cut], self.0.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_input_is_quoted_whole_up_to_the_limit_and_cut_past_it() {
        assert_eq!(quote("v1/nope").to_string(), r#""v1/nope""#);
        let limit = "é".repeat(QUOTE_LIMIT);
        assert_eq!(quote(&limit).to_string(), format!("{limit:?}"));
        let over = format!("{limit}x");
        assert_eq!(
            quote(&over).to_string(),
            format!("{limit:?}… ({} bytes)", over.len()),
            "cut on a character boundary, counted in bytes"
        );
    }
}
