//! RFC 3339 times as metav1.Time and metav1.MicroTime read them from JSON
//! (Go's `time.Parse` with `time.RFC3339` and `RFC3339Micro`), to seconds
//! and nanoseconds since the Unix epoch.

/// How many fractional digits a time carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fraction {
    /// Any number, or none (metav1.Time: `time.RFC3339`).
    Any,
    /// Exactly six (metav1.MicroTime: `2006-01-02T15:04:05.000000Z07:00`).
    Micro,
}

/// The seconds of the zero `time.Time` (0001-01-01T00:00:00Z), which Go
/// writes as an empty message.
pub(crate) const ZERO_SECONDS: i64 = -62_135_596_800;

/// Parses `s`: `YYYY-MM-DDTHH:MM:SS`, a fraction, then `Z` or `±HH:MM`,
/// each number in range as Go checks it (the day within its month).
/// Returns the Unix seconds (floored) and the nanoseconds.
pub(crate) fn parse(s: &str, fraction: Fraction) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    if !(1..=12).contains(&month) {
        return None;
    }
    let day = digits(&b[8..10])?;
    if day < 1 || day > days_in(month, year) {
        return None;
    }
    let (hour, min, sec) = (
        digits(&b[11..13])?,
        digits(&b[14..16])?,
        digits(&b[17..19])?,
    );
    if hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos = 0u32;
    let separator = rest
        .first()
        .is_some_and(|c| *c == b'.' || (fraction == Fraction::Micro && *c == b','));
    if separator && rest.get(1).is_some_and(u8::is_ascii_digit) {
        let n = 1 + rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if fraction == Fraction::Micro && n != 7 {
            return None;
        }
        // Go reads at most nine digits and drops the rest.
        let kept = &rest[1..n.min(10)];
        nanos = digits(kept)? as u32 * 10u32.pow(9 - kept.len() as u32);
        rest = &rest[n..];
    } else if fraction == Fraction::Micro {
        return None;
    }
    let offset = match rest {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (h, m) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return None;
            }
            let offset = (h * 60 + m) * 60;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + min * 60 + sec - offset, nanos))
}

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |n, c| {
        c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
    })
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard
/// Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_go_reads_them() {
        assert_eq!(parse("1970-01-01T00:00:00Z", Fraction::Any), Some((0, 0)));
        assert_eq!(
            parse("2024-02-29T12:34:56Z", Fraction::Any),
            Some((1_709_210_096, 0))
        );
        assert_eq!(
            parse("2024-02-29T13:34:56+01:00", Fraction::Any),
            Some((1_709_210_096, 0))
        );
        assert_eq!(
            parse("1969-12-31T23:59:59.5Z", Fraction::Any),
            Some((-1, 500_000_000))
        );
        assert_eq!(
            parse("0001-01-01T00:00:00Z", Fraction::Any),
            Some((ZERO_SECONDS, 0))
        );
        assert_eq!(
            parse("2024-01-01T00:00:00.1234567891Z", Fraction::Any),
            Some((1_704_067_200, 123_456_789))
        );
        assert_eq!(
            parse("2024-01-01T00:00:00.123456Z", Fraction::Micro),
            Some((1_704_067_200, 123_456_000))
        );
    }

    #[test]
    fn times_go_refuses_are_refused() {
        for bad in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:60Z",
            "2024-01-01t00:00:00Z",
            "2024-01-01T00:00:00z",
            "2024-01-01T00:00:00+24:00",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
        ] {
            assert_eq!(parse(bad, Fraction::Any), None, "{bad}");
        }
        assert_eq!(
            parse("2024-01-01T00:00:00Z", Fraction::Micro),
            None,
            "MicroTime needs six digits"
        );
        assert_eq!(parse("2024-01-01T00:00:00.12345Z", Fraction::Micro), None);
    }
}
