//! What SQLite's group writer (`group.rs`) writes: the statements and
//! parameters of a new payment and of a refresh token's rotation, the
//! settlement of a round of pays, and the reading of their rows.

use super::group::{GroupWrite, Row};
use crate::domain::{accounts, EventType, Parties, PaymentStatus, Step};
use crate::store::webhooks::OutboxEvent;
use crate::store::StoreError;
use rusqlite::types::Value;
use rusqlite::OptionalExtension;

/// What the group writes for a new payment: the parameters of the SQLite
/// new-payment statements (`SQLITE_HOLD_SQL` and its kin), in the order
/// `payment_statements` binds them.
pub(super) fn payment_params(
    insert: &crate::store::PaymentInsert,
) -> Result<Vec<Value>, StoreError> {
    use crate::store::payments::{ColumnValue, PAYMENT_ROW};
    let p = &insert.payment;
    let text = |s: &str| Value::Text(s.to_owned());
    let mut params: Vec<Value> = PAYMENT_ROW
        .iter()
        .map(|column| match column.value {
            ColumnValue::Text(value) => value(p).map_or(Value::Null, Value::Text),
            ColumnValue::Int(value) => value(p).map_or(Value::Null, Value::Integer),
        })
        .collect();
    if let Some(hold) = &insert.hold {
        // As `payment_statements`: the statements debit the actor.
        if !insert.hold_is_from_actor() {
            return Err(StoreError::Unexpected(anyhow::anyhow!(
                "a hold must move the payment's amount from its actor"
            )));
        }
        params.extend([text(&hold.id), text(&hold.to), text(hold.kind.as_str())]);
    }
    Ok(params)
}

/// A new payment for the group: its statements (`sql`, with `params`), then
/// its `payment.created` event, as one write.
pub(super) fn payment(
    sql: &'static str,
    params: Vec<Value>,
    insert: &crate::store::PaymentInsert,
) -> GroupWrite {
    let payment_id = insert.payment.id.clone();
    let at = insert.payment.date_created;
    let origin = insert.origin.clone();
    let target_user_id = insert.payment.target_user_id.clone();
    GroupWrite::in_savepoint(move |conn| {
        let rows = super::group::run_in_write(conn, sql, &params)?;
        if written(&rows) && super::group::endpoints_exist(conn)? {
            super::group::push_event(OutboxEvent {
                payment_id: payment_id.clone(),
                kind: EventType::PaymentCreated.as_str(),
                at,
                origin: origin.clone(),
                status: None,
                date_completed: None,
                target_user_id: target_user_id.clone(),
                refund_payment_id: None,
            });
        }
        Ok(rows)
    })
}

/// Whether a new payment's statements wrote it: as [`recorded`] reads their
/// rows, the last one holds the actor's balance after the payment, NULL (or
/// no row) when nothing was written.
fn written(rows: &[Row]) -> bool {
    rows.last()
        .and_then(|row| row.first())
        .is_some_and(|balance| *balance != Value::Null)
}

/// What a new payment's statements' rows say (see `Recorded::from_last_row`).
pub(super) fn recorded(
    insert: &crate::store::PaymentInsert,
    rows: &[Row],
) -> Result<crate::store::payments::Recorded, StoreError> {
    // The target, when read with the write, is in the last row: the actor's
    // balance, then the account.
    crate::store::payments::Recorded::from_last_row(
        insert,
        rows.last(),
        |row| column(row, 0),
        |row| Ok((column(row, 0)?, user(row, 1)?)),
    )
}

/// A refresh token's rotation for the group: the guarded spend, the grant
/// and its user (read only when the spend changed a row), and the
/// successors (inserted only then), as one write.
pub(super) fn rotation(
    token: crate::store::Presented<'_>,
    successors: &[crate::store::NewToken],
) -> GroupWrite {
    let (sql, params) = rotation_statements(token, successors);
    GroupWrite::statements(sql, params)
}

