//! Timestamps as the API server reads and prints them: Go's
//! `time.Parse(time.RFC3339, ..)` (its fast path and the general parser
//! it falls back to, which accepts a little more), ages as
//! apimachinery's `duration.HumanDuration` of `time.Since`, and the UTC
//! RFC 3339 form `metav1.Time` is written in.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, for times in years 0 to 9999 and
/// the current time; wide enough that differences never overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant(i128);

/// Unix seconds of Go's zero `time.Time`, 0001-01-01T00:00:00Z, which
/// `metav1.Time` treats as unset.
const ZERO_TIME_UNIX: i64 = -62_135_596_800;

const NANOS: i128 = 1_000_000_000;

impl Instant {
    /// Go's zero `time.Time`.
    pub(crate) const ZERO: Instant = Instant(ZERO_TIME_UNIX as i128 * NANOS);

    /// The instant `time`; times before the epoch count back from it.
    pub(crate) fn of(time: SystemTime) -> Instant {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => Instant(after.as_nanos() as i128),
            Err(before) => Instant(-(before.duration().as_nanos() as i128)),
        }
    }

    /// Go's `time.Time.IsZero`: 0001-01-01T00:00:00Z.
    pub(crate) fn is_zero(self) -> bool {
        self == Instant::ZERO
    }

    /// Go's `t.Sub(u)`: the duration in nanoseconds, saturated to int64
    /// as Go saturates it.
    pub(crate) fn sub(self, earlier: Instant) -> i64 {
        let d = self.0 - earlier.0;
        d.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// Writes the instant as `metav1.Time` encodes one: UTC, whole
    /// seconds, `2006-01-02T15:04:05Z`.
    pub(crate) fn rfc3339(self) -> String {
        let seconds = self.0.div_euclid(NANOS) as i64;
        let days = seconds.div_euclid(86_400);
        let of_day = seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            of_day / 3600,
            of_day / 60 % 60,
            of_day % 60
        )
    }
}

