//! A DER reader with the rules of Go's `golang.org/x/crypto/cryptobyte`,
//! which crypto/x509 parses certificates with: one-byte tags (a high tag
//! number is refused), definite lengths of at most four bytes in their
//! shortest form, INTEGERs minimally encoded, BOOLEANs `00` or `ff`, BIT
//! STRINGs with their padding bits zero, OIDs of at most 31-bit arcs in
//! their shortest form. Each reader method consumes only on success, as
//! cryptobyte's do when their caller gives up on the first failure.

/// DER tags (one byte: class, constructed bit and number).
pub mod tag {
    pub const BOOLEAN: u8 = 0x01;
    pub const INTEGER: u8 = 0x02;
    pub const BIT_STRING: u8 = 0x03;
    pub const OCTET_STRING: u8 = 0x04;
    pub const NULL: u8 = 0x05;
    pub const OID: u8 = 0x06;
    pub const UTF8_STRING: u8 = 0x0c;
    pub const NUMERIC_STRING: u8 = 0x12;
    pub const PRINTABLE_STRING: u8 = 0x13;
    pub const T61_STRING: u8 = 0x14;
    pub const IA5_STRING: u8 = 0x16;
    pub const UTC_TIME: u8 = 0x17;
    pub const GENERALIZED_TIME: u8 = 0x18;
    pub const BMP_STRING: u8 = 0x1e;
    pub const SEQUENCE: u8 = 0x30;
    pub const SET: u8 = 0x31;

    /// A context-specific primitive tag `[n]`.
    pub const fn context(n: u8) -> u8 {
        0x80 | n
    }

    /// A context-specific constructed tag `[n]`.
    pub const fn context_constructed(n: u8) -> u8 {
        0xa0 | n
    }
}

/// A position in DER input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Der<'a>(pub &'a [u8]);

/// One element read: its tag, its contents and the whole element.
#[derive(Debug, Clone, Copy)]
pub struct Element<'a> {
    pub tag: u8,
    pub contents: &'a [u8],
    pub whole: &'a [u8],
}

impl<'a> Der<'a> {
    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the next element has `tag` (cryptobyte's `PeekASN1Tag`).
    pub fn peek(&self, tag: u8) -> bool {
        self.0.first() == Some(&tag)
    }

    /// The next element, whatever its tag (`ReadAnyASN1`).
    pub fn read_any(&mut self) -> Option<Element<'a>> {
        let input = self.0;
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        if tag & 0x1f == 0x1f {
            return None;
        }
        let (length, rest) = if first & 0x80 == 0 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let (bytes, rest) = rest.split_at(count);
            let length = bytes
                .iter()
                .fold(0u64, |length, &b| length << 8 | u64::from(b));
            // Shortest form: the short one below 128, no leading zero byte.
            if length < 128 || bytes[0] == 0 {
                return None;
            }
            (usize::try_from(length).ok()?, rest)
        };
        if rest.len() < length {
            return None;
        }
        let (contents, rest) = rest.split_at(length);
        let whole = &input[..input.len() - rest.len()];
        self.0 = rest;
        Some(Element {
            tag,
            contents,
            whole,
        })
    }

    /// The next element if it has `tag`.
    pub fn read_element(&mut self, tag: u8) -> Option<Element<'a>> {
        let mut ahead = *self;
        let element = ahead.read_any()?;
        (element.tag == tag).then(|| {
            *self = ahead;
            element
        })
    }

    /// The contents of the next element, which must have `tag`
    /// (`ReadASN1`).
    pub fn read(&mut self, tag: u8) -> Option<Der<'a>> {
        self.read_element(tag).map(|e| Der(e.contents))
    }

    /// The contents of the next element if it has `tag`: `Some(None)` when
    /// it has another tag (or nothing is left), `None` when it has the tag
    /// but is malformed (`ReadOptionalASN1`).
    pub fn read_optional(&mut self, tag: u8) -> Option<Option<Der<'a>>> {
        if self.peek(tag) {
            self.read(tag).map(Some)
        } else {
            Some(None)
        }
    }

    /// The bytes of an INTEGER, checked to be minimally encoded.
    pub fn read_integer_bytes(&mut self) -> Option<&'a [u8]> {
        let mut ahead = *self;
        let bytes = ahead.read(tag::INTEGER)?.0;
        minimal_integer(bytes).then(|| {
            *self = ahead;
            bytes
        })
    }

    /// An INTEGER that fits an i64 (`ReadASN1Integer` into an int64).
    pub fn read_i64(&mut self) -> Option<i64> {
        self.read_i64_with_tag(tag::INTEGER)
    }

    /// An INTEGER under `tag` that fits an i64 (`ReadASN1Int64WithTag`).
    pub fn read_i64_with_tag(&mut self, tag: u8) -> Option<i64> {
        let mut ahead = *self;
        let bytes = ahead.read(tag)?.0;
        let value = signed(bytes)?;
        *self = ahead;
        Some(value)
    }

    /// A non-negative INTEGER that fits a u64 (`ReadASN1Integer` into a
    /// uint64).
    pub fn read_u64(&mut self) -> Option<u64> {
        let mut ahead = *self;
        let bytes = ahead.read(tag::INTEGER)?.0;
        if !minimal_integer(bytes)
            || bytes[0] & 0x80 != 0
            || bytes.len() > 9
            || (bytes.len() == 9 && bytes[0] != 0)
        {
            return None;
        }
        let value = bytes.iter().fold(0u64, |v, &b| v << 8 | u64::from(b));
        *self = ahead;
        Some(value)
    }

    /// A BOOLEAN: one byte, `00` or `ff`.
    pub fn read_bool(&mut self) -> Option<bool> {
        let mut ahead = *self;
        let value = match ahead.read(tag::BOOLEAN)?.0 {
            [0x00] => false,
            [0xff] => true,
            _ => return None,
        };
        *self = ahead;
        Some(value)
    }

    /// A BIT STRING: its bytes and its length in bits (`ReadASN1BitString`).
    pub fn read_bit_string(&mut self) -> Option<BitString<'a>> {
        let mut ahead = *self;
        let bytes = ahead.read(tag::BIT_STRING)?.0;
        let (&padding, bytes) = bytes.split_first()?;
        if padding > 7
            || (bytes.is_empty() && padding != 0)
            || bytes
                .last()
                .is_some_and(|&last| last & ((1 << padding) - 1) != 0)
        {
            return None;
        }
        *self = ahead;
        Some(BitString {
            bytes,
            bits: bytes.len() * 8 - usize::from(padding),
        })
    }

    /// An OBJECT IDENTIFIER (`ReadASN1ObjectIdentifier`): its DER contents,
    /// checked to be an OID Go reads.
    pub fn read_oid(&mut self) -> Option<Oid<'a>> {
        let mut ahead = *self;
        let bytes = ahead.read(tag::OID)?.0;
        let oid = Oid(bytes);
        oid.arcs()?;
        *self = ahead;
        Some(oid)
    }
}

