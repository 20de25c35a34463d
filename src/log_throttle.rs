//! Logs a repeating error once per cause per window, not once per attempt: a
//! worker retrying every 200 ms against a full disk must not fill the disk
//! further with its own log.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One line per cause at most this often.
pub const WINDOW: Duration = Duration::from_secs(5);

/// Causes remembered at most; past it the memory starts afresh (at worst a
/// line more), so odd error texts cannot grow it without bound.
const MAX_CAUSES: usize = 256;

struct Seen {
    logged_at: Instant,
    suppressed: u64,
}

static SEEN: Mutex<Option<HashMap<String, Seen>>> = Mutex::new(None);

/// Whether to log this occurrence of `cause` now; when it is, also how many
/// occurrences were held back since its last line.
pub fn admit(cause: &str) -> Option<u64> {
    admit_at(cause, Instant::now())
}

fn admit_at(cause: &str, now: Instant) -> Option<u64> {
    let mut guard = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    let seen = guard.get_or_insert_with(HashMap::new);
    if let Some(entry) = seen.get_mut(cause) {
        if now.duration_since(entry.logged_at) < WINDOW {
            entry.suppressed += 1;
            return None;
        }
        let suppressed = entry.suppressed;
        *entry = Seen {
            logged_at: now,
            suppressed: 0,
        };
        return Some(suppressed);
    }
    if seen.len() >= MAX_CAUSES {
        seen.clear();
    }
    seen.insert(
        cause.to_owned(),
        Seen {
            logged_at: now,
            suppressed: 0,
        },
    );
    Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_cause_per_window() {
        let start = Instant::now();
        let cause = "unit test: disk full";
        assert_eq!(admit_at(cause, start), Some(0));
        for i in 1..100 {
            assert_eq!(admit_at(cause, start + Duration::from_millis(i * 10)), None);
        }
        assert_eq!(admit_at("unit test: another cause", start), Some(0));
        assert_eq!(admit_at(cause, start + WINDOW), Some(99));
        assert_eq!(admit_at(cause, start + WINDOW), None);
    }
}
