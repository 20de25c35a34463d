//! How the kernel schedules Tally's password hashing threads against the rest
//! (Linux; a no-op elsewhere).
//!
//! Their arithmetic runs as SCHED_IDLE ([`run_only_when_idle`]): any other
//! thread that wakes up takes the CPU from it at once, so an API request never
//! waits behind a hash. Only the arithmetic: a SCHED_IDLE thread must share no
//! lock with the API (see `auth::password`). At nice 19, the lowest normal
//! priority, a hashing thread that got the CPU kept it for the rest of its
//! slice (a few milliseconds) before a woken API thread could run. Lowering a
//! thread's own policy needs no privilege.
//!
//! Measured and not adopted: SCHED_BATCH for the whole server (a woken batch
//! thread waits for the running one instead of preempting it). It cut a SQLite
//! pay's context switches from 12.9 to 2.9, but `GET /v1/me` lost a third of
//! its rate (30,060 against 20,122 requests a second on one core, no steal).

/// Makes the calling thread SCHED_IDLE: it runs only when no other thread of
/// the machine wants the CPU; failing that, it is made as nice as can be.
pub fn run_only_when_idle() {
    #[cfg(target_os = "linux")]
    if let Err(error) = linux::idle_current_thread() {
        tracing::warn!(%error, "cannot make this thread run only when the CPU is idle");
        let me = rustix::thread::gettid();
        let _ = rustix::process::setpriority_process(Some(me), linux::NICEST);
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
        ThreadPriority, ThreadSchedulePolicy,
    };

    /// The highest nice value (the lowest priority of the normal policies).
    pub const NICEST: i32 = 19;

    /// SCHED_IDLE ignores the nice value (`thread_priority` sets 0 for it).
    pub fn idle_current_thread() -> Result<(), thread_priority::Error> {
        set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Min,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
        )
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The calling thread's scheduling policy, as the kernel reports it in
    /// `/proc/thread-self/stat` (field 41).
    fn policy() -> anyhow::Result<i64> {
        let stat = std::fs::read_to_string("/proc/thread-self/stat")?;
        // The fields after the command name, which is in parentheses, start
        // with field 3.
        let after_name = stat.rfind(") ").map_or("", |at| &stat[at + 2..]);
        Ok(after_name.split(' ').nth(41 - 3).unwrap_or("").parse()?)
    }

    const SCHED_OTHER: i64 = 0;
    const SCHED_IDLE: i64 = 5;

    #[test]
    fn a_hashing_thread_runs_only_when_idle() -> anyhow::Result<()> {
        let (before, after) = std::thread::spawn(|| -> anyhow::Result<(i64, i64)> {
            let before = policy()?;
            super::run_only_when_idle();
            Ok((before, policy()?))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread panicked"))??;
        assert_eq!((before, after), (SCHED_OTHER, SCHED_IDLE));
        Ok(())
    }
}
