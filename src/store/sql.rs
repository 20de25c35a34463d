//! SQL text both databases accept (`$n` placeholders, `RETURNING`,
//! `ON CONFLICT`), and the one `Store` implementation built from it.
//!
//! sqlx cannot check one query against two backends, and code generic over
//! `sqlx::Database` needs unwieldy bounds, so the implementation is written once
//! in `impl_store!` and instantiated for each backend's concrete pool types. Each
//! backend supplies what differs: how a write transaction or a consistent snapshot
//! begins, and its migrations.

pub const USER_COLUMNS: &str = "id, username, first_name, last_name, about, \
    profile_picture_url, email, email_verified, phone, phone_verified, password_hash, \
    verified, suspended, balance_cents, date_joined";

pub const APP_COLUMNS: &str = "client_id, secret_digest, name, description, redirect_url, \
    site_url, owner_id, suspended, created_at";

/// The ids of the payments (not refunds) the audit must look at: those whose
/// refund breaks the refund rule (a returned pay has one, of its amount, to its
/// actor; nothing else has one), and those whose ledger entries, net by account,
/// may differ from what their action and status say moved (the audit's
/// `expected_flows`). One row per payment, read with its entries through the
/// payment index: the net of its actor, its target and `@held` must be the
/// expected one, and any other account must net to zero; that is decided exactly
/// when there is at most one other account, and more than one (never written by
/// Tally) makes the payment a suspect, which the audit then checks in full.
pub const AUDIT_SUSPECTS: &str = "\
    SELECT id FROM ( \
      SELECT p.id, p.actor_id AS actor, p.target_user_id AS target, \
        p.amount_cents AS amount, \
        CASE WHEN p.action = 'pay' AND p.status IN ('pending', 'settled') THEN p.actor_id \
             WHEN p.action = 'charge' AND p.status = 'settled' THEN p.target_user_id END \
          AS debited, \
        CASE WHEN p.action = 'pay' AND p.status = 'pending' THEN '@held' \
             WHEN p.action = 'pay' AND p.status = 'settled' THEN p.target_user_id \
             WHEN p.action = 'charge' AND p.status = 'settled' THEN p.actor_id END \
          AS credited, \
        CASE WHEN p.action = 'pay' AND p.status IN ('failed', 'cancelled', 'expired') \
             THEN CASE WHEN MIN(r.amount_cents) IS NULL \
                         OR MIN(r.amount_cents) <> p.amount_cents \
                         OR MIN(r.target_user_id) IS DISTINCT FROM p.actor_id \
                       THEN 1 ELSE 0 END \
             ELSE CASE WHEN MIN(r.amount_cents) IS NULL THEN 0 ELSE 1 END END AS refund_bad, \
        COALESCE(SUM(CASE WHEN e.account = p.actor_id THEN e.amount_cents ELSE 0 END), 0) \
          AS s_actor, \
        COALESCE(SUM(CASE WHEN e.account = p.target_user_id \
                           AND e.account IS DISTINCT FROM p.actor_id \
                          THEN e.amount_cents ELSE 0 END), 0) AS s_target, \
        COALESCE(SUM(CASE WHEN e.account = '@held' THEN e.amount_cents ELSE 0 END), 0) \
          AS s_held, \
        COALESCE(SUM(CASE WHEN e.account = p.actor_id OR e.account = p.target_user_id \
                            OR e.account = '@held' THEN 0 ELSE e.amount_cents END), 0) \
          AS s_other, \
        MIN(CASE WHEN e.account = p.actor_id OR e.account = p.target_user_id \
                   OR e.account = '@held' THEN NULL ELSE e.account END) AS first_other, \
        MAX(CASE WHEN e.account = p.actor_id OR e.account = p.target_user_id \
                   OR e.account = '@held' THEN NULL ELSE e.account END) AS last_other \
      FROM payments p \
      LEFT JOIN payments r ON r.id = p.refund_payment_id \
      LEFT JOIN ledger_entries e ON e.payment_id = p.id \
      WHERE p.kind = 'payment' \
      GROUP BY p.id \
    ) g \
    WHERE refund_bad = 1 OR s_other <> 0 OR first_other <> last_other \
      OR s_actor <> CASE WHEN actor IS NULL THEN 0 \
           ELSE CASE WHEN debited = actor THEN -amount ELSE 0 END \
              + CASE WHEN credited = actor THEN amount ELSE 0 END END \
      OR s_target <> CASE WHEN target IS NULL OR target IS NOT DISTINCT FROM actor THEN 0 \
           ELSE CASE WHEN debited = target THEN -amount ELSE 0 END \
              + CASE WHEN credited = target THEN amount ELSE 0 END END \
      OR s_held <> CASE WHEN credited = '@held' THEN amount ELSE 0 END";

