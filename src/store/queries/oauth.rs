//! The authorization server: apps, consents, grants, tokens and codes.
//! Single-use things (codes, refresh tokens) are consumed by one guarded
//! statement, never found first and deleted after.

use super::{Backend, ThisStore, Tx};
use crate::store::{
    App, CodeRecord, CodeUse, Consent, NewApp, NewCode, NewGrant, NewToken, OAuthStore, Presented,
    RefreshUse, StoreError, TokenRecord,
};

/// The apps' columns from `apps`, then `$rest` (the rows wanted).
macro_rules! select_apps {
    ($rest:literal) => {
        concat!(
            "SELECT ",
            crate::store::sql::app_columns!(),
            " FROM apps ",
            $rest
        )
    };
}

#[async_trait::async_trait]
impl OAuthStore for ThisStore {
    #[tracing::instrument(skip_all, fields(name = %app.name))]
    async fn insert_app(&self, app: &NewApp) -> Result<App, StoreError> {
        const SQL: &str = concat!(
            "INSERT INTO apps (client_id, secret_digest, name, description, \
             redirect_url, site_url, owner_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ",
            crate::store::sql::app_columns!(),
        );
        let inserted = self
            .write_returning(
                sqlx::query_as::<_, App>(SQL)
                    .bind(&app.client_id)
                    .bind(&app.secret_digest)
                    .bind(&app.name)
                    .bind(&app.description)
                    .bind(&app.redirect_url)
                    .bind(&app.site_url)
                    .bind(&app.owner_id)
                    .bind(app.created_at),
            )
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        Ok(inserted)
    }

    #[tracing::instrument(skip_all)]
    async fn find_app(&self, client_id: &str) -> Result<Option<App>, StoreError> {
        const SQL: &str = select_apps!("WHERE client_id = $1");
        self.read_optional(sqlx::query_as::<_, App>(SQL).bind(client_id))
            .await
    }

    #[tracing::instrument(skip_all)]
    async fn set_app_suspended(
        &self,
        client_id: &str,
        suspended: bool,
    ) -> Result<Option<App>, StoreError> {
        self.set_app_flag("suspended", client_id, suspended).await
    }

    #[tracing::instrument(skip_all)]
    async fn set_app_introspect_any(
        &self,
        client_id: &str,
        introspect_any: bool,
    ) -> Result<Option<App>, StoreError> {
        // Introspection remembers its caller's row a moment.
        self.set_app_flag("introspect_any", client_id, introspect_any)
            .await
    }

    #[tracing::instrument(skip_all)]
    async fn apps_of_owner(&self, owner_id: &str) -> Result<Vec<App>, StoreError> {
        const SQL: &str = select_apps!("WHERE owner_id = $1 ORDER BY created_at, client_id");
        self.read_all(sqlx::query_as::<_, App>(SQL).bind(owner_id))
            .await
    }