/// The statements of [`rotation`] and their parameters.
pub(super) fn rotation_statements(
    token: crate::store::Presented<'_>,
    successors: &[crate::store::NewToken],
) -> (String, Vec<Value>) {
    use crate::store::payments::{prefixed, SQLITE_SAVEPOINT_CLOSE, SQLITE_SAVEPOINT_OPEN};
    // The spend and the read, the same text for every rotation: made once.
    static SPEND_AND_READ: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "{SQLITE_SAVEPOINT_OPEN}\
             UPDATE oauth_tokens SET used_at = $1 WHERE digest = $2 AND kind = 'refresh' \
               AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $1 \
               AND EXISTS (SELECT 1 FROM oauth_grants g \
                 WHERE g.id = oauth_tokens.grant_id AND g.client_id = $3 \
                   AND g.revoked_at IS NULL); \
             SELECT g.id AS grant_id, g.scopes AS grant_scopes, {} \
             FROM oauth_grants g JOIN oauth_tokens t ON t.grant_id = g.id \
             JOIN users u ON u.id = g.user_id WHERE changes() = 1 AND t.digest = $2",
            prefixed(crate::store::sql::USER_COLUMNS, "u")
        )
    });
    let mut sql = SPEND_AND_READ.clone();
    let mut params = vec![
        Value::Integer(token.now),
        Value::Text(token.digest.to_owned()),
        Value::Text(token.client_id.to_owned()),
    ];
    if !successors.is_empty() {
        sql.push_str(
            "; INSERT INTO oauth_tokens (digest, grant_id, kind, scopes, created_at, expires_at) \
             SELECT v.column1, t.grant_id, v.column2, v.column3, v.column4, v.column5 \
             FROM oauth_tokens t, (VALUES ",
        );
        for (i, successor) in successors.iter().enumerate() {
            let n = params.len();
            sql.push_str(&format!(
                "{}(${}, ${}, ${}, ${}, ${})",
                if i == 0 { "" } else { ", " },
                n + 1,
                n + 2,
                n + 3,
                n + 4,
                n + 5
            ));
            params.extend([
                Value::Text(successor.digest.clone()),
                Value::Text(successor.kind.as_str().to_owned()),
                successor.scopes.clone().map_or(Value::Null, Value::Text),
                Value::Integer(successor.created_at),
                Value::Integer(successor.expires_at),
            ]);
        }
        // Only after a spend (a SELECT leaves changes() alone).
        sql.push_str(") AS v WHERE changes() = 1 AND t.digest = $2");
    }
    sql.push_str(SQLITE_SAVEPOINT_CLOSE);
    (sql, params)
}

/// The ids a settlement's rows name (see `settlement`).
pub(super) fn settled_ids(rows: &[Row]) -> Result<Vec<String>, StoreError> {
    rows.iter().map(|row| column(row, 0)).collect()
}

/// The grant a rotation read: its id, its scopes, its user.
pub(super) fn rotated_grant(row: &[Value]) -> Result<crate::store::RotatedGrant, StoreError> {
    Ok(crate::store::RotatedGrant {
        grant_id: column(row, 0)?,
        grant_scopes: column(row, 1)?,
        user: user(row, 2)?,
    })
}

/// A user row's columns (`user_columns!`, in `User`'s order) from `at` on.
fn user(row: &[Value], at: usize) -> Result<crate::store::User, StoreError> {
    let c = |i: usize| at + i;
    Ok(crate::store::User {
        id: column(row, c(0))?,
        username: column(row, c(1))?,
        first_name: column(row, c(2))?,
        last_name: column(row, c(3))?,
        about: column(row, c(4))?,
        profile_picture_url: column(row, c(5))?,
        email: column(row, c(6))?,
        email_verified: column(row, c(7))?,
        phone: column(row, c(8))?,
        phone_verified: column(row, c(9))?,
        password_hash: column(row, c(10))?,
        verified: column(row, c(11))?,
        suspended: column(row, c(12))?,
        balance_cents: column(row, c(13))?,
        date_joined: column(row, c(14))?,
        profile_updated_at: column(row, c(15))?,
    })
}

/// One column of a row, as its Rust type.
fn column<T: rusqlite::types::FromSql>(row: &[Value], index: usize) -> Result<T, StoreError> {
    use rusqlite::types::ValueRef;
    let value = row.get(index).map_or(ValueRef::Null, ValueRef::from);
    T::column_result(value).map_err(|error| {
        StoreError::Unexpected(anyhow::anyhow!(
            "a group write's column {index} did not decode: {error}"
        ))
    })
}

