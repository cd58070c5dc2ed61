//! The API server's DNS-1123 name syntax, shared by the selector parser
//! (label key prefixes) and request validation (namespaces, groups,
//! versions, resources).

/// Whether `s` is a DNS-1123 label of any length: lowercase letters,
/// digits and `-`, starting and ending with a letter or digit.
pub fn is_dns1123_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.starts_with(alnum) && s.ends_with(alnum) && s.chars().all(|c| alnum(c) || c == '-')
}

/// Whether `s` is a DNS-1123 subdomain of any length: DNS-1123 labels
/// separated by `.`.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(is_dns1123_label)
}
