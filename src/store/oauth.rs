//! Storage of the authorization server: consents, grants, tokens and codes.
//! Single-use things (codes, refresh tokens) are consumed by one guarded
//! statement, never found first and deleted after.

use super::{StoreError, User};
use async_trait::async_trait;

/// One authorization of an app by a user, the family of every token issued
/// under it.
#[derive(Debug, Clone)]
pub struct NewGrant {
    pub id: String,
    pub user_id: String,
    /// `None` for a personal access token.
    pub client_id: Option<String>,
    pub scopes: String,
    /// `token`, `code` or `personal`.
    pub flow: &'static str,
    pub created_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Access,
    Refresh,
}

impl TokenKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Access => "access",
            Self::Refresh => "refresh",
        }
    }
}

#[derive(Debug, Clone)]
pub struct NewToken {
    pub digest: String,
    pub kind: TokenKind,
    /// The token's own scopes when narrower than its grant's (a refresh that
    /// asked for less, RFC 6749 §6); `None`: the grant's.
    pub scopes: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone)]
pub struct NewCode {
    pub digest: String,
    pub redirect_uri: Option<String>,
    pub code_challenge: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

/// A grant as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Grant {
    pub id: String,
    pub user_id: String,
    pub client_id: Option<String>,
    pub scopes: String,
    pub flow: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// What a refresh token's rotation returns: its grant and the grant's user,
/// read by the rotating statement itself.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RotatedGrant {
    pub grant_id: String,
    pub grant_scopes: String,
    #[sqlx(flatten)]
    pub user: User,
}

/// Everything introspection needs about a token, read in one query.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRecord {
    #[sqlx(flatten)]
    pub user: User,
    pub token_kind: String,
    pub expires_at: i64,
    pub created_at: i64,
    pub revoked: bool,
    pub grant_id: String,
    pub client_id: Option<String>,
    pub scopes: String,
    pub app_suspended: bool,
    /// Read only by `find_token_with_friends_count` (for `/me`).
    #[sqlx(default)]
    pub friends_count: Option<i64>,
}

/// The app that calls the introspection endpoint, as far as authenticating it
/// needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IntrospectingClient {
    #[sqlx(rename = "caller_client_id")]
    pub client_id: String,
    #[sqlx(rename = "caller_secret_digest")]
    pub secret_digest: String,
    #[sqlx(rename = "caller_suspended")]
    pub suspended: bool,
}

/// A code taken for exchange.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CodeRecord {
    pub grant_id: String,
    pub client_id: Option<String>,
    pub user_id: String,
    pub scopes: String,
    pub redirect_uri: Option<String>,
    pub code_challenge: Option<String>,
    pub expires_at: i64,
}

#[derive(Debug)]
pub enum CodeUse {
    /// First use, checks passed: the code is spent and the tokens are stored.
    Issued(CodeRecord),
    /// First use, a check failed (the reason): the code is spent all the same.
    Refused(String),
    /// First use, but the user revoked the authorization since: spent, nothing
    /// issued.
    Revoked,
    /// The code was spent before; its grant (every token issued from it) has
    /// now been revoked.
    Replayed,
    /// Unknown, or another client's (which leaves it untouched).
    Unknown,
}

/// Given each key's failures in the window (count, latest time), whether an
/// attempt may go ahead, or how long it must wait.
pub type SigninDecision<'a> =
    &'a (dyn Fn(&[(i64, Option<i64>)]) -> Result<(), std::time::Duration> + Send + Sync);

/// What must hold of a code before tokens are issued for it (expiry,
/// `redirect_uri`, PKCE); `Err` gives the reason.
pub type CodeCheck<'a> = &'a (dyn Fn(&CodeRecord) -> Result<(), String> + Send + Sync);

#[derive(Debug)]
pub enum RefreshUse {
    /// The refresh token was spent and the new tokens stored under its grant.
    Rotated(Box<RotatedGrant>),
    /// A spent refresh token came back: its whole family is now revoked.
    Replayed,
    /// Unknown, expired, revoked, or of another client.
    Invalid,
}

