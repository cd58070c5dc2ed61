//! DER pieces for the unit tests.

use crate::{
    der::tag,
    name::{COMMON_NAME, ORGANIZATION},
};

/// One DER element, its length in the shortest form.
pub fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = contents.len();
    if len < 128 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(contents);
    out
}

/// An attribute: its type's DER contents, a value tag and bytes.
pub fn attr(oid: &[u8], value_tag: u8, value: &[u8]) -> Vec<u8> {
    tlv(
        tag::SEQUENCE,
        &[tlv(tag::OID, oid), tlv(value_tag, value)].concat(),
    )
}

pub fn cn(value: &str) -> Vec<u8> {
    attr(COMMON_NAME, tag::UTF8_STRING, value.as_bytes())
}

pub fn o(value: &str) -> Vec<u8> {
    attr(ORGANIZATION, tag::UTF8_STRING, value.as_bytes())
}

/// A name of RDNs, each a set of attributes.
pub fn name(rdns: &[&[Vec<u8>]]) -> Vec<u8> {
    let sets: Vec<Vec<u8>> = rdns
        .iter()
        .map(|set| tlv(tag::SET, &set.concat()))
        .collect();
    tlv(tag::SEQUENCE, &sets.concat())
}
