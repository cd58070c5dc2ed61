//! The protobuf wire primitives the encoder writes: varints, tags, and a
//! length-delimited field whose length is known only after its content.

/// Wire type of a varint field (bool and the integers).
pub(crate) const VARINT: u32 = 0;
/// Wire type of a 64-bit field (double).
pub(crate) const FIXED64: u32 = 1;
/// Wire type of a length-delimited field (string, bytes, message).
pub(crate) const LEN: u32 = 2;

/// Appends `v` as a varint.
pub(crate) fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// The bytes of a varint of `v`.
pub(crate) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The encoded tag of field `number` with wire type `wire`.
pub(crate) fn tag(number: u32, wire: u32) -> Vec<u8> {
    let mut t = Vec::with_capacity(2);
    varint(&mut t, u64::from(number << 3 | wire));
    t
}

/// Appends a length-delimited field's bytes: its tag, length and `bytes`.
pub(crate) fn len_field(buf: &mut Vec<u8>, tag: &[u8], bytes: &[u8]) {
    buf.extend_from_slice(tag);
    varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

/// Starts a length-delimited value whose length is not known yet: one byte
/// is kept for it (enough below 128 bytes, the common case), and
/// [`end_len`] writes it once the content follows.
pub(crate) fn begin_len(buf: &mut Vec<u8>) -> usize {
    buf.push(0);
    buf.len() - 1
}

/// Writes the length of the content after the byte [`begin_len`] kept at
/// `at`, moving the content up when the length needs more than that byte.
pub(crate) fn end_len(buf: &mut Vec<u8>, at: usize) {
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
        return;
    }
    let extra = varint_len(len as u64) - 1;
    let end = buf.len();
    buf.resize(end + extra, 0);
    buf.copy_within(at + 1..end, at + 1 + extra);
    let mut v = len as u64;
    let mut i = at;
    while v >= 0x80 {
        buf[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    buf[i] = v as u8;
}

/// Reads a varint at the front of `bytes`: its value and length.
pub(crate) fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_past_one_byte_moves_the_content_up() {
        for len in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000] {
            let mut buf = vec![9u8];
            let at = begin_len(&mut buf);
            buf.extend((0..len).map(|i| i as u8));
            end_len(&mut buf, at);
            let mut want = vec![9u8];
            varint(&mut want, len as u64);
            want.extend((0..len).map(|i| i as u8));
            assert_eq!(buf, want, "content of {len} bytes");
            assert_eq!(varint_len(len as u64), want.len() - 1 - len);
        }
    }

    #[test]
    fn varints_read_back() {
        for v in [0u64, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut buf = Vec::new();
            varint(&mut buf, v);
            assert_eq!(read_varint(&buf), Some((v, buf.len())));
        }
        assert_eq!(read_varint(&[0x80]), None, "a varint cut short");
    }
}
