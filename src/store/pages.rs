//! Storage behind the people's pages: verification links, profiles, the apps a
//! user authorized and their revocation, personal access tokens, and the apps a
//! developer owns.

use super::{App, AppUpdate, StoreError, User};
use async_trait::async_trait;

/// Where a verification link was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Email,
    Phone,
}

impl Channel {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Phone => "phone",
        }
    }
}

#[derive(Debug, Clone)]
pub struct NewVerification {
    pub digest: String,
    pub user_id: String,
    pub channel: Channel,
    pub address: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// The free-text fields of a profile, already checked.
#[derive(Debug, Clone)]
pub struct ProfileUpdate {
    pub first_name: String,
    pub last_name: String,
    pub about: String,
}

/// One remembered consent of a user to an app (an app the user allowed with
/// several scope sets has one per set).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConsentRow {
    pub client_id: String,
    pub name: String,
    pub scopes: String,
    pub authorized_at: i64,
    pub last_used_at: Option<i64>,
}

/// A live personal access token, by its grant.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PersonalToken {
    pub grant_id: String,
    pub scopes: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub expires_at: i64,
}

/// The limits on verification links per address, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct SendLimits {
    /// At most one send within this span.
    pub min_gap: i64,
    /// At most `per_window` sends within this span.
    pub window: i64,
    pub per_window: i64,
}

/// Rows older than these moments (microseconds) are no longer needed: the
/// retention worker deletes them (SPEC §9).
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Codes that expired or were used before this.
    pub codes_before: i64,
    /// Sign-in failures recorded before this.
    pub signin_failures_before: i64,
    /// Idempotency keys taken before this.
    pub idempotency_keys_before: i64,
    /// Tokens that expired or were revoked before this.
    pub tokens_before: i64,
    /// Ended-session records whose cookie expired before this.
    pub ended_sessions_before: i64,
    /// Verification links that expired before this.
    pub verification_links_before: i64,
    /// Unshown secrets kept since before this.
    pub reveals_before: i64,
    /// Verification sends made before this.
    pub verification_sends_before: i64,
}

#[async_trait]
pub trait PagesStore: Send + Sync {
    async fn insert_verification(&self, link: &NewVerification) -> Result<(), StoreError>;
    /// Spends a verification link at `now` and marks its address and the account
    /// verified, in one transaction. `None` when the link is unknown, spent,
    /// expired, or its address is no longer the account's.
    async fn use_verification(&self, digest: &str, now: i64) -> Result<Option<User>, StoreError>;

    async fn update_profile(
        &self,
        user_id: &str,
        profile: &ProfileUpdate,
    ) -> Result<Option<User>, StoreError>;

    /// Sets the account's e-mail and phone. An address that changes starts
    /// unverified (a verification link proves it); one that stays keeps its
    /// state. `Conflict("email" | "phone")` when another account has it.
    async fn update_contacts(
        &self,
        user_id: &str,
        email: &str,
        phone: Option<&str>,
    ) -> Result<Option<User>, StoreError>;