macro_rules! impl_store {
    ($store:ty, $backend:literal) => {
        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            fn backend(&self) -> &'static str {
                $backend
            }

            async fn migrate(&self) -> Result<(), StoreError> {
                self.run_migrations().await
            }

            async fn backup_into(&self, path: &str) -> Result<Option<()>, StoreError> {
                self.copy_into(path).await
            }

            fn revocation_epoch(&self) -> u64 {
                self.revocations.current()
            }

            #[tracing::instrument(skip_all)]
            async fn ping(&self) -> Result<(), StoreError> {
                self.ready().await
            }

            #[tracing::instrument(skip_all, fields(key))]
            async fn server_setting_or_insert(
                &self,
                key: &str,
                candidate: &str,
            ) -> Result<String, StoreError> {
                let mut tx = self.write().await?;
                sqlx::query(
                    "INSERT INTO server_settings (key, value) VALUES ($1, $2) \
                     ON CONFLICT (key) DO NOTHING",
                )
                .bind(key)
                .bind(candidate)
                .execute(&mut *tx)
                .await?;
                let value: String =
                    sqlx::query_scalar("SELECT value FROM server_settings WHERE key = $1")
                        .bind(key)
                        .fetch_one(&mut *tx)
                        .await?;
                tx.commit().await?;
                Ok(value)
            }

            #[tracing::instrument(skip_all, fields(username = %user.username))]
            async fn insert_user(&self, user: &NewUser) -> Result<User, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "INSERT INTO users (id, username, first_name, last_name, about, email, \
                         email_verified, phone, phone_verified, password_hash, verified, date_joined) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                         RETURNING {}",
                        $crate::store::sql::USER_COLUMNS
                    )
                });
                let mut tx = self.write().await?;
                let inserted = sqlx::query_as::<_, User>(&SQL)
                    .bind(&user.id)
                    .bind(&user.username)
                    .bind(&user.first_name)
                    .bind(&user.last_name)
                    .bind(&user.about)
                    .bind(&user.email)
                    .bind(user.verified && user.email.is_some())
                    .bind(&user.phone)
                    .bind(user.verified && user.phone.is_some())
                    .bind(&user.password_hash)
                    .bind(user.verified)
                    .bind(user.date_joined)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(inserted)
            }

            #[tracing::instrument(skip_all)]
            async fn find_user(&self, key: UserKey<'_>) -> Result<Option<User>, StoreError> {
                // Several accounts may hold one unverified address; the one
                // that verified it comes first, else the earliest.
                static BY: std::sync::LazyLock<[String; 4]> = std::sync::LazyLock::new(|| {
                    [
                        ("id = $1", "id"),
                        ("lower(username) = lower($1)", "id"),
                        ("email = $1", "email_verified DESC, date_joined, id"),
                        ("phone = $1", "phone_verified DESC, date_joined, id"),
                    ]
                    .map(|(condition, order)| {
                        format!(
                            "SELECT {} FROM users WHERE {condition} ORDER BY {order} LIMIT 1",
                            $crate::store::sql::USER_COLUMNS
                        )
                    })
                });
                let (sql, value) = match key {
                    UserKey::Id(v) => (&BY[0], v),
                    UserKey::Username(v) => (&BY[1], v),
                    UserKey::Email(v) => (&BY[2], v),
                    UserKey::Phone(v) => (&BY[3], v),
                };
                Ok(sqlx::query_as::<_, User>(sql)
                    .bind(value)
                    .fetch_optional(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all, fields(user_id))]
            async fn update_user_flags(
                &self,
                user_id: &str,
                flags: UserFlags,
            ) -> Result<Option<User>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "UPDATE users SET \
                           verified = COALESCE($2, verified), \
                           suspended = COALESCE($3, suspended), \
                           email_verified = (email_verified OR ($4 AND email IS NOT NULL)), \
                           phone_verified = (phone_verified OR ($4 AND phone IS NOT NULL)) \
                         WHERE id = $1 RETURNING {}",
                        $crate::store::sql::USER_COLUMNS
                    )
                });
                let mut tx = self.write().await?;
                let user = sqlx::query_as::<_, User>(&SQL)
                    .bind(user_id)
                    .bind(flags.verified)
                    .bind(flags.suspended)
                    .bind(flags.verified == Some(true))
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                self.revocations.bump();
                Ok(user)
            }

            #[tracing::instrument(skip_all)]
            async fn add_friendship(&self, a: &str, b: &str, at: i64) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
                sqlx::query(
                    "INSERT INTO friendships (user_id, friend_id, created_at) \
                     VALUES ($1, $2, $3), ($2, $1, $3) ON CONFLICT DO NOTHING",
                )
                .bind(a)
                .bind(b)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            #[tracing::instrument(skip_all)]
            async fn are_friends(&self, a: &str, b: &str) -> Result<bool, StoreError> {
                let found: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM friendships WHERE user_id = $1 AND friend_id = $2)",
                )
                .bind(a)
                .bind(b)
                .fetch_one(self.reader())
                .await?;
                Ok(found)
            }

            #[tracing::instrument(skip_all, fields(name = %app.name))]
            async fn insert_app(&self, app: &NewApp) -> Result<App, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "INSERT INTO apps (client_id, secret_digest, name, description, \
                         redirect_url, site_url, owner_id, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {}",
                        $crate::store::sql::APP_COLUMNS
                    )
                });
                let mut tx = self.write().await?;
                let inserted = sqlx::query_as::<_, App>(&SQL)
                    .bind(&app.client_id)
                    .bind(&app.secret_digest)
                    .bind(&app.name)
                    .bind(&app.description)
                    .bind(&app.redirect_url)
                    .bind(&app.site_url)
                    .bind(&app.owner_id)
                    .bind(app.created_at)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(inserted)
            }

            #[tracing::instrument(skip_all)]
            async fn find_app(&self, client_id: &str) -> Result<Option<App>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "SELECT {} FROM apps WHERE client_id = $1",
                        $crate::store::sql::APP_COLUMNS
                    )
                });
                Ok(sqlx::query_as::<_, App>(&SQL)
                    .bind(client_id)
                    .fetch_optional(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn set_app_suspended(
                &self,
                client_id: &str,
                suspended: bool,
            ) -> Result<Option<App>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "UPDATE apps SET suspended = $2 WHERE client_id = $1 RETURNING {}",
                        $crate::store::sql::APP_COLUMNS
                    )
                });
                let mut tx = self.write().await?;
                let app = sqlx::query_as::<_, App>(&SQL)
                    .bind(client_id)
                    .bind(suspended)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                self.revocations.bump();
                Ok(app)
            }

            #[tracing::instrument(skip_all, fields(to = %movement.to, cents = movement.cents))]
            async fn deposit(&self, movement: &Movement) -> Result<i64, StoreError> {
                let mut tx = self.write().await?;
                let balance: Option<i64> = sqlx::query_scalar(
                    "UPDATE users SET balance_cents = balance_cents + $1 WHERE id = $2 \
                     RETURNING balance_cents",
                )
                .bind(movement.cents)
                .bind(&movement.to)
                .fetch_optional(&mut *tx)
                .await?;
                let balance = balance.ok_or(StoreError::NotFound("user"))?;
                sqlx::query(
                    "INSERT INTO ledger_entries \
                     (movement_id, kind, account, amount_cents, payment_id, created_at) \
                     VALUES ($1, $2, $3, $4, NULL, $5), ($1, $2, $6, $7, NULL, $5)",
                )
                .bind(&movement.id)
                .bind(movement.kind)
                .bind(&movement.from)
                .bind(-movement.cents)
                .bind(movement.at)
                .bind(&movement.to)
                .bind(movement.cents)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(balance)
            }

            #[tracing::instrument(skip_all)]
            async fn audit_snapshot(
                &self,
                chunk: i64,
                each: &mut (dyn FnMut($crate::store::AuditChunk) + Send),
            ) -> Result<AuditSnapshot, StoreError> {
                // Every sum is taken in SQL; the covering indexes on ledger_entries
                // let each be read from an index alone.
                let mut tx = self.snapshot().await?;
                if $backend == "postgres" {
                    // Room to sum 100,000s of accounts by hash, not on disk; and
                    // no JIT, whose compiling costs seconds here and saves none.
                    for setting in ["SET LOCAL work_mem = '64MB'", "SET LOCAL jit = off"] {
                        sqlx::query(setting).execute(&mut *tx).await?;
                    }
                }
                let balances = sqlx::query_as::<_, AccountBalance>(
                    "SELECT id AS user_id, username, balance_cents FROM users ORDER BY id",
                )
                .fetch_all(&mut *tx)
                .await?;
                let ledger_sums = sqlx::query_as::<_, LedgerSum>(
                    "SELECT account, CAST(SUM(amount_cents) AS BIGINT) AS total_cents \
                     FROM ledger_entries GROUP BY account ORDER BY account",
                )
                .fetch_all(&mut *tx)
                .await?;
                let unbalanced_movements = sqlx::query_as::<_, LedgerSum>(
                    "SELECT movement_id AS account, CAST(SUM(amount_cents) AS BIGINT) AS total_cents \
                     FROM ledger_entries GROUP BY movement_id HAVING SUM(amount_cents) <> 0",
                )
                .fetch_all(&mut *tx)
                .await?;
                let pending_pay_cents: i64 = sqlx::query_scalar(
                    "SELECT CAST(COALESCE(SUM(amount_cents), 0) AS BIGINT) FROM payments \
                     WHERE kind = 'payment' AND action = 'pay' AND status = 'pending'",
                )
                .fetch_one(&mut *tx)
                .await?;
                // Each payment's entries, net by account, against what its action
                // and status say moved, and its refund against the refund rule, in
                // one pass in SQL: only the payments that disagree come back, to
                // be read again below and worded by the audit.
                if $backend == "postgres" {
                    // Each payment's few entries through the payment index, in
                    // payment order: hashing and sorting millions of rows instead
                    // (the planner's choice) takes twice as long and spills to disk.
                    for setting in [
                        "SET LOCAL enable_hashjoin = off",
                        "SET LOCAL enable_sort = off",
                        "SET LOCAL max_parallel_workers_per_gather = 0",
                    ] {
                        sqlx::query(setting).execute(&mut *tx).await?;
                    }
                }
                let mut suspects: Vec<String> =
                    sqlx::query_scalar($crate::store::sql::AUDIT_SUSPECTS)
                        .fetch_all(&mut *tx)
                        .await?;
                if $backend == "postgres" {
                    for setting in [
                        "RESET enable_hashjoin",
                        "RESET enable_sort",
                        "RESET max_parallel_workers_per_gather",
                    ] {
                        sqlx::query(setting).execute(&mut *tx).await?;
                    }
                }
                suspects.sort();
                for ids in suspects.chunks(chunk.max(1) as usize) {
                    let mut payments_query = sqlx::QueryBuilder::<Backend>::new(
                        "SELECT p.id, p.action, p.status, p.actor_id, p.target_user_id, \
                         p.amount_cents, r.amount_cents AS refund_amount_cents, \
                         r.target_user_id AS refund_target_id \
                         FROM payments p LEFT JOIN payments r ON r.id = p.refund_payment_id \
                         WHERE p.kind = 'payment' AND p.id IN (",
                    );
                    let mut entries_query = sqlx::QueryBuilder::<Backend>::new(
                        "SELECT payment_id, account, amount_cents AS total_cents \
                         FROM ledger_entries WHERE payment_id IN (",
                    );
                    for query in [&mut payments_query, &mut entries_query] {
                        let mut list = query.separated(", ");
                        for id in ids {
                            list.push_bind(id.clone());
                        }
                        query.push(")");
                    }
                    let mut payments = payments_query
                        .build_query_as::<$crate::store::AuditPayment>()
                        .fetch_all(&mut *tx)
                        .await?;
                    payments.sort_by(|a, b| a.id.cmp(&b.id));
                    let payment_entries = entries_query
                        .build_query_as::<$crate::store::PaymentEntrySum>()
                        .fetch_all(&mut *tx)
                        .await?;
                    each($crate::store::AuditChunk {
                        payments,
                        payment_entries,
                    });
                }
                // Entries that name no payment.
                let entries_without_payment: Vec<String> = sqlx::query_scalar(
                    "SELECT e.payment_id FROM (SELECT DISTINCT payment_id FROM ledger_entries \
                     WHERE payment_id IS NOT NULL) e WHERE NOT EXISTS ( \
                       SELECT 1 FROM payments p WHERE p.id = e.payment_id AND p.kind = 'payment')",
                )
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(AuditSnapshot {
                    balances,
                    ledger_sums,
                    unbalanced_movements,
                    pending_pay_cents,
                    entries_without_payment,
                })
            }
        }
    };
}

pub(crate) use impl_store;
