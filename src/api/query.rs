//! Parameters shared by the list endpoints: `limit`, `offset`, datetimes, and the
//! absolute `next` URL.

use super::params::Params;
use super::ApiError;
use crate::domain::{parse_datetime, Timestamp};

pub const DEFAULT_LIMIT: i64 = 20;
/// Larger limits are clamped to this (SPEC §4).
pub const MAX_LIMIT: i64 = 50;

/// `limit`: a positive integer, 20 when absent, at most 50.
pub fn limit(params: &Params) -> Result<i64, ApiError> {
    match params.text_or_number("limit")? {
        None => Ok(DEFAULT_LIMIT),
        Some(text) => {
            let digits = text.trim();
            let whole = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            if !whole || digits.bytes().all(|b| b == b'0') {
                return Err(ApiError::InvalidRequest(
                    "limit must be a positive whole number".to_owned(),
                ));
            }
            // Any larger number, however long, is clamped.
            Ok(digits
                .parse::<i64>()
                .map_or(MAX_LIMIT, |n| n.min(MAX_LIMIT)))
        }
    }
}

/// `offset`: a whole number, 0 when absent.
pub fn offset(params: &Params) -> Result<i64, ApiError> {
    const MAX_OFFSET: u64 = 1_000_000;
    match params.text_or_number("offset")? {
        None => Ok(0),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(n) if n <= MAX_OFFSET => Ok(n as i64),
            _ => Err(ApiError::InvalidRequest(format!(
                "offset must be a whole number from 0 to {MAX_OFFSET}"
            ))),
        },
    }
}

pub fn datetime(params: &Params, name: &str) -> Result<Option<Timestamp>, ApiError> {
    params
        .text(name)?
        .map(|text| {
            parse_datetime(text).map_err(|e| ApiError::InvalidRequest(format!("{name}: {e}")))
        })
        .transpose()
}

/// A non-blank text parameter, or `None`.
pub fn given<'a>(params: &'a Params, name: &str) -> Result<Option<&'a str>, ApiError> {
    Ok(params.text(name)?.filter(|v| !v.trim().is_empty()))
}

/// The absolute URL of a page on the public origin. It never carries the token:
/// only the pairs given here.
pub fn page_url(origin: &str, path: &str, pairs: &[(&str, String)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        query.append_pair(key, value);
    }
    format!("{origin}/v1{path}?{}", query.finish())
}

/// Cuts rows read with one more than `limit` back to `limit`; the last row kept
/// when another page follows (what its `next` URL starts after).
pub fn end_of_page<T>(rows: &mut Vec<T>, limit: i64) -> Option<&T> {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    rows.last().filter(|_| more)
}
