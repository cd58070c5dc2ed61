//! Messages from elsewhere (a reviewer's reason, an API error, a
//! certificate's OID) quoted back to a caller with a bound. Unlike
//! `kube_fanout_core::quote`, which puts a caller's input in quotes and
//! gives its size, these are prose and are shown as they are, only cut.

/// The most characters of a reviewer's message quoted back to a caller.
const QUOTE_LIMIT: usize = 100;

/// `text`, cut to [`QUOTE_LIMIT`] characters.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