/// A BIT STRING's bytes and how many of their bits count.
#[derive(Debug, Clone, Copy)]
pub struct BitString<'a> {
    pub bytes: &'a [u8],
    pub bits: usize,
}

impl BitString<'_> {
    /// Bit `i`, counted from the most significant bit of the first byte
    /// (0 past the end), as Go's `asn1.BitString.At`.
    pub fn at(&self, i: usize) -> bool {
        i < self.bits && self.bytes[i / 8] & (0x80 >> (i % 8)) != 0
    }

    /// The bytes, right-aligned as Go's `RightAlign` (the padding bits
    /// shifted out at the front).
    pub fn right_aligned(&self) -> Vec<u8> {
        let shift = self.bytes.len() * 8 - self.bits;
        if shift == 0 || self.bytes.is_empty() {
            return self.bytes.to_vec();
        }
        let first = self.bytes[0] >> shift;
        std::iter::once(first)
            .chain(
                self.bytes
                    .windows(2)
                    .map(|pair| pair[0] << (8 - shift) | pair[1] >> shift),
            )
            .collect()
    }
}

/// Whether `bytes` are an INTEGER in its shortest form (cryptobyte's
/// `checkASN1Integer`).
pub fn minimal_integer(bytes: &[u8]) -> bool {
    match bytes {
        [] => false,
        [_] => true,
        [0x00, second, ..] => second & 0x80 != 0,
        [0xff, second, ..] => second & 0x80 == 0,
        _ => true,
    }
}

/// A minimal INTEGER's value if it fits an i64.
fn signed(bytes: &[u8]) -> Option<i64> {
    if !minimal_integer(bytes) || bytes.len() > 8 {
        return None;
    }
    let unsigned = bytes.iter().fold(0u64, |v, &b| v << 8 | u64::from(b));
    let shift = 64 - 8 * bytes.len() as u32;
    Some(((unsigned << shift) as i64) >> shift)
}

/// An OBJECT IDENTIFIER, by its DER contents. Go refuses non-minimal
/// encodings, so two OIDs are equal when their bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Oid<'a>(pub &'a [u8]);

