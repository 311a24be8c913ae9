//! Dates and times as numbers and as ISO 8601 text, without a calendar crate: the access
//! log's timestamps, and how a database value holds them (days since 1970-01-01,
//! microseconds since midnight or since 1970-01-01 00:00), writes them for SQLite and reads
//! them back from any backend's text. The app's calendar crate (chrono or time, by feature)
//! converts from these.
//!
//! Days to a civil date and back follow Howard Hinnant's `days_from_civil` algorithms: exact
//! for every date of the proleptic Gregorian calendar in range.

// Beyond `date_of`, used by the databases only.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]

use std::fmt::Write;

/// Microseconds in a day.
pub(crate) const DAY_MICROS: i64 = 86_400_000_000;

/// The (year, month, day) of `days` since 1970-01-01.
pub(crate) fn date_of(days: i32) -> (i32, u32, u32) {
    let z = i64::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year as i32, month, day)
}

/// Days since 1970-01-01 of a civil date, if it is one.
pub(crate) fn days_of(year: i32, month: u32, day: u32) -> Option<i32> {
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    i32::try_from(era * 146_097 + doe - 719_468).ok()
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Appends `n` in `width` digits (zeros before it).
fn push_digits(out: &mut String, n: u64, width: u32) {
    for i in (0..width).rev() {
        let digit = (n / 10u64.pow(i)) % 10;
        out.push(char::from(b'0' + digit as u8));
    }
}

/// `YYYY-MM-DD`.
pub(crate) fn format_date(days: i32, out: &mut String) {
    let (y, m, d) = date_of(days);
    if (0..=9999).contains(&y) {
        push_digits(out, y as u64, 4);
    } else {
        let _ = write!(out, "{y:+05}");
    }
    out.push('-');
    push_digits(out, m.into(), 2);
    out.push('-');
    push_digits(out, d.into(), 2);
}

/// `HH:MM:SS.ffffff` of microseconds since midnight (MySQL's TIME, an interval of up to
/// ±838 hours, as `-HHH:MM:SS.ffffff`).
pub(crate) fn format_time(micros: i64, out: &mut String) {
    if micros < 0 {
        out.push('-');
    }
    let micros = micros.unsigned_abs();
    let (s, us) = (micros / 1_000_000, micros % 1_000_000);
    let hours = s / 3600;
    push_digits(out, hours, if hours >= 100 { 3 } else { 2 });
    out.push(':');
    push_digits(out, s / 60 % 60, 2);
    out.push(':');
    push_digits(out, s % 60, 2);
    out.push('.');
    push_digits(out, us, 6);
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff` of microseconds since 1970-01-01 00:00.
pub(crate) fn format_timestamp(micros: i64, out: &mut String) {
    let days = micros.div_euclid(DAY_MICROS);
    format_date(days as i32, out);
    out.push('T');
    format_time(micros.rem_euclid(DAY_MICROS), out);
}

/// A date as ISO text (`2026-11-26`).
pub(crate) fn date_text(days: i32) -> String {
    let mut s = String::with_capacity(10);
    format_date(days, &mut s);
    s
}

/// A time as ISO text (`12:30:00.000000`).
pub(crate) fn time_text(micros: i64) -> String {
    let mut s = String::with_capacity(15);
    format_time(micros, &mut s);
    s
}

/// A timestamp as ISO text (`2026-11-26T12:30:00.000000`), with `Z` if `utc`.
pub(crate) fn timestamp_text(micros: i64, utc: bool) -> String {
    let mut s = String::with_capacity(27);
    format_timestamp(micros, &mut s);
    if utc {
        s.push('Z');
    }
    s
}

/// Days since 1970-01-01 of `YYYY-MM-DD`.
pub(crate) fn parse_date(text: &str) -> Option<i32> {
    let (date, rest) = split_date(text.trim())?;
    rest.is_empty().then_some(date)
}

/// Microseconds since midnight of `HH:MM[:SS[.fraction]]`.
pub(crate) fn parse_time(text: &str) -> Option<i64> {
    let (micros, rest) = split_time(text.trim())?;
    rest.is_empty().then_some(micros)
}

/// A timestamp's microseconds since 1970-01-01 00:00 and its offset from UTC in seconds, if
/// it gives one: `YYYY-MM-DD[T ]HH:MM[:SS[.fraction]][Z|±HH[:MM]]`, or a date alone
/// (midnight).
pub(crate) fn parse_timestamp(text: &str) -> Option<(i64, Option<i32>)> {
    let (days, rest) = split_date(text.trim())?;
    let midnight = i64::from(days).checked_mul(DAY_MICROS)?;
    if rest.is_empty() {
        return Some((midnight, None));
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (micros, zone) = split_time(rest)?;
    let offset = match zone.trim_start() {
        "" => None,
        "Z" | "z" | "UTC" | "+00" => Some(0),
        zone => Some(parse_offset(zone)?),
    };
    Some((midnight.checked_add(micros)?, offset))
}

/// Seconds east of UTC in `±HH`, `±HHMM` or `±HH:MM`.
fn parse_offset(zone: &str) -> Option<i32> {
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !matches!(digits.len(), 2 | 4 | 6) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| digits.get(r).map_or(Some(0), |d| d.parse::<i32>().ok());
    let (h, m, s) = (n(0..2)?, n(2..4)?, n(4..6)?);
    (h < 24 && m < 60 && s < 60).then_some(sign * (h * 3600 + m * 60 + s))
}

/// The date at the start of `text` (a year of 4 digits, or more with a sign) and the rest.
fn split_date(text: &str) -> Option<(i32, &str)> {
    let negative = text.starts_with('-');
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let year_len = unsigned.find('-')?;
    if year_len < 4 {
        return None;
    }
    let year: i32 = unsigned.get(..year_len)?.parse().ok()?;
    let year = if negative { -year } else { year };
    let rest = unsigned.get(year_len..)?;
    let b = rest.as_bytes();
    if b.len() < 6 || b[0] != b'-' || b[3] != b'-' {
        return None;
    }
    let month = two_digits(rest.get(1..3)?)?;
    let day = two_digits(rest.get(4..6)?)?;
    Some((days_of(year, month, day)?, rest.get(6..)?))
}

/// The time at the start of `text` and the rest (a zone, or nothing).
fn split_time(text: &str) -> Option<(i64, &str)> {
    let b = text.as_bytes();
    if b.len() < 5 || b[2] != b':' {
        return None;
    }
    let hour = two_digits(text.get(0..2)?)?;
    let minute = two_digits(text.get(3..5)?)?;
    let mut rest = text.get(5..)?;
    let mut second = 0;
    let mut micros = 0u32;
    if let Some(s) = rest.strip_prefix(':') {
        second = two_digits(s.get(0..2)?)?;
        rest = s.get(2..)?;
        if let Some(f) = rest.strip_prefix(['.', ',']) {
            let digits = f.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            // Past microseconds, the digits are dropped (truncated, as PostgreSQL rounds
            // only on input of its own).
            let kept = &f[..digits.min(6)];
            micros = kept.parse::<u32>().ok()? * 10u32.pow(6 - kept.len() as u32);
            rest = &f[digits..];
        }
    }
    // 24:00:00 is the end of the day, as ISO 8601 and PostgreSQL allow.
    let end_of_day = hour == 24 && minute == 0 && second == 0 && micros == 0;
    if (hour > 23 && !end_of_day) || minute > 59 || second > 60 {
        return None;
    }
    let seconds = i64::from(hour * 3600 + minute * 60 + second.min(59));
    Some((seconds * 1_000_000 + i64::from(micros), rest))
}

fn two_digits(text: &str) -> Option<u32> {
    (text.len() == 2 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_civil_dates_agree_both_ways() {
        assert_eq!(date_of(0), (1970, 1, 1));
        assert_eq!(days_of(2000, 1, 1), Some(10_957));
        assert_eq!(days_of(2026, 11, 26), Some(20_783));
        assert_eq!(date_of(-1), (1969, 12, 31));
        assert_eq!(days_of(2024, 2, 29).map(date_of), Some((2024, 2, 29)));
        assert_eq!(days_of(2023, 2, 29), None);
        assert_eq!(days_of(2026, 13, 1), None);
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = date_of(days);
            assert_eq!(days_of(y, m, d), Some(days), "{y}-{m}-{d}");
        }
    }

    #[test]
    fn iso_text_is_written_and_read_back() {
        let t = days_of(2026, 11, 26).unwrap() as i64 * DAY_MICROS + 45_296_789_012;
        assert_eq!(timestamp_text(t, true), "2026-11-26T12:34:56.789012Z");
        assert_eq!(
            parse_timestamp("2026-11-26T12:34:56.789012Z"),
            Some((t, Some(0)))
        );
        assert_eq!(
            parse_timestamp("2026-11-26 12:34:56.789012"),
            Some((t, None))
        );
        assert_eq!(
            parse_timestamp("2026-11-26 13:34:56.789012+01:00"),
            Some((t + 3_600_000_000, Some(3600)))
        );
        assert_eq!(
            parse_timestamp("2026-11-26 12:34:56.789012345-0530").map(|p| p.1),
            Some(Some(-19_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-26"),
            Some((t - 45_296_789_012, None))
        );
        assert_eq!(parse_time("12:34:56.789012"), Some(45_296_789_012));
        assert_eq!(parse_time("12:34"), Some(45_240_000_000));
        assert_eq!(time_text(45_296_789_012), "12:34:56.789012");
        assert_eq!(time_text(-(3_600_000_000 * 101 + 1)), "-101:00:00.000001");
        assert_eq!(parse_date("1999-12-31"), days_of(1999, 12, 31));
        assert_eq!(date_text(days_of(1999, 12, 31).unwrap()), "1999-12-31");
        for bad in [
            "",
            "2026-1-1",
            "2026-02-30",
            "26-11-26",
            "2026-11-26X",
            "2026-11-26T25:00",
            "2026-11-26T12:60",
            "2026-11-26T12:00+5",
            "2026-01-0é",
            "2026-01-01 12:3é",
            "2026-01-01 12:34:5é",
            "99999999-01-01",
            "-99999999-01-01 00:00",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }
}
