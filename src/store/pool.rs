//! What both backends' connection handling shares.

/// Counts the revocations, suspensions and secret changes this process has
/// committed, so that what was read before one of them is known to be stale
/// (the introspection cache). Bumped after the commit: a read that started
/// before it may have seen the old rows, and then sees another count.
#[derive(Default)]
pub struct RevocationEpoch(std::sync::atomic::AtomicU64);

impl RevocationEpoch {
    pub fn current(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) fn bump(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A pool size of `per_core` connections for each core, within `min..=max`.
pub(super) fn connections_per_core(per_core: u32, min: u32, max: u32) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    u32::try_from(cores)
        .unwrap_or(u32::MAX)
        .saturating_mul(per_core)
        .clamp(min, max)
}

/// What a backend's `write_batch` runs: one write on the connection it lends.
pub(crate) type BatchFuture<'c, O> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<O, sqlx::Error>> + Send + 'c>>;

/// Connections lent for one statement (or one batch) at a time. sqlx's own
/// pool pings every connection it takes back, a round trip to the database per
/// statement; these go back as they are. A connection that failed is not
/// known to its lease, so after any error that may mean a broken connection
/// (see [`ConnectionTrouble`]) each one lent or idle at the time is pinged
/// once before it is lent again, and replaced if that fails. Transactions stay on sqlx's pool, whose
/// ping also flushes the rollback of one dropped half-way.
pub(crate) struct Lender<DB: sqlx::Database> {
    idle: std::sync::Mutex<Vec<Idle<DB::Connection>>>,
    permits: tokio::sync::Semaphore,
    size: usize,
    options: <DB::Connection as sqlx::Connection>::Options,
    acquire_timeout: std::time::Duration,
}

struct Idle<C> {
    conn: C,
    /// When it was last known to work: the start of its last lease.
    worked_at: std::time::Instant,
}

impl<DB: sqlx::Database> Lender<DB> {
    pub(super) fn new(
        options: <DB::Connection as sqlx::Connection>::Options,
        size: u32,
        acquire_timeout: std::time::Duration,
    ) -> Self {
        let size = usize::try_from(size).unwrap_or(1).max(1);
        Self {
            idle: std::sync::Mutex::new(Vec::with_capacity(size)),
            permits: tokio::sync::Semaphore::new(size),
            size,
            options,
            acquire_timeout,
        }
    }

    /// Lends a connection: an idle one, or a new one while fewer than the size
    /// exist. Waits at most the acquire timeout for one to come back.
    pub(crate) async fn lease(&self) -> Result<Lease<'_, DB>, sqlx::Error> {
        let permit = tokio::time::timeout(self.acquire_timeout, self.permits.acquire())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let idle = self.lock_idle().pop();
        let conn = match idle {
            Some(mut idle) if ConnectionTrouble::seen_within(idle.worked_at.elapsed()) => {
                match sqlx::Connection::ping(&mut idle.conn).await {
                    Ok(()) => idle.conn,
                    Err(_) => self.connect().await?,
                }
            }
            Some(idle) => idle.conn,
            None => self.connect().await?,
        };
        Ok(Lease {
            conn: Some(conn),
            lent_at: std::time::Instant::now(),
            lender: self,
            _permit: permit,
        })
    }

    /// Opens every connection now, on the caller's runtime (see
    /// `Store::open_all_connections`).
    pub(super) async fn open_all(&self) -> Result<(), sqlx::Error> {
        let leases =
            futures_util::future::try_join_all((0..self.size).map(|_| self.lease())).await?;
        drop(leases);
        Ok(())
    }

    async fn connect(&self) -> Result<DB::Connection, sqlx::Error> {
        tokio::time::timeout(
            self.acquire_timeout,
            <DB::Connection as sqlx::Connection>::connect_with(&self.options),
        )
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)?
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle<DB::Connection>>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A lent connection; it goes back idle when dropped.
pub(crate) struct Lease<'a, DB: sqlx::Database> {
    /// Always `Some` until the lease is dropped.
    conn: Option<DB::Connection>,
    lent_at: std::time::Instant,
    lender: &'a Lender<DB>,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl<DB: sqlx::Database> std::ops::Deref for Lease<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match &self.conn {
            Some(conn) => conn,
            None => unreachable!("a lease holds its connection until it is dropped"),
        }
    }
}

impl<DB: sqlx::Database> std::ops::DerefMut for Lease<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match &mut self.conn {
            Some(conn) => conn,
            None => unreachable!("a lease holds its connection until it is dropped"),
        }
    }
}

impl<DB: sqlx::Database> Drop for Lease<'_, DB> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // A trouble seen while it was out may have been its own: it counts
            // as working only from when it was lent.
            self.lender.lock_idle().push(Idle {
                conn,
                worked_at: self.lent_at,
            });
        }
    }
}

/// When this process last saw an error that may mean a broken database
/// connection (one a client may retry, `StoreError::Unavailable`), so that the
/// pools check the connections that were idle or in use at the time.
pub(crate) struct ConnectionTrouble;

/// Microseconds from `TROUBLE_EPOCH` to the last trouble, plus one (0: none).
static LAST_TROUBLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static TROUBLE_EPOCH: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

impl ConnectionTrouble {
    pub(crate) fn seen() {
        let at = u64::try_from(TROUBLE_EPOCH.elapsed().as_micros()).unwrap_or(u64::MAX);
        LAST_TROUBLE.store(at.saturating_add(1), std::sync::atomic::Ordering::Release);
    }

    /// Whether a trouble came within the last `idle_for`: a connection idle
    /// that long may have been broken meanwhile (sqlx's pool checks each
    /// connection as it comes back, so only a trouble since then matters).
    pub(crate) fn seen_within(idle_for: std::time::Duration) -> bool {
        match LAST_TROUBLE.load(std::sync::atomic::Ordering::Acquire) {
            0 => false,
            at => {
                let last = std::time::Duration::from_micros(at - 1);
                TROUBLE_EPOCH.elapsed().saturating_sub(last) <= idle_for
            }
        }
    }
}

/// sqlx's `before_acquire` hook for the pools of transactions: a connection
/// that sat idle through a connection trouble is pinged before use, and
/// replaced if that fails; otherwise no ping (see [`Lender`]).
pub(super) fn check_after_trouble<C: sqlx::Connection>(
    conn: &mut C,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> futures_util::future::BoxFuture<'_, Result<bool, sqlx::Error>> {
    Box::pin(async move {
        if ConnectionTrouble::seen_within(meta.idle_for) {
            Ok(conn.ping().await.is_ok())
        } else {
            Ok(true)
        }
    })
}
