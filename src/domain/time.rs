use chrono::{DateTime, SecondsFormat, Utc};

/// A point in time as stored: microseconds since the Unix epoch (UTC). Both
/// databases keep it as a 64-bit integer, so one SQL text orders and compares it.
pub type Timestamp = i64;

pub fn now_micros() -> Timestamp {
    Utc::now().timestamp_micros()
}

/// The wire form of a datetime: `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_datetime(micros: Timestamp) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}