    #[tracing::instrument(skip_all)]
    async fn update_own_app(
        &self,
        owner_id: &str,
        client_id: &str,
        update: &crate::store::AppUpdate,
    ) -> Result<Option<App>, StoreError> {
        const SQL: &str = concat!(
            "UPDATE apps SET name = $3, description = $4, redirect_url = $5, \
             site_url = $6 WHERE client_id = $1 AND owner_id = $2 RETURNING ",
            crate::store::sql::app_columns!(),
        );
        // The token endpoint remembers apps (their redirect URL) a moment.
        self.write_revoking(
            sqlx::query_as::<_, App>(SQL)
                .bind(client_id)
                .bind(owner_id)
                .bind(&update.name)
                .bind(&update.description)
                .bind(&update.redirect_url)
                .bind(&update.site_url),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn replace_app_secret(
        &self,
        owner_id: &str,
        client_id: &str,
        digest: &str,
    ) -> Result<bool, StoreError> {
        let done = self
            .write_changed(
                sqlx::query(
                    "UPDATE apps SET secret_digest = $3 WHERE client_id = $1 AND owner_id = $2",
                )
                .bind(client_id)
                .bind(owner_id)
                .bind(digest),
            )
            .await?;
        if done {
            self.revocations().bump();
        }
        Ok(done)
    }

    #[tracing::instrument(skip_all)]
    async fn insert_reveal(&self, reveal: &crate::store::NewReveal) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "INSERT INTO secret_reveals (id, user_id, sealed, created_at) \
             VALUES ($1, $2, $3, $4)",
            )
            .bind(&reveal.id)
            .bind(&reveal.user_id)
            .bind(&reveal.sealed)
            .bind(reveal.created_at),
        )
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn take_reveal(
        &self,
        id: &str,
        user_id: &str,
        not_before: i64,
    ) -> Result<Option<String>, StoreError> {
        let mut tx = self.write().await?;
        // One statement: of two racing showings, one gets the row.
        let sealed: Option<(String, i64)> = sqlx::query_as(
            "DELETE FROM secret_reveals WHERE id = $1 AND user_id = $2 \
             RETURNING sealed, created_at",
        )
        .bind(id)
        .bind(user_id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(sealed.and_then(|(sealed, at)| (at >= not_before).then_some(sealed)))
    }

    #[tracing::instrument(skip_all)]
    async fn has_consent(&self, consent: Consent<'_>) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM oauth_consents \
             WHERE user_id = $1 AND client_id = $2 AND scopes = $3 \
             AND response_type = $4)",
        )
        .bind(consent.user_id)
        .bind(consent.client_id)
        .bind(consent.scopes)
        .bind(consent.response_type)
        .fetch_one(&mut *self.lease().await?)
        .await?)
    }

    #[tracing::instrument(skip_all)]
    async fn insert_consent(&self, consent: Consent<'_>, at: i64) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "INSERT INTO oauth_consents \
             (user_id, client_id, scopes, response_type, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            )
            .bind(consent.user_id)
            .bind(consent.client_id)
            .bind(consent.scopes)
            .bind(consent.response_type)
            .bind(at),
        )
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn consents_of_user(
        &self,
        user_id: &str,
    ) -> Result<Vec<crate::store::ConsentRow>, StoreError> {
        self.read_all(
            sqlx::query_as::<_, crate::store::ConsentRow>(
                "SELECT a.client_id, a.name, c.scopes, c.created_at AS authorized_at, \
             (SELECT MAX(g.last_used_at) FROM oauth_grants g \
              WHERE g.user_id = c.user_id AND g.client_id = c.client_id) AS last_used_at \
             FROM oauth_consents c JOIN apps a ON a.client_id = c.client_id \
             WHERE c.user_id = $1 ORDER BY c.created_at DESC, a.client_id",
            )
            .bind(user_id),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn revoke_app_for_user(
        &self,
        user_id: &str,
        client_id: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let consents =
            sqlx::query("DELETE FROM oauth_consents WHERE user_id = $1 AND client_id = $2")
                .bind(user_id)
                .bind(client_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        let tokens = sqlx::query(
            "UPDATE oauth_tokens SET revoked_at = $3 WHERE revoked_at IS NULL \
             AND grant_id IN (SELECT id FROM oauth_grants \
                              WHERE user_id = $1 AND client_id = $2)",
        )
        .bind(user_id)
        .bind(client_id)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let grants = sqlx::query(
            "UPDATE oauth_grants SET revoked_at = $3 \
             WHERE user_id = $1 AND client_id = $2 AND revoked_at IS NULL",
        )
        .bind(user_id)
        .bind(client_id)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if grants > 0 {
            Self::grant_revoked_event(&mut tx, user_id, client_id, now).await?;
        }
        self.commit_revoking(tx, tokens + grants > 0).await?;
        Ok(consents + grants > 0)
    }

    #[tracing::instrument(skip_all, fields(flow = grant.flow))]
    async fn insert_grant_with_tokens(
        &self,
        grant: &NewGrant,
        tokens: &[NewToken],
    ) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        insert_grant(&mut tx, grant).await?;
        insert_tokens(&mut tx, &grant.id, tokens).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn insert_grant_with_code(
        &self,
        grant: &NewGrant,
        code: &NewCode,
    ) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        insert_grant(&mut tx, grant).await?;
        insert_code(&mut tx, &grant.id, code).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn exchange_code(
        &self,
        code: Presented<'_>,
        check: crate::store::CodeCheck<'_>,
        tokens: &[NewToken],
    ) -> Result<CodeUse, StoreError> {
        let Presented {
            digest,
            client_id,
            now,
        } = code;
        let mut tx = self.write().await?;
        let mut revoked = 0;
        // Spends the code; on PostgreSQL a simultaneous exchange waits
        // here on the row lock, then finds it spent.
        let spent: Option<String> = sqlx::query_scalar(
            "UPDATE oauth_codes SET used_at = $2 WHERE digest = $1 AND used_at IS NULL \
             RETURNING grant_id",
        )
        .bind(digest)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let outcome = match spent {
            Some(grant_id) => {
                let record = sqlx::query_as::<_, CodeRecord>(
                    "SELECT c.grant_id, g.client_id, g.user_id, g.scopes, c.redirect_uri, \
                     c.code_challenge, c.expires_at \
                     FROM oauth_codes c JOIN oauth_grants g ON g.id = c.grant_id \
                     WHERE c.digest = $1",
                )
                .bind(digest)
                .fetch_one(&mut *tx)
                .await?;
                if record.client_id.as_deref() != Some(client_id) {
                    // Not this client's code: leave it as it was, and
                    // release its row at once.
                    tx.rollback().await?;
                    return Ok(CodeUse::Unknown);
                }
                let live = lock_live_grant(&mut tx, &grant_id).await?;
                if live.is_none() {
                    CodeUse::Revoked
                } else if let Err(reason) = check(&record) {
                    CodeUse::Refused(reason)
                } else {
                    insert_tokens(&mut tx, &grant_id, tokens).await?;
                    CodeUse::Issued(record)
                }
            }
            None => {
                // Spent before: RFC 6749 §4.1.2 says revoke what it issued.
                let grant: Option<String> =
                    sqlx::query_scalar("SELECT grant_id FROM oauth_codes WHERE digest = $1")
                        .bind(digest)
                        .fetch_optional(&mut *tx)
                        .await?;
                match grant {
                    Some(grant_id) => {
                        revoked = revoke_grant(&mut tx, &grant_id, now).await?;
                        CodeUse::Replayed
                    }
                    None => CodeUse::Unknown,
                }
            }
        };
        self.commit_revoking(tx, revoked > 0).await?;
        Ok(outcome)
    }

    #[tracing::instrument(skip_all)]
    async fn rotate_refresh_token(
        &self,
        token: Presented<'_>,
        successors: &[NewToken],
    ) -> Result<RefreshUse, StoreError> {
        let Presented {
            digest,
            client_id,
            now,
        } = token;
        // The guarded spend, the successors (one multi-row insert) and
        // the grant, as one write (see `Backend::rotate`).
        let spent = self.rotate(token, successors).await?;
        if let Some(grant) = spent {
            return Ok(RefreshUse::Rotated(Box::new(grant)));
        }
        let mut tx = self.write().await?;
        let used: Option<(String, Option<i64>)> = sqlx::query_as(
            "SELECT t.grant_id, t.used_at FROM oauth_tokens t \
             JOIN oauth_grants g ON g.id = t.grant_id \
             WHERE t.digest = $1 AND t.kind = 'refresh' AND g.client_id = $2",
        )
        .bind(digest)
        .bind(client_id)
        .fetch_optional(&mut *tx)
        .await?;
        let (outcome, revoked) = match used {
            Some((grant_id, Some(_))) => (
                RefreshUse::Replayed,
                revoke_grant(&mut tx, &grant_id, now).await?,
            ),
            _ => (RefreshUse::Invalid, 0),
        };
        self.commit_revoking(tx, revoked > 0).await?;
        Ok(outcome)
    }

    #[tracing::instrument(skip_all)]
    async fn live_refresh_token_scopes(
        &self,
        token: Presented<'_>,
    ) -> Result<Option<String>, StoreError> {
        // The conditions of the spend in rotate_refresh_token.
        self.read_value(
            sqlx::query_scalar(
                "SELECT g.scopes FROM oauth_tokens t \
                 JOIN oauth_grants g ON g.id = t.grant_id \
                 WHERE t.digest = $1 AND t.kind = 'refresh' AND t.used_at IS NULL \
                 AND t.revoked_at IS NULL AND t.expires_at > $3 \
                 AND g.client_id = $2 AND g.revoked_at IS NULL",
            )
            .bind(token.digest)
            .bind(token.client_id)
            .bind(token.now),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn find_token(&self, digest: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.read_optional(
            sqlx::query_as::<_, TokenRecord>(&crate::store::oauth::token_queries().token)
                .bind(digest),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn find_token_with_friends_count(
        &self,
        digest: &str,
    ) -> Result<Option<TokenRecord>, StoreError> {
        self.read_optional(
            sqlx::query_as::<_, TokenRecord>(
                &crate::store::oauth::token_queries().token_with_friends_count,
            )
            .bind(digest),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn find_client_and_token(
        &self,
        client_id: &str,
        digest: &str,
    ) -> Result<Option<(crate::store::IntrospectingClient, Option<TokenRecord>)>, StoreError> {
        use sqlx::{FromRow as _, Row as _};
        let row = sqlx::query(&crate::store::oauth::token_queries().client_and_token)
            .bind(client_id)
            .bind(digest)
            .fetch_optional(&mut *self.lease().await?)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let client = crate::store::IntrospectingClient::from_row(&row)?;
        // The token's grant column is NULL exactly when the token is unknown.
        let grant_id: Option<String> = row.try_get("grant_id")?;
        let token = match grant_id {
            Some(_) => Some(TokenRecord::from_row(&row)?),
            None => None,
        };
        Ok(Some((client, token)))
    }

    #[tracing::instrument(skip_all)]
    async fn revoke_token(
        &self,
        digest: &str,
        client_id: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let found: Option<(String, String)> = sqlx::query_as(
            "UPDATE oauth_tokens SET revoked_at = $2 \
             WHERE digest = $1 AND revoked_at IS NULL \
             AND ($3 IS NULL OR EXISTS (SELECT 1 FROM oauth_grants g \
                  WHERE g.id = oauth_tokens.grant_id AND g.client_id = $3)) \
             RETURNING grant_id, kind",
        )
        .bind(digest)
        .bind(now)
        .bind(client_id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((grant_id, kind)) = &found {
            // RFC 7009 §2.1: revoking a refresh token revokes its family.
            if kind == "refresh" {
                revoke_grant(&mut tx, grant_id, now).await?;
            }
        }
        // A revocation that revoked nothing leaves the caches be (SPEC §9).
        self.commit_revoking(tx, found.is_some()).await?;
        Ok(found.is_some())
    }

    #[tracing::instrument(skip_all)]
    async fn revoke_grant(&self, grant_id: &str, now: i64) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        let revoked = revoke_grant(&mut tx, grant_id, now).await?;
        self.commit_revoking(tx, revoked > 0).await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn personal_tokens(
        &self,
        user_id: &str,
        now: i64,
    ) -> Result<Vec<crate::store::PersonalToken>, StoreError> {
        self.read_all(
            sqlx::query_as::<_, crate::store::PersonalToken>(
                "SELECT g.id AS grant_id, g.scopes, g.created_at, g.last_used_at, \
             MAX(t.expires_at) AS expires_at \
             FROM oauth_grants g JOIN oauth_tokens t ON t.grant_id = g.id \
             WHERE g.user_id = $1 AND g.client_id IS NULL AND g.revoked_at IS NULL \
             AND t.revoked_at IS NULL AND t.expires_at > $2 \
             GROUP BY g.id, g.scopes, g.created_at, g.last_used_at \
             ORDER BY g.created_at DESC, g.id",
            )
            .bind(user_id)
            .bind(now),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn revoke_personal_token(
        &self,
        user_id: &str,
        grant_id: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.write().await?;
        let found = sqlx::query(
            "UPDATE oauth_grants SET revoked_at = $3 WHERE id = $1 AND user_id = $2 \
             AND client_id IS NULL AND revoked_at IS NULL",
        )
        .bind(grant_id)
        .bind(user_id)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            > 0;
        if found {
            revoke_tokens_of(&mut tx, grant_id, now).await?;
        }
        self.commit_revoking(tx, found).await?;
        Ok(found)
    }

    #[tracing::instrument(skip_all)]
    async fn touch_grant(
        &self,
        grant_id: &str,
        now: i64,
        stale_before: i64,
    ) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "UPDATE oauth_grants SET last_used_at = $2 \
             WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)",
            )
            .bind(grant_id)
            .bind(now)
            .bind(stale_before),
        )
        .await?;
        Ok(())
    }
}

impl ThisStore {
    /// Sets one of an app's flags (`column`, a column name written here);
    /// the app changed, if found.
    async fn set_app_flag(
        &self,
        column: &'static str,
        client_id: &str,
        value: bool,
    ) -> Result<Option<App>, StoreError> {
        let sql = format!(
            "UPDATE apps SET {column} = $2 WHERE client_id = $1 RETURNING {}",
            crate::store::sql::app_columns!(),
        );
        self.write_revoking(sqlx::query_as::<_, App>(&sql).bind(client_id).bind(value))
            .await
    }
}

/// Locks a grant still live (on PostgreSQL its row, so a revocation either
/// came first and is seen here, or waits and then revokes what is issued
/// under it); its user, or `None` if it is revoked.
pub(super) async fn lock_live_grant(
    tx: &mut Tx,
    grant_id: &str,
) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "UPDATE oauth_grants SET revoked_at = revoked_at \
         WHERE id = $1 AND revoked_at IS NULL RETURNING user_id",
    )
    .bind(grant_id)
    .fetch_optional(&mut **tx)
    .await?)
}

pub(super) async fn insert_code(
    tx: &mut Tx,
    grant_id: &str,
    code: &NewCode,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO oauth_codes (digest, grant_id, redirect_uri, code_challenge, \
         created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&code.digest)
    .bind(grant_id)
    .bind(&code.redirect_uri)
    .bind(&code.code_challenge)
    .bind(code.created_at)
    .bind(code.expires_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub(super) async fn insert_grant(tx: &mut Tx, grant: &NewGrant) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO oauth_grants (id, user_id, client_id, scopes, flow, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&grant.id)
    .bind(&grant.user_id)
    .bind(&grant.client_id)
    .bind(&grant.scopes)
    .bind(grant.flow)
    .bind(grant.created_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Issues `tokens` under a grant, one statement each.
pub(super) async fn insert_tokens(
    tx: &mut Tx,
    grant_id: &str,
    tokens: &[NewToken],
) -> Result<(), StoreError> {
    for token in tokens {
        sqlx::query(
            "INSERT INTO oauth_tokens (digest, grant_id, kind, created_at, expires_at, scopes) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&token.digest)
        .bind(grant_id)
        .bind(token.kind.as_str())
        .bind(token.created_at)
        .bind(token.expires_at)
        .bind(&token.scopes)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Revokes a grant and its live tokens; how many rows that changed.
pub(super) async fn revoke_grant(tx: &mut Tx, grant_id: &str, now: i64) -> Result<u64, StoreError> {
    let grants =
        sqlx::query("UPDATE oauth_grants SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
            .bind(grant_id)
            .bind(now)
            .execute(&mut **tx)
            .await?
            .rows_affected();
    Ok(grants + revoke_tokens_of(tx, grant_id, now).await?)
}

/// Revokes every live token issued under a grant; how many.
async fn revoke_tokens_of(tx: &mut Tx, grant_id: &str, now: i64) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        "UPDATE oauth_tokens SET revoked_at = $2 WHERE grant_id = $1 AND revoked_at IS NULL",
    )
    .bind(grant_id)
    .bind(now)
    .execute(&mut **tx)
    .await?
    .rows_affected())
}
