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
                let sql = format!(
                    "INSERT INTO users (id, username, first_name, last_name, about, email, \
                     email_verified, phone, phone_verified, password_hash, verified, date_joined) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                     RETURNING {}",
                    $crate::store::sql::USER_COLUMNS
                );
                let mut tx = self.write().await?;
                let inserted = sqlx::query_as::<_, User>(&sql)
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
                let (condition, order, value) = match key {
                    UserKey::Id(v) => ("id = $1", "id", v),
                    UserKey::Username(v) => ("lower(username) = lower($1)", "id", v),
                    UserKey::Email(v) => ("email = $1", "email_verified DESC, date_joined, id", v),
                    UserKey::Phone(v) => ("phone = $1", "phone_verified DESC, date_joined, id", v),
                };
                let sql = format!(
                    "SELECT {} FROM users WHERE {condition} ORDER BY {order} LIMIT 1",
                    $crate::store::sql::USER_COLUMNS
                );
                Ok(sqlx::query_as::<_, User>(&sql)
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
                let sql = format!(
                    "UPDATE users SET \
                       verified = COALESCE($2, verified), \
                       suspended = COALESCE($3, suspended), \
                       email_verified = (email_verified OR ($4 AND email IS NOT NULL)), \
                       phone_verified = (phone_verified OR ($4 AND phone IS NOT NULL)) \
                     WHERE id = $1 RETURNING {}",
                    $crate::store::sql::USER_COLUMNS
                );
                let mut tx = self.write().await?;
                let user = sqlx::query_as::<_, User>(&sql)
                    .bind(user_id)
                    .bind(flags.verified)
                    .bind(flags.suspended)
                    .bind(flags.verified == Some(true))
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
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
                let sql = format!(
                    "INSERT INTO apps (client_id, secret_digest, name, description, \
                     redirect_url, site_url, owner_id, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {}",
                    $crate::store::sql::APP_COLUMNS
                );
                let mut tx = self.write().await?;
                let inserted = sqlx::query_as::<_, App>(&sql)
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
                let sql = format!(
                    "SELECT {} FROM apps WHERE client_id = $1",
                    $crate::store::sql::APP_COLUMNS
                );
                Ok(sqlx::query_as::<_, App>(&sql)
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
                let sql = format!(
                    "UPDATE apps SET suspended = $2 WHERE client_id = $1 RETURNING {}",
                    $crate::store::sql::APP_COLUMNS
                );
                let mut tx = self.write().await?;
                let app = sqlx::query_as::<_, App>(&sql)
                    .bind(client_id)
                    .bind(suspended)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
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
            async fn audit_snapshot(&self) -> Result<AuditSnapshot, StoreError> {
                let mut tx = self.snapshot().await?;
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
                let payments = sqlx::query_as::<_, $crate::store::AuditPayment>(
                    "SELECT p.id, p.action, p.status, p.actor_id, p.target_user_id, \
                     p.amount_cents, r.amount_cents AS refund_amount_cents, \
                     r.target_user_id AS refund_target_id \
                     FROM payments p LEFT JOIN payments r ON r.id = p.refund_payment_id \
                     WHERE p.kind = 'payment' ORDER BY p.id",
                )
                .fetch_all(&mut *tx)
                .await?;
                let payment_entries = sqlx::query_as::<_, $crate::store::PaymentEntrySum>(
                    "SELECT payment_id, account, CAST(SUM(amount_cents) AS BIGINT) AS total_cents \
                     FROM ledger_entries WHERE payment_id IS NOT NULL \
                     GROUP BY payment_id, account ORDER BY payment_id, account",
                )
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(AuditSnapshot {
                    balances,
                    ledger_sums,
                    unbalanced_movements,
                    pending_pay_cents,
                    payments,
                    payment_entries,
                })
            }
        }
    };
}

pub(crate) use impl_store;
