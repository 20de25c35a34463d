//! Second factors (SPEC §11): the authenticator app, recovery codes,
//! passkeys, WebAuthn ceremonies, and the password change that ends the
//! user's other sessions.

use super::{Backend, ThisStore, Tx};
use crate::store::{Ceremony, FactorStore, Factors, PasskeyRow, StoreError, TotpRow};

const PASSKEY_COLUMNS: &str = "credential_id, user_id, name, credential, sign_count, \
     backup_eligible, created_at, last_used_at";

async fn insert_recovery_codes(
    tx: &mut Tx,
    user_id: &str,
    digests: &[String],
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM recovery_codes WHERE user_id = $1")
        .bind(user_id)
        .execute(&mut **tx)
        .await?;
    for digest in digests {
        sqlx::query("INSERT INTO recovery_codes (digest, user_id, created_at) VALUES ($1, $2, $3)")
            .bind(digest)
            .bind(user_id)
            .bind(now)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Ends the transaction that set up a second factor (`stored`: whether it
/// did): if it did, stores `recovery_digests` (when given) as the user's
/// recovery codes and commits; if not, rolls back. Answers `stored`.
async fn finish_factor(
    mut tx: Tx,
    stored: bool,
    user_id: &str,
    recovery_digests: Option<&[String]>,
    now: i64,
) -> Result<bool, StoreError> {
    if !stored {
        tx.rollback().await?;
        return Ok(false);
    }
    if let Some(digests) = recovery_digests {
        insert_recovery_codes(&mut tx, user_id, digests, now).await?;
    }
    tx.commit().await?;
    Ok(true)
}

#[async_trait::async_trait]
impl FactorStore for ThisStore {
    #[tracing::instrument(skip_all)]
    async fn factors(&self, user_id: &str) -> Result<Factors, StoreError> {
        let mut conn = self.lease().await?;
        let totp = sqlx::query_as::<_, TotpRow>(
            "SELECT secret_sealed, confirmed_at, last_step FROM totp_factors WHERE user_id = $1",
        )
        .bind(user_id)
        .fetch_optional(&mut *conn)
        .await?;
        let passkeys = sqlx::query_as::<_, PasskeyRow>(&format!(
            "SELECT {PASSKEY_COLUMNS} FROM passkeys WHERE user_id = $1 \
             ORDER BY created_at, credential_id"
        ))
        .bind(user_id)
        .fetch_all(&mut *conn)
        .await?;
        let recovery_codes_left: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM recovery_codes WHERE user_id = $1 AND used_at IS NULL",
        )
        .bind(user_id)
        .fetch_one(&mut *conn)
        .await?;
        Ok(Factors {
            totp,
            passkeys,
            recovery_codes_left,
        })
    }

    #[tracing::instrument(skip_all)]
    async fn begin_totp(
        &self,
        user_id: &str,
        secret_sealed: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        sqlx::query("DELETE FROM totp_factors WHERE user_id = $1 AND confirmed_at IS NULL")
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        let stored = sqlx::query(
            "INSERT INTO totp_factors (user_id, secret_sealed, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (user_id) DO NOTHING",
        )
        .bind(user_id)
        .bind(secret_sealed)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(stored > 0)
    }

    #[tracing::instrument(skip_all)]
    async fn confirm_totp(
        &self,
        user_id: &str,
        step: i64,
        now: i64,
        recovery_digests: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let confirmed = sqlx::query(
            "UPDATE totp_factors SET confirmed_at = $2, last_step = $3 \
             WHERE user_id = $1 AND confirmed_at IS NULL",
        )
        .bind(user_id)
        .bind(now)
        .bind(step)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        finish_factor(tx, confirmed > 0, user_id, recovery_digests, now).await
    }

    #[tracing::instrument(skip_all)]
    async fn use_totp_step(&self, user_id: &str, step: i64) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "UPDATE totp_factors SET last_step = $2 \
                     WHERE user_id = $1 AND confirmed_at IS NOT NULL AND last_step < $2",
            )
            .bind(user_id)
            .bind(step),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn remove_totp(&self, user_id: &str) -> Result<bool, StoreError> {
        self.write_changed(sqlx::query("DELETE FROM totp_factors WHERE user_id = $1").bind(user_id))
            .await
    }

    #[tracing::instrument(skip_all)]
    async fn use_recovery_code(
        &self,
        user_id: &str,
        digest: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "UPDATE recovery_codes SET used_at = $3 \
                     WHERE digest = $1 AND user_id = $2 AND used_at IS NULL",
            )
            .bind(digest)
            .bind(user_id)
            .bind(now),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn replace_recovery_codes(
        &self,
        user_id: &str,
        digests: &[String],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        insert_recovery_codes(&mut tx, user_id, digests, now).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn insert_passkey(
        &self,
        passkey: &PasskeyRow,
        recovery_digests: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let stored = sqlx::query(&format!(
            "INSERT INTO passkeys ({PASSKEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (credential_id) DO NOTHING"
        ))
        .bind(&passkey.credential_id)
        .bind(&passkey.user_id)
        .bind(&passkey.name)
        .bind(&passkey.credential)
        .bind(passkey.sign_count)
        .bind(passkey.backup_eligible)
        .bind(passkey.created_at)
        .bind(passkey.last_used_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        finish_factor(
            tx,
            stored > 0,
            &passkey.user_id,
            recovery_digests,
            passkey.created_at,
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn find_passkey(&self, credential_id: &str) -> Result<Option<PasskeyRow>, StoreError> {
        self.read_optional(
            sqlx::query_as::<_, PasskeyRow>(&format!(
                "SELECT {PASSKEY_COLUMNS} FROM passkeys WHERE credential_id = $1"
            ))
            .bind(credential_id),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn record_passkey_use(
        &self,
        credential_id: &str,
        credential: &str,
        sign_count: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "UPDATE passkeys SET credential = $2, sign_count = $3, last_used_at = $4 \
                     WHERE credential_id = $1 AND (sign_count < $3 OR (sign_count = 0 AND $3 = 0))",
            )
            .bind(credential_id)
            .bind(credential)
            .bind(sign_count)
            .bind(now),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn remove_passkey(&self, user_id: &str, credential_id: &str) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query("DELETE FROM passkeys WHERE user_id = $1 AND credential_id = $2")
                .bind(user_id)
                .bind(credential_id),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn reset_factors(&self, user_id: &str) -> Result<u64, StoreError> {
        let mut tx = self.write().await?;
        let mut removed = 0;
        for sql in [
            "DELETE FROM totp_factors WHERE user_id = $1 AND confirmed_at IS NOT NULL",
            "DELETE FROM passkeys WHERE user_id = $1",
        ] {
            removed += sqlx::query(sql)
                .bind(user_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        for sql in [
            "DELETE FROM totp_factors WHERE user_id = $1",
            "DELETE FROM recovery_codes WHERE user_id = $1",
        ] {
            sqlx::query(sql).bind(user_id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(removed)
    }

    #[tracing::instrument(skip_all, fields(kind = %ceremony.kind))]
    async fn insert_ceremony(
        &self,
        digest: &str,
        ceremony: &Ceremony,
        expires_at: i64,
    ) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "INSERT INTO webauthn_ceremonies (digest, user_id, kind, state, expires_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(digest)
            .bind(&ceremony.user_id)
            .bind(&ceremony.kind)
            .bind(&ceremony.state)
            .bind(expires_at),
        )
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn take_ceremony(&self, digest: &str, now: i64) -> Result<Option<Ceremony>, StoreError> {
        self.write_returning(
            sqlx::query_as::<_, Ceremony>(
                "DELETE FROM webauthn_ceremonies WHERE digest = $1 AND expires_at > $2 \
                 RETURNING user_id, kind, state",
            )
            .bind(digest)
            .bind(now),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn change_password(
        &self,
        user_id: &str,
        password_hash: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        sqlx::query("UPDATE users SET password_hash = $2 WHERE id = $1")
            .bind(user_id)
            .bind(password_hash)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO session_cuts (user_id, cut_at) VALUES ($1, $2) \
             ON CONFLICT (user_id) DO UPDATE SET cut_at = excluded.cut_at",
        )
        .bind(user_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
