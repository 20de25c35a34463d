use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};

/// A point in time as stored: microseconds since the Unix epoch (UTC). Both
/// databases keep it as a 64-bit integer, so one SQL text orders and compares it.
pub type Timestamp = i64;

pub fn now_micros() -> Timestamp {
    Utc::now().timestamp_micros()
}

/// A duration in the unit of [`Timestamp`], saturating at the largest one.
pub fn micros(d: std::time::Duration) -> Timestamp {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The wire form of a datetime: `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_datetime(micros: Timestamp) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A datetime to the microsecond (`YYYY-MM-DDTHH:MM:SS.ffffffZ`), for paging
/// cursors that must not lose precision.
pub fn format_datetime_exact(micros: Timestamp) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("'{0}' is not a datetime such as 2026-11-21T13:00:00Z or 2026-11-21")]
pub struct DatetimeError(String);

/// Reads a datetime in every form SPEC §2 accepts: `YYYY-MM-DDTHH:MM:SSZ`, the same
/// without `Z`, with fractional seconds, with an offset such as `+00:00`, or a
/// bare date (midnight UTC).
pub fn parse_datetime(input: &str) -> Result<Timestamp, DatetimeError> {
    let text = input.trim();
    let bad = || DatetimeError(text.to_owned());
    let parsed = if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        at.with_timezone(&Utc)
    } else if let Ok(at) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f") {
        at.and_utc()
    } else if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        day.and_hms_opt(0, 0, 0).ok_or_else(bad)?.and_utc()
    } else {
        return Err(bad());
    };
    Ok(parsed.timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_datetime_form_is_read() {
        let second = 1_795_266_000_000_000; // 2026-11-21T13:00:00Z
        for (input, micros) in [
            ("2026-11-21T13:00:00Z", second),
            ("2026-11-21T13:00:00", second),
            ("2026-11-21T13:00:00.250Z", second + 250_000),
            ("2026-11-21T13:00:00.000001", second + 1),
            ("2026-11-21T13:00:00+00:00", second),
            ("2026-11-21T15:00:00+02:00", second),
            ("2026-11-21", second - 13 * 3_600_000_000),
        ] {
            assert_eq!(parse_datetime(input), Ok(micros), "{input}");
        }
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-11-21T25:00:00Z",
            "1795266000",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        assert_eq!(format_datetime(second), "2026-11-21T13:00:00Z");
        assert_eq!(
            parse_datetime(&format_datetime_exact(second + 7)),
            Ok(second + 7)
        );
    }
}
