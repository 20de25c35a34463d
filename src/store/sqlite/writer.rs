//! What SQLite's two writers (sqlx's writer connection and the group
//! thread's, see `group.rs`) share: their health, the page-limit test hook,
//! and the checkpoint backstop.

use std::fs::File;
use std::mem::ManuallyDrop;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// SQLite's own largest page count: "no limit".
const NO_PAGE_LIMIT: u32 = 4_294_967_294;

/// How long readiness reports a writer that was found broken.
const WRITER_FAILURE_SHOWN_FOR: Duration = Duration::from_secs(5);

/// When a writer was last found failing: replaced after a failed
/// transaction, or a write of a committed group refused (a full disk).
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

/// Past this many WAL pages (47 MiB), once the checkpointer has copied all
/// of them, the group thread finishes the checkpoint (see [`WalRestart`]):
/// short of the backstop, [`WRITER_AUTOCHECKPOINT_PAGES`] (checked when
/// compiled), so the checkpointer has time for its two passes. Much lower, the restarts' syncs cost the writer more than they
/// save (docs/decisions/003-sqlite-wal-checkpointer.md).
pub(super) const WAL_RESTART_PAGES: i64 = 12_000;

/// Lets the WAL start over from its beginning without the writer waiting
/// on a large checkpoint. SQLite starts it over at the first write after a
/// checkpoint that reached the WAL's end, which the checkpointer, copying
/// while writes go on, never does under steady writes: left alone, the WAL
/// grows to the writers' backstop, whose checkpoint then syncs everything
/// copied or written since the checkpointer's last sync, with every write
/// waiting (tens of milliseconds). Instead, once the checkpointer has copied
/// and synced the WAL up to a moment ago, it asks the group thread to finish
/// after its next commit: a few milliseconds' worth of pages.
#[derive(Default)]
pub(super) struct WalRestart(AtomicBool);

impl WalRestart {
    /// The checkpointer has copied and synced a large WAL up to a moment ago.
    pub(super) fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the writer should finish the checkpoint now (once per request).
    pub(super) fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// The database file, for the checkpointer to sync after each pass that
/// copied pages into it. SQLite syncs the file only at a checkpoint that
/// reaches the WAL's end, which under steady writes is the group thread's
/// finishing one (see [`WalRestart`]): that sync would then flush every page
/// the checkpointer copied since the last restart, tens of megabytes, with
/// every write waiting. Synced here,
/// off the writer, the writer's sync is left the last pass's pages.
///
/// The descriptor is never closed: closing any descriptor of a file drops
/// every POSIX lock the process holds on that file, SQLite's included.
pub(super) struct DatabaseFile(ManuallyDrop<File>);

impl DatabaseFile {
    /// `None` when there is no file to open (an in-memory database).
    pub(super) fn open(path: &Path) -> Option<Arc<Self>> {
        let file = File::open(path).ok()?;
        Some(Arc::new(Self(ManuallyDrop::new(file))))
    }

    /// Flushes the pages copied into the file so far to the disk; whether it
    /// could.
    pub(super) async fn sync(self: &Arc<Self>) -> bool {
        let file = self.clone();
        match tokio::task::spawn_blocking(move || file.0.sync_data()).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                if let Some(suppressed) = crate::log_throttle::admit("sqlite file sync failed") {
                    tracing::error!(%error, suppressed, "the SQLite database file could not be synced");
                }
                false
            }
            // The runtime is shutting down.
            Err(_) => false,
        }
    }
}

/// The writers (sqlx's and the group thread's) still checkpoint by
/// themselves past this many WAL pages (80 MB): a backstop should the
/// checkpointer fall behind.
pub(super) const WRITER_AUTOCHECKPOINT_PAGES: i64 = 20_000;

/// The restart must come before the backstop: past it, the writer itself
/// would checkpoint the whole WAL with every write waiting.
const _: () = assert!(
    WAL_RESTART_PAGES < WRITER_AUTOCHECKPOINT_PAGES,
    "WAL_RESTART_PAGES must stay below WRITER_AUTOCHECKPOINT_PAGES"
);

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
