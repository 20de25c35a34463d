//! PostgreSQL reads whose cost must not grow with the database (decision 020).

use crate::helpers::{Backend, TestDb};
use sqlx::{Connection, Executor, Row};
use std::time::{Duration, Instant};

/// Users in the table: as many as the yardstick's big database, where the
/// primary key's b-tree has one level more than at a thousand users.
const USERS: i64 = 100_000;

/// A page of payments reads its counterparties with `find_users`. At 100,000
/// users that read must go through the hash index of users by id (two pages a
/// user at any size) in the custom plans of a statement's first runs and in
/// the generic plan PostgreSQL keeps after them.
#[tokio::test]
async fn counterparties_are_read_through_the_hash_index_at_100000_users() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store().await;
    let mut conn = sqlx::PgConnection::connect(&db.url_string()).await.unwrap();
    // Plain SQL with the search triggers off: only the table's size matters here.
    conn.execute(
        format!(
            "ALTER TABLE users DISABLE TRIGGER USER; \
             INSERT INTO users (id, username, password_hash, date_joined) \
             SELECT md5(n::text), 'user' || n, 'not-a-hash', n FROM generate_series(1, {USERS}) AS n; \
             ALTER TABLE users ENABLE TRIGGER USER; \
             ANALYZE users"
        )
        .as_str(),
    )
    .await
    .unwrap();
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT id FROM users WHERE date_joined % 5000 = 0 ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(ids.len(), 20);

    let before = index_scans(&mut conn, "users_id_hash").await;
    const READS: i64 = 10;
    for _ in 0..READS {
        let found = store.find_users(&ids).await.unwrap();
        assert_eq!(found.len(), ids.len());
    }

    // Backends report their counts when idle, within about a second.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let by_hash = index_scans(&mut conn, "users_id_hash").await - before;
        if by_hash >= READS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{by_hash} of {READS} reads used users_id_hash (users_pkey: {} scans)",
            index_scans(&mut conn, "users_pkey").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn index_scans(conn: &mut sqlx::PgConnection, index: &str) -> i64 {
    sqlx::query("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = $1")
        .bind(index)
        .fetch_one(conn)
        .await
        .unwrap_or_else(|e| panic!("index {index}: {e}"))
        .get(0)
}