/// Parses `s` as Go's `time.Parse(time.RFC3339, s)` does, or None where Go
/// returns an error.
pub(crate) fn parse_rfc3339(s: &str) -> Option<Instant> {
    let b = s.as_bytes();
    // Both of Go's paths read `2006-01-02T` the same way: four digits, two
    // digits, two digits, exact separators.
    if b.len() < 11 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let mut rest = &b[11..];
    // The hour: the fast path wants two digits; the general parser, which
    // Go falls back to, takes one or two.
    let hour_len = if rest.len() >= 2 && rest[1].is_ascii_digit() {
        2
    } else {
        1
    };
    let hour = digits(rest.get(..hour_len)?)?;
    rest = &rest[hour_len..];
    if rest.first() != Some(&b':') {
        return None;
    }
    let minute = digits(rest.get(1..3)?)?;
    if rest.get(3) != Some(&b':') {
        return None;
    }
    let second = digits(rest.get(4..6)?)?;
    rest = &rest[6..];
    if !(1..=12).contains(&month) || hour >= 24 || minute >= 60 || second >= 60 {
        return None;
    }
    if day < 1 || day > days_in(month, year) {
        return None;
    }
    // A fraction of a second, after '.' (or ',' in the general parser),
    // read to nanoseconds: digits past the ninth are dropped.
    let mut nanos: i64 = 0;
    if rest.len() >= 2 && (rest[0] == b'.' || rest[0] == b',') && rest[1].is_ascii_digit() {
        let n = 1 + rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let fraction = &rest[1..n];
        for i in 0..9 {
            nanos = nanos * 10 + fraction.get(i).map_or(0, |d| i64::from(d - b'0'));
        }
        rest = &rest[n..];
    }
    // The zone: "Z", or ±hh:mm. The general parser allows an offset of up
    // to 24 hours and 60 minutes (the fast path, tried first, stops at 23
    // and 59; the general parser then takes the rest).
    let offset = match rest {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = digits(&[*h1, *h2])?;
            let minutes = digits(&[*m1, *m2])?;
            if hours > 24 || minutes > 60 {
                return None;
            }
            let offset = (hours * 60 + minutes) * 60;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some(Instant(seconds as i128 * NANOS + nanos as i128))
}

/// The value of a run of ASCII digits (None if any byte is not one).
fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (the inverse of
/// [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// apimachinery's `duration.HumanDuration`: about two or three
/// significant figures of a duration in nanoseconds; "0s" for the last
/// two seconds of clock skew, "<invalid>" before that.
pub(crate) fn human_duration(d: i64) -> String {
    const SECOND: i64 = 1_000_000_000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    // Go's int(d.Seconds()): truncated toward zero.
    let seconds = d / SECOND;
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d / MINUTE;
    if minutes < 10 {
        let s = d / SECOND % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d / HOUR;
    if hours < 8 {
        let m = d / MINUTE % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{h}h", hours / 24);
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = hours / 24 % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{dy}d", hours / 24 / 365);
    }
    format!("{}y", hours / 24 / 365)
}

/// The clock a Table is printed at: every age in it is measured to `now`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    now: Instant,
}

impl Clock {
    /// A clock reading `now`.
    pub(crate) fn at(now: SystemTime) -> Clock {
        Clock {
            now: Instant::of(now),
        }
    }

    /// `duration.HumanDuration(time.Since(t))`.
    pub(crate) fn since(self, t: Instant) -> String {
        human_duration(self.now.sub(t))
    }

    /// The printers' `translateTimestampSince` of a `metav1.Time` (or
    /// `MicroTime`) given as its JSON string, or absent: "<unknown>" for
    /// an unset or zero time, else its age.
    pub(crate) fn age(self, timestamp: Option<Instant>) -> String {
        match timestamp {
            Some(t) if !t.is_zero() => self.since(t),
            _ => "<unknown>".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const S: i64 = 1_000_000_000;

    /// Expected values are apimachinery's own duration_test.go cases.
    #[test]
    fn durations_read_as_apimachinery_writes_them() {
        let cases: &[(i64, &str)] = &[
            (-2 * S, "<invalid>"),
            (-S - S / 2, "0s"),
            (-S + 1, "0s"),
            (0, "0s"),
            (S, "1s"),
            (119 * S, "119s"),
            (2 * 60 * S, "2m"),
            (2 * 60 * S + 10 * S, "2m10s"),
            (9 * 60 * S + 59 * S, "9m59s"),
            (10 * 60 * S, "10m"),
            (179 * 60 * S, "179m"),
            (3 * 3600 * S, "3h"),
            (3 * 3600 * S + 30 * 60 * S, "3h30m"),
            (7 * 3600 * S + 59 * 60 * S, "7h59m"),
            (8 * 3600 * S, "8h"),
            (47 * 3600 * S + 59 * 60 * S, "47h"),
            (48 * 3600 * S, "2d"),
            (48 * 3600 * S + 3600 * S, "2d1h"),
            (8 * 24 * 3600 * S, "8d"),
            (2 * 365 * 24 * 3600 * S - S, "729d"),
            (2 * 365 * 24 * 3600 * S, "2y"),
            (2 * 365 * 24 * 3600 * S + 24 * 3600 * S, "2y1d"),
            (8 * 365 * 24 * 3600 * S, "8y"),
            (i64::MAX, "292y"),
        ];
        for &(d, want) in cases {
            assert_eq!(human_duration(d), want, "{d} ns");
        }
    }

    #[test]
    fn rfc3339_reads_as_go_reads_it() {
        let at = |s| parse_rfc3339(s).map(|t| t.rfc3339());
        assert_eq!(
            at("2026-12-07T13:04:05Z").as_deref(),
            Some("2026-12-07T13:04:05Z")
        );
        assert_eq!(
            at("2026-12-07T13:04:05+01:30").as_deref(),
            Some("2026-12-07T11:34:05Z")
        );
        assert_eq!(
            at("2026-12-07T13:04:05.999999999-00:30").as_deref(),
            Some("2026-12-07T13:34:05Z")
        );
        assert_eq!(
            at("2024-02-29T00:00:00Z").as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        // Go's general parser: a one-digit hour, a comma, a 24-hour offset.
        assert_eq!(
            at("2026-12-07T3:04:05Z").as_deref(),
            Some("2026-12-07T03:04:05Z")
        );
        assert_eq!(
            at("2026-12-07T03:04:05,5Z").as_deref(),
            Some("2026-12-07T03:04:05Z")
        );
        assert_eq!(
            at("2026-12-07T03:04:05+24:00").as_deref(),
            Some("2026-12-06T03:04:05Z")
        );
        for bad in [
            "",
            "2026-12-07",
            "2026-12-07 03:04:05Z",
            "2026-12-07t03:04:05Z",
            "2026-13-07T03:04:05Z",
            "2023-02-29T03:04:05Z",
            "2026-12-07T24:00:00Z",
            "2026-12-07T03:60:00Z",
            "2026-12-07T03:04:60Z",
            "2026-12-07T03:04:05z",
            "2026-12-07T03:04:05",
            "2026-12-07T03:04:05+25:00",
            "2026-12-07T03:04:05+0100",
            "2026-12-07T03:04:05Zjunk",
            "26-12-07T03:04:05Z",
        ] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ages_are_measured_to_the_clock_and_zero_times_are_unknown() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock = Clock::at(now);
        let hour_ago = parse_rfc3339(&Instant::of(now - Duration::from_secs(3 * 3600)).rfc3339());
        assert_eq!(clock.age(hour_ago), "3h");
        assert_eq!(clock.age(None), "<unknown>");
        assert_eq!(
            clock.age(parse_rfc3339("0001-01-01T00:00:00Z")),
            "<unknown>"
        );
        assert_eq!(
            clock.age(parse_rfc3339("0001-01-01T01:00:00+01:00")),
            "<unknown>"
        );
        assert_eq!(
            clock.age(parse_rfc3339("9999-01-01T00:00:00Z")),
            "<invalid>"
        );
    }
}
