//! The OpenID Connect provider's state: signing keys and apps' choices.

use super::{Backend, ThisStore, Tx};
use crate::store::{
    NewCode, NewGrant, NewOidcGrant, OidcGrant, OidcStore, SigningKeyRow, StoreError,
};

#[async_trait::async_trait]
impl OidcStore for ThisStore {
    #[tracing::instrument(skip_all, fields(kid = %key.kid, alg = %key.alg))]
    async fn insert_signing_key(
        &self,
        key: &SigningKeyRow,
        first_of_alg: bool,
    ) -> Result<bool, StoreError> {
        let first = first_of_alg.then_some(key.alg.as_str());
        self.write_changed(
            sqlx::query(
                "INSERT INTO signing_keys \
                     (kid, alg, public_jwk, private_sealed, created_at, signs_from, first_of_alg) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            )
            .bind(&key.kid)
            .bind(&key.alg)
            .bind(&key.public_jwk)
            .bind(&key.private_sealed)
            .bind(key.created_at)
            .bind(key.signs_from)
            .bind(first),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn signing_keys(&self) -> Result<Vec<SigningKeyRow>, StoreError> {
        self.read_all(sqlx::query_as::<_, SigningKeyRow>(
            "SELECT kid, alg, public_jwk, private_sealed, created_at, signs_from \
             FROM signing_keys ORDER BY created_at, kid",
        ))
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn set_id_token_alg(&self, client_id: &str, alg: &str) -> Result<bool, StoreError> {
        self.write_changed(
            sqlx::query(
                "INSERT INTO oidc_clients (client_id, id_token_alg) \
                     SELECT client_id, $2 FROM apps WHERE client_id = $1 \
                     ON CONFLICT (client_id) DO UPDATE SET id_token_alg = excluded.id_token_alg",
            )
            .bind(client_id)
            .bind(alg),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn id_token_alg(&self, client_id: &str) -> Result<Option<String>, StoreError> {
        self.read_value(
            sqlx::query_scalar("SELECT id_token_alg FROM oidc_clients WHERE client_id = $1")
                .bind(client_id),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn insert_grant_with_code_and_oidc(
        &self,
        grant: &NewGrant,
        code: &NewCode,
        oidc: &NewOidcGrant,
    ) -> Result<(), StoreError> {
        let mut tx = self.write().await?;
        super::oauth::insert_grant(&mut tx, grant).await?;
        super::oauth::insert_code(&mut tx, &grant.id, code).await?;
        insert_oidc_grant(&mut tx, &grant.id, oidc).await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn oidc_grant(&self, grant_id: &str) -> Result<Option<OidcGrant>, StoreError> {
        self.read_optional(
            sqlx::query_as::<_, OidcGrant>(
                "SELECT o.auth_time, o.sid, o.nonce, o.acr, o.amr, c.id_token_alg \
             FROM oidc_grants o JOIN oauth_grants g ON g.id = o.grant_id \
             LEFT JOIN oidc_clients c ON c.client_id = g.client_id \
             WHERE o.grant_id = $1",
            )
            .bind(grant_id),
        )
        .await
    }
}

/// Records the OpenID Connect authentication behind a grant.
pub(super) async fn insert_oidc_grant(
    tx: &mut Tx,
    grant_id: &str,
    oidc: &NewOidcGrant,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO oidc_grants (grant_id, auth_time, sid, nonce, acr, amr) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(grant_id)
    .bind(oidc.auth_time)
    .bind(&oidc.sid)
    .bind(&oidc.nonce)
    .bind(&oidc.acr)
    .bind(&oidc.amr)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