    /// The user's remembered consents with their apps, newest first.
    async fn consents_of_user(&self, user_id: &str) -> Result<Vec<ConsentRow>, StoreError>;
    /// Forgets the user's consents to the app and revokes every grant (and so
    /// every token) the app holds for the user. Returns whether there was any.
    async fn revoke_app_for_user(
        &self,
        user_id: &str,
        client_id: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    async fn personal_tokens(
        &self,
        user_id: &str,
        now: i64,
    ) -> Result<Vec<PersonalToken>, StoreError>;
    /// Revokes one of the user's personal access tokens; whether it was live.
    async fn revoke_personal_token(
        &self,
        user_id: &str,
        grant_id: &str,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Records that a grant was used, unless it was recorded after `stale_before`.
    async fn touch_grant(
        &self,
        grant_id: &str,
        now: i64,
        stale_before: i64,
    ) -> Result<(), StoreError>;

    /// Records that a browser session was signed out; it stays refused until
    /// `expires_at`, when its cookie has expired anyway (older records go).
    async fn end_session(
        &self,
        session_id: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<(), StoreError>;
    async fn session_ended(&self, session_id: &str) -> Result<bool, StoreError>;

    async fn apps_of_owner(&self, owner_id: &str) -> Result<Vec<App>, StoreError>;
    /// Changes an app's details if `owner_id` owns it.
    async fn update_own_app(
        &self,
        owner_id: &str,
        client_id: &str,
        update: &AppUpdate,
    ) -> Result<Option<App>, StoreError>;
    /// Replaces an app's secret digest if `owner_id` owns it; whether it did.
    async fn replace_app_secret(
        &self,
        owner_id: &str,
        client_id: &str,
        digest: &str,
    ) -> Result<bool, StoreError>;

    /// Keeps a sealed secret of `user_id` for its single showing.
    async fn insert_reveal(
        &self,
        id: &str,
        user_id: &str,
        sealed: &str,
        now: i64,
    ) -> Result<(), StoreError>;
    /// Takes the sealed secret out (it is deleted: a second call finds nothing),
    /// if it is `user_id`'s and was kept at or after `not_before`.
    async fn take_reveal(
        &self,
        id: &str,
        user_id: &str,
        not_before: i64,
    ) -> Result<Option<String>, StoreError>;

    /// Records a verification send to `address` at `now` if `limits` allow it;
    /// otherwise `Err(moment)`, the first moment a send is allowed again.
    /// Atomic across instances: racing callers cannot both pass a limit.
    async fn reserve_verification_send(
        &self,
        address: &str,
        now: i64,
        limits: SendLimits,
    ) -> Result<Result<(), i64>, StoreError>;

    /// Deletes every row the retention rules no longer need; how many.
    async fn purge(&self, retention: &Retention) -> Result<u64, StoreError>;
}

macro_rules! impl_pages_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::PagesStore for $store {
            #[tracing::instrument(skip_all, fields(channel = link.channel.as_str()))]
            async fn insert_verification(
                &self,
                link: &$crate::store::NewVerification,
            ) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
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
                .bind(link.expires_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            #[tracing::instrument(skip_all)]
            async fn use_verification(
                &self,
                digest: &str,
                now: i64,
            ) -> Result<Option<User>, StoreError> {
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
                        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                            format!(
                                "UPDATE users SET verified = TRUE, \
                                   email_verified = (email_verified OR ($2 = 'email' AND email = $3)), \
                                   phone_verified = (phone_verified OR ($2 = 'phone' AND phone = $3)) \
                                 WHERE id = $1 AND (($2 = 'email' AND email = $3) \
                                                 OR ($2 = 'phone' AND phone = $3)) \
                                 RETURNING {}",
                                $crate::store::sql::USER_COLUMNS
                            )
                        });
                        sqlx::query_as::<_, User>(&SQL)
                            .bind(&user_id)
                            .bind(&channel)
                            .bind(&address)
                            .fetch_optional(&mut *tx)
                            .await?
                    }
                };
                tx.commit().await?;
                Ok(user)
            }