#[async_trait]
pub trait OAuthStore: Send + Sync {
    /// Whether the user allowed the app these exact scopes for this response
    /// type (`token` or `code`).
    async fn has_consent(
        &self,
        user_id: &str,
        client_id: &str,
        scopes: &str,
        response_type: &str,
    ) -> Result<bool, StoreError>;
    async fn insert_consent(
        &self,
        user_id: &str,
        client_id: &str,
        scopes: &str,
        response_type: &str,
        at: i64,
    ) -> Result<(), StoreError>;

    /// Stores a grant and its first tokens together.
    async fn insert_grant_with_tokens(
        &self,
        grant: &NewGrant,
        tokens: &[NewToken],
    ) -> Result<(), StoreError>;
    /// Stores a grant and the code that will later yield its tokens.
    async fn insert_grant_with_code(
        &self,
        grant: &NewGrant,
        code: &NewCode,
    ) -> Result<(), StoreError>;

    /// Spends a code of `client_id` and, if `check` passes and its grant is
    /// still live, stores `tokens` under that grant: one transaction, so of
    /// simultaneous exchanges exactly one is first. A replay revokes the grant.
    async fn exchange_code(
        &self,
        digest: &str,
        client_id: &str,
        now: i64,
        check: CodeCheck<'_>,
        tokens: &[NewToken],
    ) -> Result<CodeUse, StoreError>;

    /// Spends a refresh token of `client_id` and stores its successors, in one
    /// transaction. A replay of a spent refresh token revokes its family.
    async fn rotate_refresh_token(
        &self,
        digest: &str,
        client_id: &str,
        now: i64,
        successors: &[NewToken],
    ) -> Result<RefreshUse, StoreError>;

    /// The scopes of the grant behind a refresh token that `rotate_refresh_token`
    /// would spend (of `client_id`, unspent, unrevoked, unexpired, its grant
    /// live); `None` for any other token, so nothing is learnt of those.
    async fn live_refresh_token_scopes(
        &self,
        digest: &str,
        client_id: &str,
        now: i64,
    ) -> Result<Option<String>, StoreError>;

    async fn find_token(&self, digest: &str) -> Result<Option<TokenRecord>, StoreError>;
    /// `find_token` with the count of the user's friends, in the same statement.
    async fn find_token_with_friends_count(
        &self,
        digest: &str,
    ) -> Result<Option<TokenRecord>, StoreError>;
    /// The calling app and the token it asks about, in one statement: `None`
    /// when there is no such app; the token is `None` when unknown.
    async fn find_client_and_token(
        &self,
        client_id: &str,
        digest: &str,
    ) -> Result<Option<(IntrospectingClient, Option<TokenRecord>)>, StoreError>;

