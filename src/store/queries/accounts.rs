//! What an account goes through besides its row: verification of its
//! addresses, the sign-in throttle, ended browser sessions.

use super::{Backend, ThisStore, Tx, KEY_LOCK};
use crate::store::{AccountStore, StoreError, User};

#[async_trait::async_trait]
impl AccountStore for ThisStore {
    #[tracing::instrument(skip_all, fields(channel = link.channel.as_str()))]
    async fn insert_verification(
        &self,
        link: &crate::store::NewVerification,
    ) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "INSERT INTO verification_tokens \
             (digest, user_id, channel, address, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&link.digest)
            .bind(&link.user_id)
            .bind(link.channel.as_str())
            .bind(&link.address)
            .bind(link.created_at)
            .bind(link.expires_at),
        )
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn use_verification(&self, digest: &str, now: i64) -> Result<Option<User>, StoreError> {
        let mut tx = self.write().await?;
        let spent: Option<(String, String, String)> = sqlx::query_as(
            "UPDATE verification_tokens SET used_at = $2 \
             WHERE digest = $1 AND used_at IS NULL AND expires_at > $2 \
             RETURNING user_id, channel, address",
        )
        .bind(digest)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let user = match spent {
            None => None,
            Some((user_id, channel, address)) => {
                const SQL: &str = concat!(
                    "UPDATE users SET verified = TRUE, \
                       email_verified = (email_verified OR ($2 = 'email' AND email = $3)), \
                       phone_verified = (phone_verified OR ($2 = 'phone' AND phone = $3)) \
                     WHERE id = $1 AND (($2 = 'email' AND email = $3) \
                                     OR ($2 = 'phone' AND phone = $3)) \
                     RETURNING ",
                    crate::store::sql::user_columns!(),
                );
                sqlx::query_as::<_, User>(SQL)
                    .bind(&user_id)
                    .bind(&channel)
                    .bind(&address)
                    .fetch_optional(&mut *tx)
                    .await?
            }
        };
        tx.commit().await?;
        if user.is_some() {
            // The token checks remember the user's row (see `TokenCache`).
            self.revocations().bump();
        }
        Ok(user)
    }

    #[tracing::instrument(skip_all)]
    async fn reserve_verification_send(
        &self,
        counts: &[crate::store::SendCount<'_>],
        now: i64,
    ) -> Result<Result<(), i64>, StoreError> {
        let mut tx = self.write().await?;
        let keys = counts
            .iter()
            .map(|c| format!("verification-send:{}", c.key));
        lock_keys(&mut tx, keys).await?;
        let mut refused: Option<i64> = None;
        for count in counts {
            let limits = count.limits;
            let (sent, first, last): (i64, Option<i64>, Option<i64>) = sqlx::query_as(
                "SELECT COUNT(*), MIN(sent_at), MAX(sent_at) FROM verification_sends \
                 WHERE address = $1 AND sent_at > $2",
            )
            .bind(count.key)
            .bind(now.saturating_sub(limits.window))
            .fetch_one(&mut *tx)
            .await?;
            let moment = match (first, last) {
                (_, Some(last)) if last > now.saturating_sub(limits.min_gap) => {
                    Some(last.saturating_add(limits.min_gap))
                }
                (Some(first), _) if sent >= limits.per_window => {
                    Some(first.saturating_add(limits.window))
                }
                _ => None,
            };
            refused = refused.max(moment);
        }
        let addresses: Vec<&str> = counts.iter().map(|count| count.key).collect();
        record_unless_refused(
            tx,
            refused.map_or(Ok(()), Err),
            "INSERT INTO verification_sends (address, sent_at) VALUES ($1, $2)",
            addresses,
            now,
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn admit_signin(
        &self,
        keys: &[String],
        since: i64,
        now: i64,
        decide: crate::store::SigninDecision<'_>,
    ) -> Result<Result<(), std::time::Duration>, StoreError> {
        let mut tx = self.write_unsynced().await?;
        lock_keys(&mut tx, keys.iter().cloned()).await?;
        let mut seen = Vec::with_capacity(keys.len());
        for key in keys {
            sqlx::query("DELETE FROM signin_failures WHERE key = $1 AND at <= $2")
                .bind(key)
                .bind(since)
                .execute(&mut *tx)
                .await?;
            let row: (i64, Option<i64>) =
                sqlx::query_as("SELECT COUNT(*), MAX(at) FROM signin_failures WHERE key = $1")
                    .bind(key)
                    .fetch_one(&mut *tx)
                    .await?;
            seen.push(row);
        }
        record_unless_refused(
            tx,
            decide(&seen),
            "INSERT INTO signin_failures (key, at) VALUES ($1, $2)",
            keys.iter().map(String::as_str),
            now,
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn forget_signin_attempt(
        &self,
        clear_key: &str,
        attempt_keys: &[String],
        at: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write_unsynced().await?;
        sqlx::query("DELETE FROM signin_failures WHERE key = $1")
            .bind(clear_key)
            .execute(&mut *tx)
            .await?;
        for_each_key(
            &mut tx,
            "DELETE FROM signin_failures WHERE key = $1 AND at = $2",
            attempt_keys.iter().map(String::as_str),
            at,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn end_session(
        &self,
        session_id: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        sqlx::query("DELETE FROM ended_sessions WHERE expires_at < $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO ended_sessions (session_id, expires_at) VALUES ($1, $2) \
             ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(session_id)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn session_ended(
        &self,
        session_id: &str,
        user_id: &str,
        since: i64,
    ) -> Result<bool, StoreError> {
        let found: Option<String> = self
            .read_value(
                sqlx::query_scalar(
                    "SELECT session_id FROM ended_sessions WHERE session_id = $1 \
                     UNION ALL SELECT user_id FROM session_cuts WHERE user_id = $2 AND cut_at > $3",
                )
                .bind(session_id)
                .bind(user_id)
                .bind(since),
            )
            .await?;
        Ok(found.is_some())
    }
}

/// Locks each key once (`KEY_LOCK`), in one order, so two transactions
/// naming the same keys never wait on each other.
async fn lock_keys(tx: &mut Tx, keys: impl Iterator<Item = String>) -> Result<(), StoreError> {
    let mut keys: Vec<String> = keys.collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        sqlx::query(KEY_LOCK).bind(key).execute(&mut **tx).await?;
    }
    Ok(())
}

/// Ends a throttle's check in `tx` (its keys locked): unless `decided` is a
/// refusal, records the attempt with `record` (see [`for_each_key`]); then
/// commits. Answers `decided`.
async fn record_unless_refused<E: Send>(
    mut tx: Tx,
    decided: Result<(), E>,
    record: &str,
    keys: impl IntoIterator<Item = &str>,
    now: i64,
) -> Result<Result<(), E>, StoreError> {
    if decided.is_ok() {
        for_each_key(&mut tx, record, keys, now).await?;
    }
    tx.commit().await?;
    Ok(decided)
}

/// Runs `sql` once for each of a throttle's keys, bound as `$1`, with `at`
/// bound as `$2`.
async fn for_each_key(
    tx: &mut Tx,
    sql: &str,
    keys: impl IntoIterator<Item = &str>,
    at: i64,
) -> Result<(), StoreError> {
    for key in keys {
        sqlx::query(sql)
            .bind(key)
            .bind(at)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