            #[tracing::instrument(skip_all)]
            async fn update_profile(
                &self,
                user_id: &str,
                profile: &$crate::store::ProfileUpdate,
            ) -> Result<Option<User>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "UPDATE users SET first_name = $2, last_name = $3, about = $4 \
                         WHERE id = $1 RETURNING {}",
                        $crate::store::sql::USER_COLUMNS
                    )
                });
                let mut tx = self.write().await?;
                let user = sqlx::query_as::<_, User>(&SQL)
                    .bind(user_id)
                    .bind(&profile.first_name)
                    .bind(&profile.last_name)
                    .bind(&profile.about)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(user)
            }

            #[tracing::instrument(skip_all)]
            async fn update_contacts(
                &self,
                user_id: &str,
                email: &str,
                phone: Option<&str>,
            ) -> Result<Option<User>, StoreError> {
                // Every SET expression reads the row as it was before.
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "UPDATE users SET \
                           email_verified = (email_verified AND email IS NOT DISTINCT FROM $2), \
                           phone_verified = (phone_verified AND phone IS NOT DISTINCT FROM $3), \
                           email = $2, phone = $3 \
                         WHERE id = $1 RETURNING {}",
                        $crate::store::sql::USER_COLUMNS
                    )
                });
                let mut tx = self.write().await?;
                let user = sqlx::query_as::<_, User>(&SQL)
                    .bind(user_id)
                    .bind(email)
                    .bind(phone)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(user)
            }

            #[tracing::instrument(skip_all)]
            async fn consents_of_user(
                &self,
                user_id: &str,
            ) -> Result<Vec<$crate::store::ConsentRow>, StoreError> {
                Ok(sqlx::query_as::<_, $crate::store::ConsentRow>(
                    "SELECT a.client_id, a.name, c.scopes, c.created_at AS authorized_at, \
                     (SELECT MAX(g.last_used_at) FROM oauth_grants g \
                      WHERE g.user_id = c.user_id AND g.client_id = c.client_id) AS last_used_at \
                     FROM oauth_consents c JOIN apps a ON a.client_id = c.client_id \
                     WHERE c.user_id = $1 ORDER BY c.created_at DESC, a.client_id",
                )
                .bind(user_id)
                .fetch_all(self.reader())
                .await?)
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
                sqlx::query(
                    "UPDATE oauth_tokens SET revoked_at = $3 WHERE revoked_at IS NULL \
                     AND grant_id IN (SELECT id FROM oauth_grants \
                                      WHERE user_id = $1 AND client_id = $2)",
                )
                .bind(user_id)
                .bind(client_id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
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
                tx.commit().await?;
                self.revocations.bump();
                Ok(consents + grants > 0)
            }

            #[tracing::instrument(skip_all)]
            async fn personal_tokens(
                &self,
                user_id: &str,
                now: i64,
            ) -> Result<Vec<$crate::store::PersonalToken>, StoreError> {
                Ok(sqlx::query_as::<_, $crate::store::PersonalToken>(
                    "SELECT g.id AS grant_id, g.scopes, g.created_at, g.last_used_at, \
                     MAX(t.expires_at) AS expires_at \
                     FROM oauth_grants g JOIN oauth_tokens t ON t.grant_id = g.id \
                     WHERE g.user_id = $1 AND g.client_id IS NULL AND g.revoked_at IS NULL \
                     AND t.revoked_at IS NULL AND t.expires_at > $2 \
                     GROUP BY g.id, g.scopes, g.created_at, g.last_used_at \
                     ORDER BY g.created_at DESC, g.id",
                )
                .bind(user_id)
                .bind(now)
                .fetch_all(self.reader())
                .await?)
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
                    sqlx::query(
                        "UPDATE oauth_tokens SET revoked_at = $2 \
                         WHERE grant_id = $1 AND revoked_at IS NULL",
                    )
                    .bind(grant_id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                self.revocations.bump();
                Ok(found)
            }

            #[tracing::instrument(skip_all)]
            async fn touch_grant(
                &self,
                grant_id: &str,
                now: i64,
                stale_before: i64,
            ) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
                sqlx::query(
                    "UPDATE oauth_grants SET last_used_at = $2 \
                     WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)",
                )
                .bind(grant_id)
                .bind(now)
                .bind(stale_before)
                .execute(&mut *tx)
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
            async fn session_ended(&self, session_id: &str) -> Result<bool, StoreError> {
                let found: Option<String> = sqlx::query_scalar(
                    "SELECT session_id FROM ended_sessions WHERE session_id = $1",
                )
                .bind(session_id)
                .fetch_optional(self.reader())
                .await?;
                Ok(found.is_some())
            }

            #[tracing::instrument(skip_all)]
            async fn apps_of_owner(&self, owner_id: &str) -> Result<Vec<App>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "SELECT {} FROM apps WHERE owner_id = $1 ORDER BY created_at, client_id",
                        $crate::store::sql::APP_COLUMNS
                    )
                });
                Ok(sqlx::query_as::<_, App>(&SQL)
                    .bind(owner_id)
                    .fetch_all(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn update_own_app(
                &self,
                owner_id: &str,
                client_id: &str,
                update: &$crate::store::AppUpdate,
            ) -> Result<Option<App>, StoreError> {
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    format!(
                        "UPDATE apps SET name = $3, description = $4, redirect_url = $5, \
                         site_url = $6 WHERE client_id = $1 AND owner_id = $2 RETURNING {}",
                        $crate::store::sql::APP_COLUMNS
                    )
                });
                let mut tx = self.write().await?;
                let app = sqlx::query_as::<_, App>(&SQL)
                    .bind(client_id)
                    .bind(owner_id)
                    .bind(&update.name)
                    .bind(&update.description)
                    .bind(&update.redirect_url)
                    .bind(&update.site_url)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(app)
            }

            #[tracing::instrument(skip_all)]
            async fn replace_app_secret(
                &self,
                owner_id: &str,
                client_id: &str,
                digest: &str,
            ) -> Result<bool, StoreError> {
                let mut tx = self.write().await?;
                let done = sqlx::query(
                    "UPDATE apps SET secret_digest = $3 WHERE client_id = $1 AND owner_id = $2",
                )
                .bind(client_id)
                .bind(owner_id)
                .bind(digest)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    > 0;
                tx.commit().await?;
                self.revocations.bump();
                Ok(done)
            }

            #[tracing::instrument(skip_all)]
            async fn insert_reveal(
                &self,
                id: &str,
                user_id: &str,
                sealed: &str,
                now: i64,
            ) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
                sqlx::query(
                    "INSERT INTO secret_reveals (id, user_id, sealed, created_at) \
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(id)
                .bind(user_id)
                .bind(sealed)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
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
            async fn reserve_verification_send(
                &self,
                address: &str,
                now: i64,
                limits: $crate::store::SendLimits,
            ) -> Result<Result<(), i64>, StoreError> {
                let mut tx = self.write().await?;
                sqlx::query(KEY_LOCK)
                    .bind(format!("verification-send:{address}"))
                    .execute(&mut *tx)
                    .await?;
                let (count, first, last): (i64, Option<i64>, Option<i64>) = sqlx::query_as(
                    "SELECT COUNT(*), MIN(sent_at), MAX(sent_at) FROM verification_sends \
                     WHERE address = $1 AND sent_at > $2",
                )
                .bind(address)
                .bind(now.saturating_sub(limits.window))
                .fetch_one(&mut *tx)
                .await?;
                let refused = match (first, last) {
                    (_, Some(last)) if last > now.saturating_sub(limits.min_gap) => {
                        Some(last.saturating_add(limits.min_gap))
                    }
                    (Some(first), _) if count >= limits.per_window => {
                        Some(first.saturating_add(limits.window))
                    }
                    _ => None,
                };
                if let Some(moment) = refused {
                    tx.commit().await?;
                    return Ok(Err(moment));
                }
                sqlx::query("INSERT INTO verification_sends (address, sent_at) VALUES ($1, $2)")
                    .bind(address)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Ok(()))
            }

            #[tracing::instrument(skip_all)]
            async fn purge(&self, r: &$crate::store::Retention) -> Result<u64, StoreError> {
                // Nothing references codes, tokens or the other rows deleted
                // here (grants stay, and payments do not point at their keys).
                let statements: [(&str, i64); 10] = [
                    ("DELETE FROM oauth_codes WHERE expires_at < $1", r.codes_before),
                    ("DELETE FROM oauth_codes WHERE used_at < $1", r.codes_before),
                    ("DELETE FROM oauth_tokens WHERE expires_at < $1", r.tokens_before),
                    ("DELETE FROM oauth_tokens WHERE revoked_at < $1", r.tokens_before),
                    ("DELETE FROM signin_failures WHERE at < $1", r.signin_failures_before),
                    (
                        "DELETE FROM idempotency_keys WHERE created_at < $1",
                        r.idempotency_keys_before,
                    ),
                    (
                        "DELETE FROM ended_sessions WHERE expires_at < $1",
                        r.ended_sessions_before,
                    ),
                    (
                        "DELETE FROM verification_tokens WHERE expires_at < $1",
                        r.verification_links_before,
                    ),
                    ("DELETE FROM secret_reveals WHERE created_at < $1", r.reveals_before),
                    (
                        "DELETE FROM verification_sends WHERE sent_at < $1",
                        r.verification_sends_before,
                    ),
                ];
                let mut deleted = 0;
                // One short transaction per statement, so no lock is held long.
                for (sql, before) in statements {
                    let mut tx = self.write().await?;
                    deleted += sqlx::query(sql)
                        .bind(before)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    tx.commit().await?;
                }
                Ok(deleted)
            }
        }
    };
}

pub(crate) use impl_pages_store;
