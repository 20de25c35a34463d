//! The device authorization grant's codes (RFC 8628): stored, answered at
//! `/device`, and spent by one poll.

use super::{Backend, ThisStore};
use crate::store::{
    DeviceCodeRow, DeviceDecide, DevicePoll, DeviceStep, DeviceStore, NewDeviceCode, NewGrant,
    NewOidcGrant, NewToken, PendingDeviceCode, Presented, StoreError,
};

#[async_trait::async_trait]
impl DeviceStore for ThisStore {
    #[tracing::instrument(skip_all, fields(client_id = %code.client_id))]
    async fn insert_device_code(&self, code: &NewDeviceCode) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "INSERT INTO device_codes (digest, user_code_digest, client_id, scopes, \
                     interval_secs, created_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            )
            .bind(&code.digest)
            .bind(&code.user_code_digest)
            .bind(&code.client_id)
            .bind(&code.scopes)
            .bind(code.interval_secs)
            .bind(code.created_at)
            .bind(code.expires_at),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn pending_device_code(
        &self,
        user_code_digest: &str,
        now: i64,
    ) -> Result<Option<PendingDeviceCode>, StoreError> {
        self.read_optional(
            sqlx::query_as::<_, PendingDeviceCode>(
                "SELECT d.client_id, d.scopes, d.expires_at, a.name AS app_name, \
             a.description AS app_description, a.site_url, a.suspended AS app_suspended \
             FROM device_codes d JOIN apps a ON a.client_id = d.client_id \
             WHERE d.user_code_digest = $1 AND d.status = 'pending' AND d.expires_at > $2",
            )
            .bind(user_code_digest)
            .bind(now),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn allow_device_code(
        &self,
        user_code_digest: &str,
        grant: &NewGrant,
        oidc: Option<&NewOidcGrant>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        super::oauth::insert_grant(&mut tx, grant).await?;
        if let Some(oidc) = oidc {
            super::oidc::insert_oidc_grant(&mut tx, &grant.id, oidc).await?;
        }
        // Still pending, unexpired, and what the person was shown.
        let allowed = sqlx::query(
            "UPDATE device_codes SET status = 'allowed', grant_id = $2, decided_at = $3 \
             WHERE user_code_digest = $1 AND status = 'pending' AND expires_at > $3 \
             AND client_id = $4 AND scopes = $5",
        )
        .bind(user_code_digest)
        .bind(&grant.id)
        .bind(grant.created_at)
        .bind(&grant.client_id)
        .bind(&grant.scopes)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if allowed == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        // The app is listed among the user's authorized apps (and revocable
        // there); a device consent approves no request of the other flows.
        sqlx::query(
            "INSERT INTO oauth_consents (user_id, client_id, scopes, response_type, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(&grant.user_id)
        .bind(&grant.client_id)
        .bind(&grant.scopes)
        .bind(grant.flow)
        .bind(grant.created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    #[tracing::instrument(skip_all)]
    async fn deny_device_code(&self, user_code_digest: &str, now: i64) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "UPDATE device_codes SET status = 'denied', decided_at = $2 \
                     WHERE user_code_digest = $1 AND status = 'pending' AND expires_at > $2",
            )
            .bind(user_code_digest)
            .bind(now),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn poll_device_code(
        &self,
        code: Presented<'_>,
        decide: DeviceDecide<'_>,
        tokens: &[NewToken],
    ) -> Result<DevicePoll, StoreError> {
        let Presented {
            digest,
            client_id,
            now,
        } = code;
        let mut tx = self.write().await?;
        // Reads the row and, on PostgreSQL, locks it: simultaneous polls are
        // decided one after the other, so one spends and the next sees it
        // spent (on SQLite the write transaction orders them).
        let row: Option<DeviceCodeRow> = sqlx::query_as(
            "UPDATE device_codes SET last_polled_at = last_polled_at WHERE digest = $1 \
             RETURNING client_id, status, grant_id, scopes, expires_at, interval_secs, \
             last_polled_at, used_at",
        )
        .bind(digest)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row.filter(|row| row.client_id == client_id) else {
            tx.rollback().await?;
            return Ok(DevicePoll::Unknown);
        };
        let step = decide(&row);
        let mut revoked = 0;
        let outcome = match step {
            DeviceStep::Issue => {
                let grant_id = row.grant_id.clone().ok_or_else(|| {
                    StoreError::Unexpected(anyhow::anyhow!("an allowed device code has no grant"))
                })?;
                sqlx::query("UPDATE device_codes SET used_at = $2 WHERE digest = $1")
                    .bind(digest)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                match super::oauth::lock_live_grant(&mut tx, &grant_id).await? {
                    Some(user_id) => {
                        super::oauth::insert_tokens(&mut tx, &grant_id, tokens).await?;
                        DevicePoll::Issued { row, user_id }
                    }
                    None => DevicePoll::GrantRevoked,
                }
            }
            DeviceStep::RevokeReplayed => {
                if let Some(grant_id) = &row.grant_id {
                    revoked = super::oauth::revoke_grant(&mut tx, grant_id, now).await?;
                }
                DevicePoll::Stepped { row, step }
            }
            DeviceStep::RecordPoll { interval_secs } => {
                sqlx::query(
                    "UPDATE device_codes SET last_polled_at = $2, interval_secs = $3 \
                     WHERE digest = $1",
                )
                .bind(digest)
                .bind(now)
                .bind(interval_secs)
                .execute(&mut *tx)
                .await?;
                DevicePoll::Stepped { row, step }
            }
            DeviceStep::Refuse(_) => DevicePoll::Stepped { row, step },
        };
        self.commit_revoking(tx, revoked > 0).await?;
        Ok(outcome)
    }
}