impl Oid<'_> {
    /// The arcs, if the bytes are an OID Go reads: not empty, each arc in
    /// at most five bytes without a leading 0x80, below 2^31.
    pub fn arcs(&self) -> Option<Vec<u32>> {
        let mut rest = self.0;
        if rest.is_empty() {
            return None;
        }
        let mut arcs = Vec::new();
        while !rest.is_empty() {
            let mut value: u32 = 0;
            let mut i = 0;
            loop {
                let (&b, tail) = rest.split_first()?;
                if i == 5 || value >= 1 << (31 - 7) || (i == 0 && b == 0x80) {
                    return None;
                }
                rest = tail;
                value = value << 7 | u32::from(b & 0x7f);
                i += 1;
                if b & 0x80 == 0 {
                    break;
                }
            }
            if arcs.is_empty() {
                if value < 80 {
                    arcs.extend([value / 40, value % 40]);
                } else {
                    arcs.extend([2, value - 80]);
                }
            } else {
                arcs.push(value);
            }
        }
        Some(arcs)
    }

    /// The dotted form (`2.5.4.3`), or the hex bytes of one Go would not
    /// read.
    pub fn dotted(&self) -> String {
        match self.arcs() {
            Some(arcs) => arcs
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join("."),
            None => self.0.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_must_be_in_their_shortest_form() {
        assert!(Der(&[0x04, 0x81, 0x05, 1, 2, 3, 4, 5]).read_any().is_none());
        assert!(Der(&[0x04, 0x82, 0x00, 0x80]).read_any().is_none());
        assert!(Der(&[0x04, 0x80, 0x00, 0x00]).read_any().is_none());
        assert!(Der(&[0x1f, 0x20, 0x00]).read_any().is_none(), "high tag");
        let long = [&[0x04u8, 0x81, 0x80][..], &[7; 128]].concat();
        assert_eq!(Der(&long).read_any().unwrap().contents.len(), 128);
        assert!(Der(&[0x04, 0x85, 0, 0, 0, 0, 1]).read_any().is_none());
    }

    #[test]
    fn integers_are_read_as_cryptobyte_reads_them() {
        assert!(minimal_integer(&[0x00, 0x80]));
        assert!(!minimal_integer(&[0x00, 0x7f]));
        assert!(!minimal_integer(&[0xff, 0x80]));
        assert!(minimal_integer(&[0xff, 0x7f]));
        assert!(!minimal_integer(&[]));
        assert_eq!(Der(&[0x02, 0x01, 0xff]).read_i64(), Some(-1));
        assert_eq!(Der(&[0x02, 0x02, 0x00, 0x80]).read_i64(), Some(128));
        assert_eq!(Der(&[0x02, 0x01, 0xff]).read_u64(), None);
        let max = [
            0x02, 0x09, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(Der(&max).read_u64(), Some(u64::MAX));
        assert_eq!(Der(&max).read_i64(), None);
    }

    #[test]
    fn booleans_and_bit_strings_follow_der() {
        assert_eq!(Der(&[0x01, 0x01, 0xff]).read_bool(), Some(true));
        assert_eq!(Der(&[0x01, 0x01, 0x01]).read_bool(), None);
        let bits = Der(&[0x03, 0x02, 0x07, 0x80]).read_bit_string().unwrap();
        assert_eq!(bits.bits, 1);
        assert!(bits.at(0) && !bits.at(1));
        assert!(Der(&[0x03, 0x02, 0x07, 0x81]).read_bit_string().is_none());
        assert!(Der(&[0x03, 0x01, 0x01]).read_bit_string().is_none());
        assert!(Der(&[0x03, 0x00]).read_bit_string().is_none());
        let aligned = BitString {
            bytes: &[0b1010_0000, 0b0100_0000],
            bits: 10,
        };
        assert_eq!(aligned.right_aligned(), [0b0000_0010, 0b1000_0001]);
    }

    #[test]
    fn oids_are_read_as_go_reads_them() {
        assert_eq!(Oid(&[0x55, 0x04, 0x03]).dotted(), "2.5.4.3");
        assert_eq!(
            Oid(&[0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xc2, 0x53, 0x02]).dotted(),
            "1.3.6.1.4.1.57683.2"
        );
        assert_eq!(Oid(&[0x88, 0x37]).arcs(), Some(vec![2, 999]));
        for bad in [
            &[][..],
            &[0x55, 0x80, 0x04],
            &[0x55, 0x88, 0x80, 0x80, 0x80, 0x00],
            &[0x55, 0x84],
        ] {
            assert_eq!(Oid(bad).arcs(), None, "{bad:x?}");
        }
        assert_eq!(
            Oid(&[0x55, 0x87, 0xff, 0xff, 0xff, 0x7f]).arcs(),
            Some(vec![2, 5, (1 << 31) - 1])
        );
    }
}
