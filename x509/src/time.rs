//! A certificate's validity times as Go reads them: cryptobyte parses a
//! UTCTime with Go's `time.Parse` layout `060102150405Z0700` (falling back
//! to `0601021504Z0700`, minutes only) and a GeneralizedTime with
//! `20060102150405Z0700`, and refuses any text that does not print back
//! the same. So the digits are exactly those of the layout (no fraction of
//! a second), each field in its range (the day within its month, seconds
//! up to 59), and the zone is `Z` or a non-zero `+hhmm`/`-hhmm` offset
//! (`+0000` prints as `Z`). UTCTime's years 50-99 are 1950-1999.

use crate::der::tag;

/// An instant, in seconds since the Unix epoch (negative before it).
pub type Seconds = i64;

/// The instant of a time element (`tag` and contents), if Go reads it.
pub fn parse(tag: u8, text: &[u8]) -> Option<Seconds> {
    match tag {
        tag::UTC_TIME => utc_time(text),
        tag::GENERALIZED_TIME => generalized_time(text),
        _ => None,
    }
}

fn utc_time(text: &[u8]) -> Option<Seconds> {
    let (digits, offset) = split_zone(text)?;
    let (date, seconds) = match digits.len() {
        12 => (&digits[..10], number(&digits[10..12])?),
        10 => (digits, 0),
        _ => return None,
    };
    let yy = number(&date[..2])?;
    // time.Parse's pivot is 69; cryptobyte then moves 2050-2068 back a
    // century: the years 50-99 are 1950-1999, 00-49 2000-2049.
    let year = if yy >= 50 { 1900 + yy } else { 2000 + yy };
    instant(year, &date[2..10], seconds, offset)
}

fn generalized_time(text: &[u8]) -> Option<Seconds> {
    let (digits, offset) = split_zone(text)?;
    if digits.len() != 14 {
        return None;
    }
    let year = number(&digits[..4])?;
    instant(year, &digits[4..12], number(&digits[12..14])?, offset)
}

/// The digits before the zone, and the zone's offset east of UTC in
/// seconds.
fn split_zone(text: &[u8]) -> Option<(&[u8], i64)> {
    if let Some(digits) = text.strip_suffix(b"Z") {
        return Some((digits, 0));
    }
    if text.len() < 5 {
        return None;
    }
    let (digits, zone) = text.split_at(text.len() - 5);
    let sign = match zone[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (hours, minutes) = (number(&zone[1..3])?, number(&zone[3..5])?);
    // A zero offset prints as "Z", and 60 minutes as the next hour.
    if hours > 24 || minutes > 59 || (hours == 0 && minutes == 0) {
        return None;
    }
    Some((digits, sign * (hours * 3600 + minutes * 60)))
}

/// The instant of `year` and `MMDDhhmm` with `seconds`, at `offset`.
fn instant(year: i64, mmddhhmm: &[u8], seconds: i64, offset: i64) -> Option<Seconds> {
    let month = number(&mmddhhmm[0..2])?;
    let day = number(&mmddhhmm[2..4])?;
    let hour = number(&mmddhhmm[4..6])?;
    let minute = number(&mmddhhmm[6..8])?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in(month, year)
        || hour > 23
        || minute > 59
        || seconds > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3_600 + minute * 60 + seconds - offset)
}

/// Two or four ASCII digits as a number.
fn number(digits: &[u8]) -> Option<i64> {
    digits.iter().try_fold(0i64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
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

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
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

    fn utc(text: &str) -> Option<Seconds> {
        parse(tag::UTC_TIME, text.as_bytes())
    }

    fn generalized(text: &str) -> Option<Seconds> {
        parse(tag::GENERALIZED_TIME, text.as_bytes())
    }

    #[test]
    fn utc_time_is_read_to_the_second_with_its_century_rule() {
        assert_eq!(utc("700101000000Z"), Some(0));
        assert_eq!(utc("500101000000Z"), Some(-631_152_000));
        assert_eq!(utc("491231235959Z"), Some(2_524_607_999));
        // Minutes only, as Go's fallback layout allows.
        assert_eq!(utc("7001010001Z"), Some(60));
        // A zone offset: the instant in UTC.
        assert_eq!(utc("700101010000+0100"), Some(0));
        assert_eq!(utc("691231230000-0100"), Some(0));
    }

    #[test]
    fn text_that_does_not_print_back_the_same_is_refused() {
        for bad in [
            "700101000000",
            "700101000000+0000",
            "700101000000-0000",
            "700101000060Z",
            "700101240000Z",
            "700132000000Z",
            "700229000000Z",
            "701301000000Z",
            "700101000000+0160",
            "700101000000+2500",
            "70010100000Z",
            "7001010000000Z",
            "70010100000aZ",
            "700101000000z",
        ] {
            assert_eq!(utc(bad), None, "{bad}");
        }
        assert_eq!(
            utc("000229000000Z"),
            Some(951_782_400),
            "2000 is a leap year"
        );
    }

    #[test]
    fn generalized_time_has_four_digit_years_and_no_fractions() {
        assert_eq!(generalized("19700101000000Z"), Some(0));
        assert_eq!(generalized("20500301000000Z"), Some(2_529_705_600));
        assert_eq!(generalized("00000101000000Z"), Some(-62_167_219_200));
        for bad in [
            "19700101000000.5Z",
            "197001010000Z",
            "21000229000000Z",
            "19700101000000",
        ] {
            assert_eq!(generalized(bad), None, "{bad}");
        }
        assert_eq!(generalized("20000229000000Z"), Some(951_782_400));
        assert_eq!(parse(tag::INTEGER, b"700101000000Z"), None);
    }
}
