//! Human durations on the command line: `30s`, `1m`, `1h30m`, `250ms`, or plain seconds.

use std::time::Duration;

/// Parses `250ms`, `30s`, `1m`, `1h30m`, `2d` or a plain number of seconds (`30`).
///
/// Units are `ms`, `s`, `m`, `h` and `d`; parts add up (`1m30s`). Whitespace, signs, fractions
/// and unknown units are rejected with a message that says what is accepted.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    const ACCEPTED: &str = "use a number with a unit: 250ms, 30s, 1m, 1h30m, 2d (or plain seconds)";
    if text.is_empty() {
        return Err(format!("empty duration; {ACCEPTED}"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = text
            .parse()
            .map_err(|_| format!("{text:?} is too large; {ACCEPTED}"))?;
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("{text:?} is not a duration; {ACCEPTED}"));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        let number: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} is too large; {ACCEPTED}"))?;
        let part = match unit {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(3600).map(Duration::from_secs),
            "d" => number.checked_mul(86_400).map(Duration::from_secs),
            "" => return Err(format!("{text:?}: {number} has no unit; {ACCEPTED}")),
            other => return Err(format!("{text:?}: unknown unit {other:?}; {ACCEPTED}")),
        };
        total = part
            .and_then(|part| total.checked_add(part))
            .ok_or_else(|| format!("{text:?} is too large; {ACCEPTED}"))?;
        rest = after;
    }
    Ok(total)
}

/// A wait: a duration as [`parse_duration`] reads it, or `forever` (also `inf`, `infinite`,
/// `none`), which is [`Duration::MAX`]. Any duration longer than a century also means forever.
pub(crate) fn parse_wait(text: &str) -> Result<Duration, String> {
    match text {
        "forever" | "inf" | "infinite" | "none" => Ok(Duration::MAX),
        _ => parse_duration(text).map_err(|e| format!("{e}, or `forever`")),
    }
}

/// Formats a duration for people as every message of this project does
/// ([`lease_core::backend::fmt_duration`]: `250ms`, `2.62s`, `1m 30s`); a century or more is
/// `forever`.
pub(crate) fn fmt_duration(duration: Duration) -> String {
    if duration >= lease_core::WaitOptions::MAX_TIMEOUT {
        return "forever".to_owned();
    }
    lease_core::backend::fmt_duration(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_compounds_and_plain_seconds() {
        let cases = [
            ("30s", Duration::from_secs(30)),
            ("1m", Duration::from_secs(60)),
            ("1h30m", Duration::from_secs(5400)),
            ("250ms", Duration::from_millis(250)),
            ("1m30s", Duration::from_secs(90)),
            ("2d", Duration::from_secs(172_800)),
            ("45", Duration::from_secs(45)),
            ("0", Duration::ZERO),
            ("1s500ms", Duration::from_millis(1500)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_junk_with_a_helpful_message() {
        for text in [
            "",
            "abc",
            "10x",
            "-5s",
            "1.5s",
            " 5s",
            "5s ",
            "s",
            "1m30",
            "99999999999999999999",
            "5 s",
            "1e3",
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains("250ms"), "{text}: {err}");
        }
        assert!(parse_duration("99999999999999999d").is_err());
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(fmt_duration(Duration::from_millis(2621)), "2.62s");
        assert_eq!(fmt_duration(Duration::from_nanos(5_280_620_705)), "5.28s");
        assert_eq!(fmt_duration(Duration::ZERO), "0s");
        assert_eq!(fmt_duration(Duration::from_secs(90)), "1m 30s");
        assert_eq!(fmt_duration(Duration::MAX), "forever");
    }
}
