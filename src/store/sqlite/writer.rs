//! What SQLite's two writers (sqlx's writer connection and the group
//! thread's, see `group.rs`) share: their health, the page-limit test hook,
//! and the checkpoint backstop.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// SQLite's own largest page count: "no limit".
const NO_PAGE_LIMIT: u32 = 4_294_967_294;

/// How long readiness reports a writer that was found broken.
const WRITER_FAILURE_SHOWN_FOR: Duration = Duration::from_secs(5);

/// When the writer last had to be replaced after a failed transaction.
#[derive(Default)]
pub(super) struct WriterHealth {
    failed_at: Mutex<Option<Instant>>,
}

impl WriterHealth {
    pub(super) fn failed(&self) {
        *self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    pub(super) fn failed_recently(&self) -> bool {
        self.failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < WRITER_FAILURE_SHOWN_FOR)
    }
}

/// The writers still checkpoint by themselves past this many WAL pages
/// (80 MB): a backstop should the checkpointer fall behind.
macro_rules! writer_autocheckpoint_pages {
    () => {
        "20000"
    };
}
pub(super) use writer_autocheckpoint_pages;

/// The page count of the test hook of [`super::PAGE_LIMIT_FILE_VARIABLE`], when set.
pub(super) fn page_limit(page_limit_file: Option<&std::path::Path>) -> Option<u32> {
    let file = page_limit_file?;
    Some(
        std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .unwrap_or(NO_PAGE_LIMIT),
    )
}