    /// Revokes one token; a refresh token takes its whole family with it. When
    /// `client_id` is given, only a token of that client is revoked. Returns
    /// whether a live token was found.
    async fn revoke_token(
        &self,
        digest: &str,
        client_id: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError>;

    async fn revoke_grant(&self, grant_id: &str, now: i64) -> Result<(), StoreError>;

    /// Admits a sign-in attempt: with each key locked (so parallel attempts
    /// are decided one after another, on every instance), reads each key's
    /// failures since `since` (count, latest) and asks `decide`; when it
    /// admits, records the attempt as a failure under every key at `now`
    /// (failures before `since` are forgotten). A right password takes the
    /// record back with `forget_signin_attempt`.
    async fn admit_signin(
        &self,
        keys: &[String],
        since: i64,
        now: i64,
        decide: SigninDecision<'_>,
    ) -> Result<Result<(), std::time::Duration>, StoreError>;
    /// Forgets every failure of `clear_key`, and the one failure recorded
    /// under each of `attempt_keys` at `at`.
    async fn forget_signin_attempt(
        &self,
        clear_key: &str,
        attempt_keys: &[String],
        at: i64,
    ) -> Result<(), StoreError>;
}

/// The SQL that reads a token (digest `$n`) with its grant, user and app, and,
/// if asked, the user's friend count.
fn token_select(digest_param: u8, with_friends_count: bool) -> String {
    let user_columns: Vec<String> = super::sql::USER_COLUMNS
        .split(',')
        .map(|c| format!("u.{}", c.trim()))
        .collect();
    let friends_count = if with_friends_count {
        ", (SELECT CAST(COUNT(*) AS BIGINT) FROM friendships f WHERE f.user_id = u.id) \
         AS friends_count"
    } else {
        ""
    };
    format!(
        "SELECT {}, t.kind AS token_kind, t.expires_at, t.created_at, \
         (t.revoked_at IS NOT NULL OR g.revoked_at IS NOT NULL) AS revoked, \
         g.id AS grant_id, g.client_id, COALESCE(t.scopes, g.scopes) AS scopes, \
         COALESCE(a.suspended, FALSE) AS app_suspended{friends_count} \
         FROM oauth_tokens t \
         JOIN oauth_grants g ON g.id = t.grant_id \
         JOIN users u ON u.id = g.user_id \
         LEFT JOIN apps a ON a.client_id = g.client_id \
         WHERE t.digest = ${digest_param}",
        user_columns.join(", ")
    )
}

/// The token queries, built once.
pub(crate) struct TokenQueries {
    pub token: String,
    pub token_with_friends_count: String,
    pub client_and_token: String,
}

pub(crate) fn token_queries() -> &'static TokenQueries {
    static QUERIES: std::sync::OnceLock<TokenQueries> = std::sync::OnceLock::new();
    QUERIES.get_or_init(|| TokenQueries {
        token: token_select(1, false),
        token_with_friends_count: token_select(1, true),
        // The caller's row, and the token's columns beside it (NULL when the
        // token is unknown).
        client_and_token: format!(
            "SELECT c.client_id AS caller_client_id, c.secret_digest AS caller_secret_digest, \
             c.suspended AS caller_suspended, tok.* \
             FROM apps c LEFT JOIN ({}) tok ON TRUE \
             WHERE c.client_id = $1",
            token_select(2, false)
        ),
    })
}

