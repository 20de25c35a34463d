//! Webhooks (SPEC §12): apps' endpoints and their secrets (`endpoints`), the
//! Standard Webhooks signature (`signing`), the refusal of non-public
//! addresses (`guard`), and the worker that delivers the outbox
//! (`delivery`). The events themselves are written by the store, in the
//! transaction of each change they report.

pub mod delivery;
pub mod endpoints;
pub mod guard;
pub mod signing;

use std::time::Duration;

/// Most endpoints one app may have.
pub const MAX_ENDPOINTS: i64 = 5;
/// How long a rotated secret keeps signing beside the new one.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);
/// The waits before each retry of a failed attempt, each taken within ±50%;
/// after the last retry fails the event is marked failed.
pub const RETRY_WAITS: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];
/// An attempt's answer must come (2xx) within this.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this much of an answer is read.
pub const MAX_ANSWER_BYTES: usize = 1024;
/// How long a claim on a delivery lasts: an instance that died while
/// sending leaves it to another after this.
pub const LEASE: Duration = Duration::from_secs(30);
/// An endpoint failing without a success for this long is disabled.
pub const DISABLE_AFTER: Duration = Duration::from_secs(5 * 24 * 3600);
/// Delivered (and failed) events are purged after this.
pub const RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

// The lease must outlast an attempt, or a slow answer would let another
// instance send the same attempt again.
const _: () = assert!(LEASE.as_secs() > 2 * ATTEMPT_TIMEOUT.as_secs());
