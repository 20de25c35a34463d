//! A refresh token's rotation on PostgreSQL: one statement of data-modifying
//! CTEs (the guarded spend, the successors, the grant read), its own
//! transaction and one round trip. SQLite's rotation is a group write
//! (`sqlite/group_writes.rs`).

use super::PgStore;
use crate::store::{NewToken, Presented, RotatedGrant, StoreError};
use sqlx::Postgres;

impl PgStore {
    /// A refresh token's rotation as one statement (data-modifying CTEs): the
    /// grant spent, if any.
    pub(super) async fn rotate_in_one_statement(
        &self,
        token: Presented<'_>,
        successors: &[NewToken],
    ) -> Result<Option<RotatedGrant>, StoreError> {
        let Presented {
            digest,
            client_id,
            now,
        } = token;
        let grant_columns = format!(
            "g.id AS grant_id, g.scopes AS grant_scopes, {}",
            crate::store::payments::prefixed(crate::store::sql::USER_COLUMNS, "u")
        );
        let spend = |query: &mut sqlx::QueryBuilder<'_, Postgres>| {
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
                    " AND EXISTS (SELECT 1 FROM oauth_grants g \
                     WHERE g.id = oauth_tokens.grant_id AND g.client_id = ",
                )
                .push_bind(client_id.to_owned())
                .push(" AND g.revoked_at IS NULL)");
        };
        let successor_values = |query: &mut sqlx::QueryBuilder<'_, Postgres>| {
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
        let mut query = sqlx::QueryBuilder::<Postgres>::new("");
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
        self.write_batch(move |conn| {
            Box::pin(async move {
                query
                    .build_query_as::<RotatedGrant>()
                    .fetch_optional(conn)
                    .await
            })
        })
        .await
    }
}