macro_rules! impl_oauth_store {
    ($store:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::OAuthStore for $store {
            #[tracing::instrument(skip_all)]
            async fn has_consent(
                &self,
                user_id: &str,
                client_id: &str,
                scopes: &str,
                response_type: &str,
            ) -> Result<bool, StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM oauth_consents \
                     WHERE user_id = $1 AND client_id = $2 AND scopes = $3 \
                     AND response_type = $4)",
                )
                .bind(user_id)
                .bind(client_id)
                .bind(scopes)
                .bind(response_type)
                .fetch_one(self.reader())
                .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn insert_consent(
                &self,
                user_id: &str,
                client_id: &str,
                scopes: &str,
                response_type: &str,
                at: i64,
            ) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
                sqlx::query(
                    "INSERT INTO oauth_consents \
                     (user_id, client_id, scopes, response_type, created_at) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                )
                .bind(user_id)
                .bind(client_id)
                .bind(scopes)
                .bind(response_type)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            #[tracing::instrument(skip_all, fields(flow = grant.flow))]
            async fn insert_grant_with_tokens(
                &self,
                grant: &NewGrant,
                tokens: &[NewToken],
            ) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
                insert_grant(&mut tx, grant).await?;
                for token in tokens {
                    insert_token(&mut tx, &grant.id, token).await?;
                }
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
                sqlx::query(
                    "INSERT INTO oauth_codes (digest, grant_id, redirect_uri, code_challenge, \
                     created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&code.digest)
                .bind(&grant.id)
                .bind(&code.redirect_uri)
                .bind(&code.code_challenge)
                .bind(code.created_at)
                .bind(code.expires_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            #[tracing::instrument(skip_all)]
            async fn exchange_code(
                &self,
                digest: &str,
                client_id: &str,
                now: i64,
                check: $crate::store::CodeCheck<'_>,
                tokens: &[NewToken],
            ) -> Result<CodeUse, StoreError> {
                let mut tx = self.write().await?;
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
                        // Locks the grant (PostgreSQL), so a revocation either
                        // came first and is seen here, or waits and then
                        // revokes these tokens too.
                        let live: Option<String> = sqlx::query_scalar(
                            "UPDATE oauth_grants SET revoked_at = revoked_at \
                             WHERE id = $1 AND revoked_at IS NULL RETURNING id",
                        )
                        .bind(&grant_id)
                        .fetch_optional(&mut *tx)
                        .await?;
                        if live.is_none() {
                            CodeUse::Revoked
                        } else if let Err(reason) = check(&record) {
                            CodeUse::Refused(reason)
                        } else {
                            for token in tokens {
                                insert_token(&mut tx, &grant_id, token).await?;
                            }
                            CodeUse::Issued(record)
                        }
                    }
                    None => {
                        // Spent before: RFC 6749 §4.1.2 says revoke what it issued.
                        let grant: Option<String> = sqlx::query_scalar(
                            "SELECT grant_id FROM oauth_codes WHERE digest = $1",
                        )
                        .bind(digest)
                        .fetch_optional(&mut *tx)
                        .await?;
                        match grant {
                            Some(grant_id) => {
                                revoke_grant(&mut tx, &grant_id, now).await?;
                                CodeUse::Replayed
                            }
                            None => CodeUse::Unknown,
                        }
                    }
                };
                tx.commit().await?;
                if matches!(outcome, CodeUse::Replayed) {
                    self.revocations.bump();
                }
                Ok(outcome)
            }

            #[tracing::instrument(skip_all)]
            async fn rotate_refresh_token(
                &self,
                digest: &str,
                client_id: &str,
                now: i64,
                successors: &[NewToken],
            ) -> Result<RefreshUse, StoreError> {
                // The guarded spend, the successors (one multi-row insert) and
                // the grant, sent at once: on PostgreSQL one statement (its own
                // transaction, one round trip); on SQLite one batch inside
                // `BEGIN IMMEDIATE`, rolled back when nothing was spent.
                let grant_columns = format!(
                    "g.id AS grant_id, g.scopes AS grant_scopes, {}",
                    $crate::store::payments::prefixed($crate::store::sql::USER_COLUMNS, "u")
                );
                let spend = |query: &mut sqlx::QueryBuilder<'_, Backend>| {
                    query
                        .push("UPDATE oauth_tokens SET used_at = ")
                        .push_bind(now)
                        .push(" WHERE digest = ")
                        .push_bind(digest.to_owned())
                        .push(
                            " AND kind = 'refresh' AND used_at IS NULL \
                             AND revoked_at IS NULL AND expires_at > ",
                        )
                        .push_bind(now)
                        .push(
                            " AND grant_id IN (SELECT id FROM oauth_grants \
                             WHERE client_id = ",
                        )
                        .push_bind(client_id.to_owned())
                        .push(" AND revoked_at IS NULL)");
                };
                let successor_values = |query: &mut sqlx::QueryBuilder<'_, Backend>| {
                    query.push("(VALUES ");
                    for (i, token) in successors.iter().enumerate() {
                        query
                            .push(if i == 0 { "(" } else { ", (" })
                            .push_bind(token.digest.clone())
                            .push(", ")
                            .push_bind(token.kind.as_str())
                            .push(", ")
                            .push_bind(token.scopes.clone())
                            .push(", ")
                            .push_bind(token.created_at)
                            .push(", ")
                            .push_bind(token.expires_at)
                            .push(")");
                    }
                    query.push(")");
                };
                let mut query = sqlx::QueryBuilder::<Backend>::new("");
                let spent = match self.statement_pool() {
                    Some(pool) => {
                        query.push("WITH spent AS (");
                        spend(&mut query);
                        query.push(" RETURNING grant_id)");
                        if !successors.is_empty() {
                            query.push(
                                ", issued AS (INSERT INTO oauth_tokens \
                                 (digest, grant_id, kind, scopes, created_at, expires_at) \
                                 SELECT t.digest, spent.grant_id, t.kind, t.scopes, \
                                 t.created_at, t.expires_at FROM spent CROSS JOIN ",
                            );
                            successor_values(&mut query);
                            query.push(" AS t (digest, kind, scopes, created_at, expires_at))");
                        }
                        query.push(format!(
                            " SELECT {grant_columns} FROM oauth_grants g \
                             JOIN spent ON spent.grant_id = g.id \
                             JOIN users u ON u.id = g.user_id"
                        ));
                        query.build_query_as::<RotatedGrant>().fetch_optional(pool).await?
                    }
                    None => {
                        query.push("BEGIN IMMEDIATE; ");
                        spend(&mut query);
                        // changes(): the rows the spend just changed.
                        query
                            .push(format!(
                                "; SELECT {grant_columns} FROM oauth_grants g \
                                 JOIN oauth_tokens t ON t.grant_id = g.id \
                                 JOIN users u ON u.id = g.user_id \
                                 WHERE changes() = 1 AND t.digest = "
                            ))
                            .push_bind(digest.to_owned());
                        if !successors.is_empty() {
                            query.push(
                                "; INSERT INTO oauth_tokens \
                                 (digest, grant_id, kind, scopes, created_at, expires_at) \
                                 SELECT v.column1, t.grant_id, v.column2, v.column3, \
                                 v.column4, v.column5 FROM oauth_tokens t, ",
                            );
                            successor_values(&mut query);
                            // Only after a spend (a SELECT leaves changes() alone).
                            query
                                .push(" AS v WHERE changes() = 1 AND t.digest = ")
                                .push_bind(digest.to_owned());
                        }
                        query.push("; COMMIT");
                        // One trip, a transaction of its own; every row, so
                        // that each statement runs.
                        self.write_batch(move |conn| {
                            Box::pin(async move {
                                Ok(query
                                    .build_query_as::<RotatedGrant>()
                                    .fetch_all(conn)
                                    .await?
                                    .pop())
                            })
                        })
                        .await?
                    }
                };
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
                let outcome = match used {
                    Some((grant_id, Some(_))) => {
                        revoke_grant(&mut tx, &grant_id, now).await?;
                        RefreshUse::Replayed
                    }
                    _ => RefreshUse::Invalid,
                };
                tx.commit().await?;
                if matches!(outcome, RefreshUse::Replayed) {
                    self.revocations.bump();
                }
                Ok(outcome)
            }

            #[tracing::instrument(skip_all)]
            async fn live_refresh_token_scopes(
                &self,
                digest: &str,
                client_id: &str,
                now: i64,
            ) -> Result<Option<String>, StoreError> {
                // The conditions of the spend in rotate_refresh_token.
                Ok(sqlx::query_scalar(
                    "SELECT g.scopes FROM oauth_tokens t \
                     JOIN oauth_grants g ON g.id = t.grant_id \
                     WHERE t.digest = $1 AND t.kind = 'refresh' AND t.used_at IS NULL \
                     AND t.revoked_at IS NULL AND t.expires_at > $3 \
                     AND g.client_id = $2 AND g.revoked_at IS NULL",
                )
                .bind(digest)
                .bind(client_id)
                .bind(now)
                .fetch_optional(self.reader())
                .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn find_token(&self, digest: &str) -> Result<Option<TokenRecord>, StoreError> {
                Ok(sqlx::query_as::<_, TokenRecord>(&$crate::store::oauth::token_queries().token)
                    .bind(digest)
                    .fetch_optional(self.reader())
                    .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn find_token_with_friends_count(
                &self,
                digest: &str,
            ) -> Result<Option<TokenRecord>, StoreError> {
                Ok(sqlx::query_as::<_, TokenRecord>(
                    &$crate::store::oauth::token_queries().token_with_friends_count,
                )
                .bind(digest)
                .fetch_optional(self.reader())
                .await?)
            }

            #[tracing::instrument(skip_all)]
            async fn find_client_and_token(
                &self,
                client_id: &str,
                digest: &str,
            ) -> Result<Option<($crate::store::IntrospectingClient, Option<TokenRecord>)>, StoreError>
            {
                use sqlx::{FromRow as _, Row as _};
                let row = sqlx::query(&$crate::store::oauth::token_queries().client_and_token)
                    .bind(client_id)
                    .bind(digest)
                    .fetch_optional(self.reader())
                    .await?;
                let Some(row) = row else {
                    return Ok(None);
                };
                let client = $crate::store::IntrospectingClient::from_row(&row)?;
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
                     AND ($3 IS NULL OR grant_id IN \
                          (SELECT id FROM oauth_grants WHERE client_id = $3)) \
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
                tx.commit().await?;
                self.revocations.bump();
                Ok(found.is_some())
            }

            #[tracing::instrument(skip_all)]
            async fn revoke_grant(&self, grant_id: &str, now: i64) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
                revoke_grant(&mut tx, grant_id, now).await?;
                tx.commit().await?;
                self.revocations.bump();
                Ok(())
            }

            #[tracing::instrument(skip_all)]
            async fn admit_signin(
                &self,
                keys: &[String],
                since: i64,
                now: i64,
                decide: $crate::store::SigninDecision<'_>,
            ) -> Result<Result<(), std::time::Duration>, StoreError> {
                let mut tx = self.write().await?;
                let mut sorted: Vec<&String> = keys.iter().collect();
                sorted.sort();
                for key in &sorted {
                    sqlx::query(KEY_LOCK).bind(*key).execute(&mut *tx).await?;
                }
                let mut seen = Vec::with_capacity(keys.len());
                for key in keys {
                    sqlx::query("DELETE FROM signin_failures WHERE key = $1 AND at <= $2")
                        .bind(key)
                        .bind(since)
                        .execute(&mut *tx)
                        .await?;
                    let row: (i64, Option<i64>) = sqlx::query_as(
                        "SELECT COUNT(*), MAX(at) FROM signin_failures WHERE key = $1",
                    )
                    .bind(key)
                    .fetch_one(&mut *tx)
                    .await?;
                    seen.push(row);
                }
                if let Err(wait) = decide(&seen) {
                    tx.commit().await?;
                    return Ok(Err(wait));
                }
                for key in keys {
                    sqlx::query("INSERT INTO signin_failures (key, at) VALUES ($1, $2)")
                        .bind(key)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(Ok(()))
            }

            #[tracing::instrument(skip_all)]
            async fn forget_signin_attempt(
                &self,
                clear_key: &str,
                attempt_keys: &[String],
                at: i64,
            ) -> Result<(), StoreError> {
                let mut tx = self.write().await?;
                sqlx::query("DELETE FROM signin_failures WHERE key = $1")
                    .bind(clear_key)
                    .execute(&mut *tx)
                    .await?;
                for key in attempt_keys {
                    sqlx::query("DELETE FROM signin_failures WHERE key = $1 AND at = $2")
                        .bind(key)
                        .bind(at)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }

        async fn insert_grant(
            tx: &mut sqlx::Transaction<'static, Backend>,
            grant: &NewGrant,
        ) -> Result<(), StoreError> {
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

        async fn insert_token(
            tx: &mut sqlx::Transaction<'static, Backend>,
            grant_id: &str,
            token: &NewToken,
        ) -> Result<(), StoreError> {
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
            Ok(())
        }

        async fn revoke_grant(
            tx: &mut sqlx::Transaction<'static, Backend>,
            grant_id: &str,
            now: i64,
        ) -> Result<(), StoreError> {
            sqlx::query("UPDATE oauth_grants SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL")
                .bind(grant_id)
                .bind(now)
                .execute(&mut **tx)
                .await?;
            sqlx::query("UPDATE oauth_tokens SET revoked_at = $2 WHERE grant_id = $1 AND revoked_at IS NULL")
                .bind(grant_id)
                .bind(now)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }
    };
}

pub(crate) use impl_oauth_store;
