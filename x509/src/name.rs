//! Distinguished names as Go's `parseName` and `pkix.Name.FillFromRDNSequence`
//! read them: a SEQUENCE of SETs of (OID, value) SEQUENCEs, anything after
//! a value ignored, empty RDNs skipped, multi-valued ones flattened in
//! their encoded order (Go does not check DER's sorting of SET OF), every
//! value one of the string types Go knows and valid in its type.

use crate::{
    der::{Der, tag},
    error::ParseError,
};

/// The DER contents of the attribute types the API server reads: CN
/// (2.5.4.3), O (2.5.4.10) and the Kubernetes UID (1.3.6.1.4.1.57683.2).
pub const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// O (2.5.4.10).
pub const ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
/// The Kubernetes UID attribute (1.3.6.1.4.1.57683.2).
pub const UID: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02];

/// A name's attributes, in order, with their values as strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Name {
    /// Each attribute type's DER contents and its value.
    pub attributes: Vec<(Vec<u8>, String)>,
}

impl Name {
    /// Go's `CommonName`: the value of the last CN, or empty.
    pub fn common_name(&self) -> &str {
        self.values(COMMON_NAME).last().unwrap_or_default()
    }

    /// Every value of the attribute type `oid`, in order (`Organization`
    /// for O).
    pub fn values<'a>(&'a self, oid: &'a [u8]) -> impl Iterator<Item = &'a str> + 'a {
        self.attributes
            .iter()
            .filter(move |(t, _)| t == oid)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a whole `Name` element (its tag included) of the `part` (issuer
/// or subject) of a certificate.
pub fn parse(name: &[u8], part: &'static str) -> Result<Name, ParseError> {
    let invalid = |what: &str| ParseError::new(format!("x509: invalid RDNSequence{what} ({part})"));
    let mut rdns = Der(name).read(tag::SEQUENCE).ok_or_else(|| invalid(""))?;
    let mut attributes = Vec::new();
    while !rdns.is_empty() {
        let mut set = rdns.read(tag::SET).ok_or_else(|| invalid(""))?;
        while !set.is_empty() {
            let mut attribute = set
                .read(tag::SEQUENCE)
                .ok_or_else(|| invalid(": invalid attribute"))?;
            let oid = attribute
                .read_oid()
                .ok_or_else(|| invalid(": invalid attribute type"))?;
            let value = attribute
                .read_any()
                .ok_or_else(|| invalid(": invalid attribute value"))?;
            let value = go_string(value.tag, value.contents).map_err(|fault| {
                ParseError::new(format!(
                    "x509: invalid RDNSequence: invalid attribute value: {fault} ({part} attribute {})",
                    oid.dotted()
                ))
            })?;
            attributes.push((oid.0.to_vec(), value));
        }
    }
    Ok(Name { attributes })
}

/// An attribute value as Go's `parseASN1String` reads it, or Go's
/// complaint.
pub fn go_string(tag: u8, value: &[u8]) -> Result<String, String> {
    match tag {
        // T.61, read as Latin-1 as Go (and BoringSSL) do.
        tag::T61_STRING => Ok(value.iter().map(|&b| char::from(b)).collect()),
        tag::PRINTABLE_STRING if value.iter().all(|&b| printable(b)) => Ok(ascii(value)),
        tag::PRINTABLE_STRING => Err("invalid PrintableString".into()),
        tag::UTF8_STRING => {
            String::from_utf8(value.to_vec()).map_err(|_| "invalid UTF-8 string".into())
        }
        tag::BMP_STRING => bmp(value).ok_or_else(|| "invalid BMPString".into()),
        tag::IA5_STRING if value.is_ascii() => Ok(ascii(value)),
        tag::IA5_STRING => Err("invalid IA5String".into()),
        tag::NUMERIC_STRING if value.iter().all(|&b| b.is_ascii_digit() || b == b' ') => {
            Ok(ascii(value))
        }
        tag::NUMERIC_STRING => Err("invalid NumericString".into()),
        other => Err(format!("unsupported string type: {other}")),
    }
}

fn ascii(value: &[u8]) -> String {
    value.iter().map(|&b| char::from(b)).collect()
}

/// Go's PrintableString set, with `*` and `&` that it allows too.
fn printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"'()+,-./ :=?*&".contains(&b)
}

/// A BMPString (UCS-2, big-endian) as Go reads it: even length, one
/// trailing NUL pair dropped, no surrogates or permanent noncharacters.
fn bmp(value: &[u8]) -> Option<String> {
    if !value.len().is_multiple_of(2) {
        return None;
    }
    let value = value.strip_suffix(&[0, 0]).unwrap_or(value);
    value
        .chunks_exact(2)
        .map(|pair| match u16::from_be_bytes([pair[0], pair[1]]) {
            0xfffe | 0xffff | 0xfdd0..=0xfdef => None,
            // Surrogates are no char: refused here.
            unit => char::from_u32(u32::from(unit)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_der::{attr, cn, name, o, tlv};

    #[test]
    fn the_last_cn_and_every_o_are_read_over_every_rdn() {
        let two = parse(&name(&[&[cn("cm-reader")], &[cn("mallory")]]), "subject").unwrap();
        assert_eq!(two.common_name(), "mallory");
        let multi = parse(
            &name(&[
                &[o("b"), cn("first")],
                &[cn("second"), o("a"), cn("third")],
                &[],
                &[o("c"), o("")],
            ]),
            "subject",
        )
        .unwrap();
        assert_eq!(multi.common_name(), "third");
        let groups: Vec<_> = multi.values(ORGANIZATION).collect();
        assert_eq!(groups, ["b", "a", "c", ""]);
        assert_eq!(parse(&name(&[]), "subject").unwrap().common_name(), "");
    }

    #[test]
    fn string_types_are_read_as_go_reads_them() {
        let value = |tag: u8, bytes: &[u8]| {
            parse(&name(&[&[attr(COMMON_NAME, tag, bytes)]]), "subject")
                .map(|n| n.common_name().to_owned())
        };
        assert_eq!(value(tag::UTF8_STRING, "é☃".as_bytes()).unwrap(), "é☃");
        assert!(value(tag::UTF8_STRING, b"a\xffb").is_err());
        assert!(value(tag::UTF8_STRING, b"\xed\xa0\x80").is_err());
        assert_eq!(value(tag::PRINTABLE_STRING, b"a-b *&").unwrap(), "a-b *&");
        assert!(value(tag::PRINTABLE_STRING, b"a_b").is_err());
        assert!(value(tag::PRINTABLE_STRING, b"a@b").is_err());
        assert_eq!(value(tag::IA5_STRING, b"a@b_\x00").unwrap(), "a@b_\0");
        assert!(value(tag::IA5_STRING, b"\x80").is_err());
        assert_eq!(value(tag::NUMERIC_STRING, b"12 3").unwrap(), "12 3");
        assert!(value(tag::NUMERIC_STRING, b"12a").is_err());
        assert_eq!(value(tag::T61_STRING, b"caf\xe9").unwrap(), "café");
        assert_eq!(
            value(tag::BMP_STRING, &[0, b'h', 0x26, 0x03, 0, 0]).unwrap(),
            "h☃"
        );
        assert_eq!(value(tag::BMP_STRING, &[0, 0, 0, 0]).unwrap(), "\0");
        for bad in [&[0, b'h', 0][..], &[0xd8, 0], &[0xff, 0xfe], &[0xfd, 0xd0]] {
            assert!(value(tag::BMP_STRING, bad).is_err(), "{bad:?}");
        }
        for other in [0x1a, 0x1c, 0x04, 0x2c, 0x80] {
            assert!(value(other, b"x").is_err(), "{other:#x}");
        }
    }

    #[test]
    fn der_go_refuses_is_refused() {
        for bad in [
            vec![0x30, 0x81, 0x00],
            tlv(tag::SEQUENCE, &tlv(tag::SEQUENCE, &cn("a"))),
            name(&[&[tlv(tag::SET, &[])]]),
            name(&[&[attr(&[0x55, 0x80, 0x04], tag::UTF8_STRING, b"a")]]),
            name(&[&[tlv(tag::SEQUENCE, &tlv(tag::OID, COMMON_NAME))]]),
        ] {
            assert!(parse(&bad, "subject").is_err(), "{bad:x?}");
        }
        // Anything after the value is ignored.
        let trailing = name(&[&[tlv(
            tag::SEQUENCE,
            &[
                tlv(tag::OID, ORGANIZATION),
                tlv(tag::UTF8_STRING, b"g"),
                tlv(tag::INTEGER, &[1]),
            ]
            .concat(),
        )]]);
        let parsed = parse(&trailing, "subject").unwrap();
        assert_eq!(parsed.values(ORGANIZATION).collect::<Vec<_>>(), ["g"]);
    }
}
