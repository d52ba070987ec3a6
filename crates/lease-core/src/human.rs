//! Times and durations as messages show them: a wall time in RFC 3339, a duration in human
//! units with at most three significant digits (`203ms`, `5.28s`, `1m 30s`).

use std::time::{Duration, SystemTime};

/// Formats a wall time as RFC 3339 UTC with milliseconds, with no date-time dependency: how
/// every message of this project shows a wall time. For backends and tools that print times;
/// not in the prelude.
///
/// ```
/// use lease_core::backend::fmt_time;
/// use std::time::{Duration, SystemTime};
/// let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_893_456_000_123);
/// assert_eq!(fmt_time(t), "2030-01-01T00:00:00.123Z");
/// ```
pub fn fmt_time(at: SystemTime) -> String {
    let Ok(since) = at.duration_since(SystemTime::UNIX_EPOCH) else {
        return "before 1970".to_owned();
    };
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Formats a duration for people: at most three significant digits in the largest unit that
/// keeps the number at or above 1 (`850ns`, `12.3` microseconds, `203ms`, `5.28s`), then minutes and
/// seconds (`1m 30s`), hours and minutes (`2h 5m`), days and hours (`3d 4h`), rounded.
///
/// ```
/// use std::time::Duration;
/// use lease_core::backend::fmt_duration;
/// assert_eq!(fmt_duration(Duration::from_nanos(203_684_605)), "204ms");
/// assert_eq!(fmt_duration(Duration::from_millis(5_281)), "5.28s");
/// assert_eq!(fmt_duration(Duration::from_secs(90)), "1m 30s");
/// assert_eq!(fmt_duration(Duration::ZERO), "0s");
/// ```
pub fn fmt_duration(duration: Duration) -> String {
    const NANOS_PER_MINUTE: u128 = 60_000_000_000;
    let nanos = round_to_3_digits(duration.as_nanos());
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < NANOS_PER_MINUTE {
        let (unit, name) = match nanos {
            0..1_000 => (1, "ns"),
            1_000..1_000_000 => (1_000, "µs"),
            1_000_000..1_000_000_000 => (1_000_000, "ms"),
            _ => (1_000_000_000, "s"),
        };
        return format!("{}{name}", decimal(nanos, unit));
    }
    let secs = (duration.as_nanos() + 500_000_000) / 1_000_000_000;
    let (big, small, names) = if secs < 3_600 {
        (secs / 60, secs % 60, ("m", "s"))
    } else if secs < 86_400 {
        let minutes = (secs + 30) / 60;
        (minutes / 60, minutes % 60, ("h", "m"))
    } else {
        let hours = (secs + 1_800) / 3_600;
        (hours / 24, hours % 24, ("d", "h"))
    };
    if small == 0 {
        format!("{big}{}", names.0)
    } else {
        format!("{big}{} {small}{}", names.0, names.1)
    }
}

/// `n` rounded (half up) to its three most significant decimal digits.
fn round_to_3_digits(n: u128) -> u128 {
    let mut scale = 1u128;
    while n / scale >= 1_000 {
        scale *= 10;
    }
    if scale == 1 {
        return n;
    }
    (n + scale / 2) / scale * scale
}

/// `n / unit` as a decimal with no trailing zeros.
fn decimal(n: u128, unit: u128) -> String {
    let whole = n / unit;
    let mut fraction = n % unit;
    if fraction == 0 {
        return whole.to_string();
    }
    let mut width = unit.ilog10() as usize;
    while fraction % 10 == 0 {
        fraction /= 10;
        width -= 1;
    }
    format!("{whole}.{fraction:0width$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_times_are_rfc_3339_utc_with_milliseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_893_456_000_123);
        assert_eq!(fmt_time(t), "2030-01-01T00:00:00.123Z");
        let before = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(fmt_time(before), "before 1970");
    }

    #[test]
    fn formats_leap_days_and_epoch() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(fmt_time(at(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(fmt_time(at(951_782_400)), "2000-02-29T00:00:00.000Z");
        assert_eq!(fmt_time(at(1_709_251_199)), "2024-02-29T23:59:59.000Z");
    }

    #[test]
    fn durations_keep_three_significant_digits() {
        let cases = [
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_nanos(1_234), "1.23µs"),
            (Duration::from_nanos(999_600), "1ms"),
            (Duration::from_nanos(203_684_605), "204ms"),
            (Duration::from_micros(5_500), "5.5ms"),
            (Duration::from_millis(1_000), "1s"),
            (Duration::from_millis(5_284), "5.28s"),
            (Duration::from_millis(59_960), "1m"),
            (Duration::from_secs(90), "1m 30s"),
            (Duration::from_secs(3_599), "59m 59s"),
            (Duration::from_secs(3_600 + 5 * 60 + 10), "1h 5m"),
            (Duration::from_secs(3 * 86_400 + 4 * 3_600), "3d 4h"),
            (Duration::MAX, "213503982334601d 7h"),
        ];
        for (duration, shown) in cases {
            assert_eq!(fmt_duration(duration), shown, "{duration:?}");
        }
    }
}
