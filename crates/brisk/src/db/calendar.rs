//! The app's calendar crate, both ways: chrono (feature `chrono`) and time (feature `time`)
//! dates, times and timestamps as [`Value`]s and back. Microseconds are kept; nanoseconds
//! below them are dropped, as every backend stores microseconds at most.

#[cfg(any(feature = "chrono", feature = "time"))]
use super::error::DbError;
#[cfg(any(feature = "chrono", feature = "time"))]
use super::from_value::{date_of, instant_of, time_of, timestamp_of, FromValue};
#[cfg(any(feature = "chrono", feature = "time"))]
use super::value::Value;

/// Days from 0001-01-01 (chrono's day 1 of the common era is 1) to 1970-01-01.
#[cfg(feature = "chrono")]
const UNIX_EPOCH_CE: i32 = 719_163;

/// The Julian day of 1970-01-01 (time's days are Julian).
#[cfg(feature = "time")]
const UNIX_EPOCH_JULIAN: i32 = 2_440_588;

#[cfg(any(feature = "chrono", feature = "time"))]
fn out_of_range(what: &str) -> DbError {
    DbError::Decode(format!("a value out of {what}'s range (an infinity?)"))
}

#[cfg(feature = "chrono")]
mod with_chrono {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Timelike, Utc};

    use super::*;

    impl From<NaiveDate> for Value {
        fn from(v: NaiveDate) -> Self {
            Value::Date(chrono::Datelike::num_days_from_ce(&v) - UNIX_EPOCH_CE)
        }
    }

    impl From<NaiveTime> for Value {
        fn from(v: NaiveTime) -> Self {
            let micros = i64::from(v.num_seconds_from_midnight()) * 1_000_000
                + i64::from(v.nanosecond().min(999_999_999) / 1000);
            Value::Time(micros)
        }
    }

    impl From<NaiveDateTime> for Value {
        fn from(v: NaiveDateTime) -> Self {
            Value::Timestamp(v.and_utc().timestamp_micros())
        }
    }

    impl<Tz: chrono::TimeZone> From<DateTime<Tz>> for Value {
        fn from(v: DateTime<Tz>) -> Self {
            Value::TimestampTz(v.timestamp_micros())
        }
    }

    impl FromValue for NaiveDate {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            let days = date_of(v, "NaiveDate")?;
            days.checked_add(UNIX_EPOCH_CE)
                .and_then(NaiveDate::from_num_days_from_ce_opt)
                .ok_or_else(|| out_of_range("NaiveDate"))
        }
    }

    impl FromValue for NaiveTime {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            let micros = time_of(v, "NaiveTime")?;
            let (s, us) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
            u32::try_from(s)
                .ok()
                .and_then(|s| NaiveTime::from_num_seconds_from_midnight_opt(s, us as u32 * 1000))
                .ok_or_else(|| out_of_range("NaiveTime"))
        }
    }

    impl FromValue for NaiveDateTime {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            let micros = match v {
                Value::Date(d) => i64::from(*d) * crate::civil::DAY_MICROS,
                _ => timestamp_of(v, "NaiveDateTime")?,
            };
            DateTime::from_timestamp_micros(micros)
                .map(|t| t.naive_utc())
                .ok_or_else(|| out_of_range("NaiveDateTime"))
        }
    }

    impl FromValue for DateTime<Utc> {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            let micros = instant_of(v, "DateTime<Utc>")?;
            DateTime::from_timestamp_micros(micros).ok_or_else(|| out_of_range("DateTime<Utc>"))
        }
    }
}

#[cfg(feature = "time")]
mod with_time {
    use time::{Date, OffsetDateTime, PrimitiveDateTime, Time};

    use super::*;
    use crate::civil::DAY_MICROS;

    impl From<Date> for Value {
        fn from(v: Date) -> Self {
            Value::Date(v.to_julian_day() - UNIX_EPOCH_JULIAN)
        }
    }

