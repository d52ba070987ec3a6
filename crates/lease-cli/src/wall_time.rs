//! Wall times in the command's output (`since`, `until`), as RFC 3339 UTC with milliseconds.

use std::time::SystemTime;

/// Formats a wall time as RFC 3339 UTC with milliseconds (`2030-01-01T00:00:00.123Z`).
pub(crate) fn fmt_time(at: SystemTime) -> String {
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

#[cfg(test)]
mod tests {
    use super::fmt_time;
    use std::time::{Duration, SystemTime};

    #[test]
    fn formats_leap_days_the_epoch_and_milliseconds() {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        assert_eq!(fmt_time(at(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(fmt_time(at(951_782_400_000)), "2000-02-29T00:00:00.000Z");
        assert_eq!(fmt_time(at(1_893_456_000_123)), "2030-01-01T00:00:00.123Z");
    }
}
