//! Users and their friendships.

use super::{Backend, ThisStore, USERS_NAMED_LIKE};
use crate::store::{NewUser, StoreError, User, UserFlags, UserKey, UserStore};

/// `UPDATE users SET <set> WHERE id = $1`, returning the row as changed: the
/// statement of each change to one account's columns (`$1` is its id).
macro_rules! update_user_sql {
    ($set:literal) => {
        concat!(
            "UPDATE users SET ",
            $set,
            " WHERE id = $1 RETURNING ",
            crate::store::sql::user_columns!(),
        )
    };
}

impl ThisStore {
    async fn users_where(
        &self,
        condition: &str,
        binds: &[String],
    ) -> Result<Vec<crate::store::User>, StoreError> {
        let select = format!(
            "SELECT {} FROM users WHERE {condition} (",
            crate::store::sql::USER_COLUMNS
        );
        self.fetch_in(select, binds).await
    }
}

#[async_trait::async_trait]
impl UserStore for ThisStore {
    #[tracing::instrument(skip_all, fields(username = %user.username))]
    async fn insert_user(&self, user: &NewUser) -> Result<User, StoreError> {
        const SQL: &str = concat!(
            "INSERT INTO users (id, username, first_name, last_name, about, email, \
             email_verified, phone, phone_verified, password_hash, verified, date_joined) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             RETURNING ",
            crate::store::sql::user_columns!(),
        );
        let inserted = self
            .write_returning(
                sqlx::query_as::<_, User>(SQL)
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
                    .bind(user.date_joined),
            )
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
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
                    crate::store::sql::USER_COLUMNS
                )
            })
        });
        let (sql, value) = match key {
            UserKey::Id(v) => (&BY[0], v),
            UserKey::Username(v) => (&BY[1], v),
            UserKey::Email(v) => (&BY[2], v),
            UserKey::Phone(v) => (&BY[3], v),
        };
        self.read_optional(sqlx::query_as::<_, User>(sql).bind(value))
            .await
    }

    #[tracing::instrument(skip_all, fields(count = ids.len()))]
    async fn find_users(&self, ids: &[String]) -> Result<Vec<crate::store::User>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.users_where("id IN", ids).await
    }

    #[tracing::instrument(skip_all)]
    async fn search_users(
        &self,
        s: &crate::store::UserSearch,
    ) -> Result<Vec<crate::store::User>, StoreError> {
        let Some(trigram) = crate::store::payments::first_trigram(&s.needle) else {
            // Shorter than a trigram: no index can narrow it, read every user.
            static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                let columns = crate::store::sql::USER_COLUMNS;
                format!(
                    "SELECT {columns} FROM users WHERE suspended = FALSE AND ( \
                       lower(username) LIKE $1 ESCAPE '\\' \
                       OR lower(first_name || ' ' || last_name) LIKE $1 ESCAPE '\\' \
                       OR (email = $2 AND email_verified) OR (phone = $3 AND phone_verified)) \
                     ORDER BY lower(username), id LIMIT $4 OFFSET $5"
                )
            });
            return self
                .read_all(
                    sqlx::query_as::<_, crate::store::User>(&SQL)
                        .bind(&s.pattern)
                        .bind(&s.email)
                        .bind(&s.phone)
                        .bind(s.limit)
                        .bind(s.offset),
                )
                .await;
        };
        // Every name that contains the needle contains its first trigram:
        // walk that trigram's index entries in listing order, keep the users
        // the full condition matches and stop once `offset + limit` are found
        // (`USERS_NAMED_LIKE`); add the few e-mail and phone matches, if the
        // needle may be an address; page what was found.
        static SQL: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
            let columns = crate::store::sql::USER_COLUMNS;
            let named = USERS_NAMED_LIKE;
            let page = "ORDER BY lower(username), id LIMIT $4 OFFSET $5";
            [
                // A needle that is no address: the union's other half, and
                // its planning, would be for nothing.
                format!("SELECT {columns} FROM ({named}) named {page}"),
                format!(
                    "SELECT {columns} FROM ( \
                       SELECT {columns} FROM ({named}) named \
                       UNION \
                       SELECT {columns} FROM users WHERE suspended = FALSE \
                         AND ((email = $2 AND email_verified) OR (phone = $3 AND phone_verified)) \
                     ) found {page}"
                ),
            ]
        });
        let may_be_an_address = s.email.is_some() || s.phone.is_some();
        self.read_all(
            sqlx::query_as::<_, crate::store::User>(&SQL[usize::from(may_be_an_address)])
                .bind(&s.pattern)
                .bind(&s.email)
                .bind(&s.phone)
                .bind(s.limit)
                .bind(s.offset)
                .bind(trigram)
                .bind(s.limit.saturating_add(s.offset)),
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(user_id))]
    async fn update_user_flags(
        &self,
        user_id: &str,
        flags: UserFlags,
    ) -> Result<Option<User>, StoreError> {
        const SQL: &str = update_user_sql!(
            "verified = COALESCE($2, verified), \
             suspended = COALESCE($3, suspended), \
             email_verified = (email_verified OR ($4 AND email IS NOT NULL)), \
             phone_verified = (phone_verified OR ($4 AND phone IS NOT NULL))"
        );
        self.write_revoking(
            sqlx::query_as::<_, User>(SQL)
                .bind(user_id)
                .bind(flags.verified)
                .bind(flags.suspended)
                .bind(flags.verified == Some(true)),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn update_profile(
        &self,
        user_id: &str,
        profile: &crate::store::ProfileUpdate,
    ) -> Result<Option<User>, StoreError> {
        // Every SET expression reads the row as it was before: the time
        // moves only when the name (the `profile` claims) changes.
        const SQL: &str = update_user_sql!(
            "first_name = $2, last_name = $3, about = $4, profile_updated_at = \
             CASE WHEN first_name <> $2 OR last_name <> $3 THEN $5 ELSE profile_updated_at END"
        );
        let user = self
            .write_returning(
                sqlx::query_as::<_, User>(SQL)
                    .bind(user_id)
                    .bind(&profile.first_name)
                    .bind(&profile.last_name)
                    .bind(&profile.about)
                    .bind(profile.at),
            )
            .await;
        // The token checks remember the user's row (see `TokenCache`).
        if matches!(user, Ok(Some(_))) {
            self.revocations().bump();
        }
        user
    }

    #[tracing::instrument(skip_all)]
    async fn update_contacts(
        &self,
        user_id: &str,
        email: &str,
        phone: Option<&str>,
    ) -> Result<Option<User>, StoreError> {
        // Every SET expression reads the row as it was before.
        const SQL: &str = update_user_sql!(
            "email_verified = (email_verified AND email IS NOT DISTINCT FROM $2), \
             phone_verified = (phone_verified AND phone IS NOT DISTINCT FROM $3), \
             email = $2, phone = $3"
        );
        let user = self
            .write_returning(
                sqlx::query_as::<_, User>(SQL)
                    .bind(user_id)
                    .bind(email)
                    .bind(phone),
            )
            .await;
        if matches!(user, Ok(Some(_))) {
            self.revocations().bump();
        }
        user
    }

    #[tracing::instrument(skip_all)]
    async fn add_friendship(&self, a: &str, b: &str, at: i64) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "INSERT INTO friendships (user_id, friend_id, created_at) \
             VALUES ($1, $2, $3), ($2, $1, $3) ON CONFLICT DO NOTHING",
            )
            .bind(a)
            .bind(b)
            .bind(at),
        )
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn are_friends(&self, a: &str, b: &str) -> Result<bool, StoreError> {
        let found: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM friendships WHERE user_id = $1 AND friend_id = $2)",
        )
        .bind(a)
        .bind(b)
        .fetch_one(&mut *self.lease().await?)
        .await?;
        Ok(found)
    }

    #[tracing::instrument(skip_all, fields(user_id))]
    async fn list_friends(
        &self,
        user_id: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<crate::store::User>, StoreError> {
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT {} FROM friendships f JOIN users u ON u.id = f.friend_id \
                 WHERE f.user_id = $1 AND f.friend_id > $2 ORDER BY f.friend_id LIMIT $3",
                crate::store::payments::prefixed(crate::store::sql::USER_COLUMNS, "u")
            )
        });
        self.read_all(
            sqlx::query_as::<_, crate::store::User>(&SQL)
                .bind(user_id)
                .bind(after.unwrap_or(""))
                .bind(limit),
        )
        .await
    }

    #[tracing::instrument(skip_all)]
    async fn find_user_with_friends_count(
        &self,
        user_id: &str,
    ) -> Result<Option<(User, i64)>, StoreError> {
        use crate::store::user_reads::BatchedRead;
        if let BatchedRead::Found(found) = self.user_reads().read(user_id).await? {
            return Ok(found);
        }
        const SQL: &str = concat!(
            "SELECT ",
            crate::store::user_reads::user_with_friends_count_columns!(),
            " FROM users WHERE id = $1"
        );
        let found = sqlx::query_as::<_, crate::store::models::UserWithFriendsCount>(SQL)
            .bind(user_id)
            .fetch_optional(&mut *self.lease().await?)
            .await?;
        Ok(found.map(|f| (f.user, f.friends_count)))
    }
}