    impl From<Time> for Value {
        fn from(v: Time) -> Self {
            let (h, m, s, us) = v.as_hms_micro();
            Value::Time(
                (i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(s)) * 1_000_000
                    + i64::from(us),
            )
        }
    }

    impl From<PrimitiveDateTime> for Value {
        fn from(v: PrimitiveDateTime) -> Self {
            Value::Timestamp(v.assume_utc().unix_timestamp_nanos().div_euclid(1000) as i64)
        }
    }

    impl From<OffsetDateTime> for Value {
        fn from(v: OffsetDateTime) -> Self {
            Value::TimestampTz(v.unix_timestamp_nanos().div_euclid(1000) as i64)
        }
    }

    fn time_of_day(micros: i64) -> Option<Time> {
        let s = micros.div_euclid(1_000_000);
        let us = micros.rem_euclid(1_000_000) as u32;
        Time::from_hms_micro((s / 3600) as u8, (s / 60 % 60) as u8, (s % 60) as u8, us).ok()
    }

    impl FromValue for Date {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            let days = date_of(v, "time::Date")?;
            days.checked_add(UNIX_EPOCH_JULIAN)
                .and_then(|jd| Date::from_julian_day(jd).ok())
                .ok_or_else(|| out_of_range("time::Date"))
        }
    }

    impl FromValue for Time {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            time_of_day(time_of(v, "time::Time")?).ok_or_else(|| out_of_range("time::Time"))
        }
    }

    impl FromValue for PrimitiveDateTime {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            let micros = match v {
                Value::Date(d) => i64::from(*d) * DAY_MICROS,
                _ => timestamp_of(v, "PrimitiveDateTime")?,
            };
            let date =
                Date::from_julian_day((micros.div_euclid(DAY_MICROS) as i32) + UNIX_EPOCH_JULIAN);
            let time = time_of_day(micros.rem_euclid(DAY_MICROS));
            match (date, time) {
                (Ok(d), Some(t)) => Ok(PrimitiveDateTime::new(d, t)),
                _ => Err(out_of_range("PrimitiveDateTime")),
            }
        }
    }

    impl FromValue for OffsetDateTime {
        fn from_value(v: &Value) -> Result<Self, DbError> {
            let micros = instant_of(v, "OffsetDateTime")?;
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000)
                .map_err(|_| out_of_range("OffsetDateTime"))
        }
    }
}

#[cfg(all(test, feature = "chrono", feature = "time"))]
mod tests {
    use super::*;

    #[test]
    fn chrono_and_time_agree_with_the_numbers() {
        let d = chrono::NaiveDate::from_ymd_opt(2026, 11, 26).unwrap();
        assert_eq!(Value::from(d), Value::Date(20_783));
        assert_eq!(
            chrono::NaiveDate::from_value(&Value::Date(20_783)).unwrap(),
            d
        );
        let t = time::Date::from_calendar_date(2026, time::Month::November, 26).unwrap();
        assert_eq!(Value::from(t), Value::Date(20_783));
        assert_eq!(time::Date::from_value(&Value::Date(20_783)).unwrap(), t);
        let at = chrono::DateTime::from_timestamp_micros(1_764_160_496_789_012).unwrap();
        assert_eq!(Value::from(at), Value::TimestampTz(1_764_160_496_789_012));
        let odt =
            time::OffsetDateTime::from_value(&Value::TimestampTz(1_764_160_496_789_012)).unwrap();
        assert_eq!(odt.microsecond(), 789_012);
        let text = Value::Text("2026-11-26T12:34:56.789012Z".into());
        let parsed: chrono::DateTime<chrono::Utc> = FromValue::from_value(&text).unwrap();
        assert_eq!(parsed.to_rfc3339(), "2026-11-26T12:34:56.789012+00:00");
        assert!(chrono::NaiveDate::from_value(&Value::Date(i32::MAX)).is_err());
    }
}