/// Settles pays as `settle_payments` does on PostgreSQL, as one write (see
/// [`settle`]). Rows: the ids settled.
pub(super) fn settlement(settlements: Vec<crate::store::Settlement>, at: i64) -> GroupWrite {
    GroupWrite::in_savepoint(move |conn| settle(conn, &settlements, at))
}

/// Settles the pays due by `settle_by` (`Store::settle_due`), found in the
/// group's transaction, as one write (see [`settle`]). Rows: the ids settled.
pub(super) fn settlement_of_due(settle_by: i64, at: i64, limit: i64) -> GroupWrite {
    GroupWrite::in_savepoint(move |conn| {
        let mut due = conn.prepare_cached(crate::store::payments::SETTLEMENT_DUE_SQL)?;
        let settlements = due
            .query_map(rusqlite::params![settle_by, limit], |row| row.get(0))?
            .map(|payment_id| {
                Ok(crate::store::Settlement {
                    payment_id: payment_id?,
                    movement_id: crate::domain::new_id(),
                })
            })
            .collect::<Result<Vec<_>, rusqlite::Error>>()?;
        settle(conn, &settlements, at)
    })
}

/// The one settlement on SQLite: every path that settles a pay comes here
/// (`settle_payments`, with a round the workers read or, should that fail,
/// one pay at a time; `settle_due`, with what it finds due). Each still
/// pending pay whose target account is not suspended becomes
/// settled, and what it moves is the ledger's rule, [`Step::Settle`] of its
/// amount between its parties (from `@held` to its target): its two entries
/// are written as that move gives them, and each user account it reaches is
/// credited once with the sum of its moves (by a guarded update: should a move
/// ever debit one, the balance must cover it). One prepared statement per
/// row instead of statements as long as the round, which would be prepared
/// anew for each round's length. Rows: the ids settled.
fn settle(
    conn: &rusqlite::Connection,
    settlements: &[crate::store::Settlement],
    at: i64,
) -> Result<Vec<Row>, rusqlite::Error> {
    use rusqlite::params;
    let mut settle = conn.prepare_cached(
        "UPDATE payments SET status = 'settled', date_completed = ?2 \
         WHERE id = ?1 AND status = 'pending' AND action = 'pay' \
         AND EXISTS (SELECT 1 FROM users u \
                     WHERE u.id = payments.target_user_id AND NOT u.suspended) \
         RETURNING target_user_id, amount_cents",
    )?;
    let mut entry = conn.prepare_cached(
        "INSERT INTO ledger_entries \
         (movement_id, kind, account, amount_cents, payment_id, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let step = Step::Settle;
    let kind = step.entry_kind().as_str();
    let events = super::group::endpoints_exist(conn)?;
    let mut balances: std::collections::BTreeMap<String, i64> = Default::default();
    let mut settled = Vec::new();
    for s in settlements {
        let Some((target, cents)) = settle
            .query_row(params![s.payment_id, at], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })
            .optional()?
        else {
            continue;
        };
        let parties = Parties {
            actor: None,
            target: Some(&target),
        };
        // A settled pay always has its target: the update above read it.
        let moved = parties
            .step(step, cents)
            .ok_or(rusqlite::Error::QueryReturnedNoRows)?;
        for (account, cents) in moved.entries() {
            entry.execute(params![
                s.movement_id,
                kind,
                account,
                cents,
                s.payment_id,
                at
            ])?;
            if !accounts::is_system(account) {
                *balances.entry(account.to_owned()).or_default() += cents;
            }
        }
        if events {
            // As the settlement left it: settled now, to its target.
            super::group::push_event(OutboxEvent {
                payment_id: s.payment_id.clone(),
                kind: EventType::PaymentSettled.as_str(),
                at,
                origin: None,
                status: Some(PaymentStatus::Settled.as_str()),
                date_completed: Some(at),
                target_user_id: Some(target.clone()),
                refund_payment_id: None,
            });
        }
        settled.push(vec![Value::Text(s.payment_id.clone())]);
    }
    let mut change = conn.prepare_cached(
        "UPDATE users SET balance_cents = balance_cents + ?2 \
         WHERE id = ?1 AND balance_cents + ?2 >= 0",
    )?;
    for (account, cents) in &balances {
        if change.execute(params![account, cents])? != 1 {
            return Err(rusqlite::Error::QueryReturnedNoRows);
        }
    }
    Ok(settled)
}
