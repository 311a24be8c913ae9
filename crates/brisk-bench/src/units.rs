//! Parsing and formatting of human units: durations, byte counts, rates.

use std::time::Duration;

use crate::error::BenchError;

/// Parses a duration such as `10s`, `500ms`, `1m`, `2h`, `250us` or a bare
/// number of seconds (`5`, `1.5`).
pub fn parse_duration(text: &str) -> Result<Duration, BenchError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || {
        BenchError::InvalidArgument(format!(
            "the duration \"{text}\" is not valid (examples: 10s, 500ms, 1m)"
        ))
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(bad()),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Formats a byte count with binary units, like wrk (`1.23MB`).
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2}{}", UNITS[unit])
}

/// Formats a latency given in microseconds with an adapted unit.
pub fn format_micros(micros: f64) -> String {
    if micros >= 1_000_000.0 {
        format!("{:.2}s", micros / 1_000_000.0)
    } else if micros >= 1_000.0 {
        format!("{:.2}ms", micros / 1_000.0)
    } else {
        format!("{micros:.0}us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn bytes() {
        assert_eq!(format_bytes(512.0), "512.00B");
        assert_eq!(format_bytes(1536.0), "1.50KB");
    }
}
