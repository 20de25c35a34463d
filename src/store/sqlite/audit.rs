//! The audit's snapshot on SQLite, read on a connection of its own (rusqlite)
//! in one read transaction.
//!
//! Why not PostgreSQL's SQL (`audit_suspects` in `postgres/audit.rs`): the
//! sums by account came from an index on the entries' account, which every pay
//! and settlement writes at scattered places (about two WAL pages a pay;
//! docs/decisions/011-audit-at-scale.md has what dropping it bought), and
//! SQLite has no merge join, so the per-payment check probed the payment
//! index once per payment. Here one walk of the payments in id order beside
//! the entries' payment index in the same order (a merge, in Rust) checks every
//! payment, sums the entries that name a payment by account, and finds the
//! entries whose payment does not exist; the entries that name no payment (deposits and
//! other movements) are summed from `ledger_entries_account`, which since
//! migration 20261127000001 holds only them. Memory: the sums by account and
//! the suspects' ids, never the ledger.

use crate::domain::{
    accounts, is_returned, net_flow, Parties, Party, PaymentAction, PaymentStatus,
};
use crate::store::{
    AccountBalance, AuditChunk, AuditPayment, AuditSnapshot, LedgerSum, PaymentEntrySum,
};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row};
use std::collections::HashMap;
use std::path::Path;

/// A row's columns read, in order, into the fields named of `$row_type`.
macro_rules! from_columns {
    ($row_type:ident { $($field:ident),+ $(,)? }) => {
        |row: &Row<'_>| {
            let mut column = 0..;
            Ok($row_type {
                $($field: row.get(column.next().unwrap_or_default())?,)+
            })
        }
    };
}

/// The rows of `sql` with `params`, each read by `read`.
fn rows<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    read: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    conn.prepare(sql)?.query_map(params, read)?.collect()
}

/// The snapshot (see `Store::audit_snapshot`): the suspects are handed to
/// `each`, `chunk` payments at a time in id order, with their entries.
pub(super) fn snapshot(
    path: &Path,
    chunk: usize,
    each: &mut dyn FnMut(AuditChunk),
) -> rusqlite::Result<AuditSnapshot> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(super::group::BUSY_TIMEOUT)?;
    // A deferred BEGIN: the snapshot is taken by the first read and every
    // read below sees it.
    conn.execute_batch("BEGIN")?;
    let balances = rows(
        &conn,
        "SELECT id, username, balance_cents FROM users ORDER BY id",
        [],
        from_columns!(AccountBalance {
            user_id,
            username,
            balance_cents
        }),
    )?;
    let unbalanced_movements = rows(
        &conn,
        "SELECT movement_id, SUM(amount_cents) FROM ledger_entries \
         GROUP BY movement_id HAVING SUM(amount_cents) <> 0",
        [],
        from_columns!(LedgerSum {
            account,
            total_cents
        }),
    )?;
    let pending_pay_cents: i64 = conn.query_row(
        "SELECT COALESCE(SUM(amount_cents), 0) FROM payments \
         WHERE kind = 'payment' AND action = 'pay' AND status = 'pending'",
        [],
        |row| row.get(0),
    )?;
    let walk = walk_payments_and_entries(&conn)?;
    let mut sums = walk.sums_by_account;
    // Entries that name no payment: deposits and other movements, from
    // `ledger_entries_account`, which holds only them.
    let mut unpaid = conn.prepare(
        "SELECT account, SUM(amount_cents) FROM ledger_entries \
         WHERE payment_id IS NULL GROUP BY account",
    )?;
    let mut rows = unpaid.query([])?;
    while let Some(row) = rows.next()? {
        let account: String = row.get(0)?;
        *sums.entry(account).or_insert(0) += row.get::<_, i64>(1)?;
    }
    let ledger_sums = sums
        .into_iter()
        .map(|(account, total_cents)| LedgerSum {
            account,
            total_cents,
        })
        .collect();
    for ids in walk.suspects.chunks(chunk.max(1)) {
        each(read_suspects(&conn, ids)?);
    }
    conn.execute_batch("COMMIT")?;
    Ok(AuditSnapshot {
        balances,
        ledger_sums,
        unbalanced_movements,
        pending_pay_cents,
        entries_without_payment: walk.entries_without_payment,
    })
}

/// What one walk of the payments beside their entries finds.
struct Walk {
    /// Payments whose entries or refund may disagree with them, in id order.
    suspects: Vec<String>,
    /// Every entry that names a payment (one or not), summed by account.
    sums_by_account: HashMap<String, i64>,
    /// The payment ids named by entries that no payment has, in order.
    entries_without_payment: Vec<String>,
}

/// A payment as the walk reads it: what its entries are compared with. An
/// action or status Tally never writes is `None`, and says nothing moved.
struct WalkedPayment {
    id: String,
    action: Option<PaymentAction>,
    status: Option<PaymentStatus>,
    actor: Option<String>,
    target: Option<String>,
    amount: i64,
    refund_payment_id: Option<String>,
}

/// Its entries, net by the accounts they should be on.
#[derive(Default)]
struct Nets {
    actor: i64,
    target: i64,
    held: i64,
    /// Entries on any other account: Tally never writes one.
    others: i64,
}

fn walk_payments_and_entries(conn: &Connection) -> rusqlite::Result<Walk> {
    let mut payments = conn.prepare(
        "SELECT id, action, status, actor_id, target_user_id, amount_cents, refund_payment_id \
         FROM payments WHERE kind = 'payment' ORDER BY id",
    )?;
    let mut entries = conn.prepare(
        "SELECT payment_id, account, amount_cents FROM ledger_entries \
         WHERE payment_id IS NOT NULL ORDER BY payment_id",
    )?;
    let mut refund =
        conn.prepare("SELECT amount_cents, target_user_id FROM payments WHERE id = ?1")?;
    let mut walk = Walk {
        suspects: Vec::new(),
        sums_by_account: HashMap::new(),
        entries_without_payment: Vec::new(),
    };
    let mut payment_rows = payments.query([])?;
    let mut entry_rows = entries.query([])?;
    let mut entry = entry_rows.next()?;
    while let Some(row) = payment_rows.next()? {
        let payment = WalkedPayment {
            id: row.get(0)?,
            action: PaymentAction::from_stored(row.get_ref(1)?.as_str()?),
            status: PaymentStatus::from_stored(row.get_ref(2)?.as_str()?),
            actor: row.get(3)?,
            target: row.get(4)?,
            amount: row.get(5)?,
            refund_payment_id: row.get(6)?,
        };
        let mut nets = Nets::default();
        while let Some(current) = entry {
            let payment_id = current.get_ref(0)?.as_str()?;
            if payment_id > payment.id.as_str() {
                break;
            }
            let account = current.get_ref(1)?.as_str()?;
            let cents: i64 = current.get(2)?;
            add_to_account(&mut walk.sums_by_account, account, cents);
            if payment_id == payment.id {
                nets.add(&payment, account, cents);
            } else {
                note_without_payment(&mut walk.entries_without_payment, payment_id);
            }
            entry = entry_rows.next()?;
        }
        let refund_bad = match &payment.refund_payment_id {
            None => payment.returned(),
            Some(refund_id) => match refund
                .query_row([refund_id], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
                })
                .optional()?
            {
                Some((amount, target)) => {
                    !(payment.returned() && amount == payment.amount && target == payment.actor)
                }
                None => payment.returned(),
            },
        };
        if refund_bad || nets.differ_from(&payment) {
            walk.suspects.push(payment.id);
        }
    }
    // Entries past the last payment name none.
    while let Some(current) = entry {
        let payment_id = current.get_ref(0)?.as_str()?;
        let account = current.get_ref(1)?.as_str()?;
        add_to_account(&mut walk.sums_by_account, account, current.get(2)?);
        note_without_payment(&mut walk.entries_without_payment, payment_id);
        entry = entry_rows.next()?;
    }
    Ok(walk)
}

/// Adds `cents` to `account`'s sum, making the key only for an account not yet
/// summed (a few hundred thousand at most, against millions of entries).
fn add_to_account(sums: &mut HashMap<String, i64>, account: &str, cents: i64) {
    match sums.get_mut(account) {
        Some(sum) => *sum += cents,
        None => {
            sums.insert(account.to_owned(), cents);
        }
    }
}

/// The entries come in payment id order, so each missing payment is noted once.
fn note_without_payment(noted: &mut Vec<String>, payment_id: &str) {
    if noted.last().map(String::as_str) != Some(payment_id) {
        noted.push(payment_id.to_owned());
    }
}

impl WalkedPayment {
    /// What its action and status say it moved, net (the ledger's rule).
    fn flow(&self) -> Option<(Party, Party)> {
        net_flow(self.action?, self.status?)
    }

    fn parties(&self) -> Parties<'_> {
        Parties {
            actor: self.actor.as_deref(),
            target: self.target.as_deref(),
        }
    }

    /// A pay that came back: it must have its refund.
    fn returned(&self) -> bool {
        matches!((self.action, self.status), (Some(action), Some(status)) if is_returned(action, status))
    }

    /// The account its action and status say the money left, if any.
    fn debited(&self) -> Option<&str> {
        self.parties().account(self.flow()?.0)
    }

    /// The account they say the money reached, if any.
    fn credited(&self) -> Option<&str> {
        self.parties().account(self.flow()?.1)
    }

    /// What its entries must net on `account`: minus the amount if debited,
    /// plus it if credited.
    fn expected_on(&self, account: &str) -> i64 {
        let mut net = 0;
        if self.debited() == Some(account) {
            net -= self.amount;
        }
        if self.credited() == Some(account) {
            net += self.amount;
        }
        net
    }
}

impl Nets {
    /// Counts one of the payment's entries. A target that is also the actor
    /// is counted as the actor.
    fn add(&mut self, payment: &WalkedPayment, account: &str, cents: i64) {
        let on_actor = payment.actor.as_deref() == Some(account);
        let on_target = payment.target.as_deref() == Some(account);
        if on_actor {
            self.actor += cents;
        } else if on_target {
            self.target += cents;
        }
        if account == accounts::HELD {
            self.held += cents;
        } else if !on_actor && !on_target {
            self.others += 1;
        }
    }

    fn differ_from(&self, payment: &WalkedPayment) -> bool {
        let actor = payment
            .actor
            .as_deref()
            .map_or(0, |a| payment.expected_on(a));
        let target = match payment.target.as_deref() {
            Some(t) if payment.actor.as_deref() != Some(t) => payment.expected_on(t),
            _ => 0,
        };
        let held = if payment.credited() == Some(accounts::HELD) {
            payment.amount
        } else {
            0
        };
        self.others != 0 || self.actor != actor || self.target != target || self.held != held
    }
}

/// The suspects `ids` with their refunds and entries, for the audit to word.
fn read_suspects(conn: &Connection, ids: &[String]) -> rusqlite::Result<AuditChunk> {
    let list = vec!["?"; ids.len()].join(", ");
    let mut payments = rows(
        conn,
        &format!(
            "SELECT p.id, p.action, p.status, p.actor_id, p.target_user_id, p.amount_cents, \
             r.amount_cents, r.target_user_id \
             FROM payments p LEFT JOIN payments r ON r.id = p.refund_payment_id \
             WHERE p.kind = 'payment' AND p.id IN ({list})"
        ),
        rusqlite::params_from_iter(ids),
        |row| {
            Ok(AuditPayment {
                id: row.get(0)?,
                action: parsed(row, 1, PaymentAction::parse)?,
                status: parsed(row, 2, PaymentStatus::parse)?,
                actor_id: row.get(3)?,
                target_user_id: row.get(4)?,
                amount_cents: row.get(5)?,
                refund_amount_cents: row.get(6)?,
                refund_target_id: row.get(7)?,
            })
        },
    )?;
    payments.sort_by(|a, b| a.id.cmp(&b.id));
    let payment_entries = rows(
        conn,
        &format!(
            "SELECT payment_id, account, amount_cents FROM ledger_entries \
             WHERE payment_id IN ({list})"
        ),
        rusqlite::params_from_iter(ids),
        from_columns!(PaymentEntrySum {
            payment_id,
            account,
            total_cents
        }),
    )?;
    Ok(AuditChunk {
        payments,
        payment_entries,
    })
}

/// Column `index` read by `parse` (an action or a status); a value Tally
/// never writes is an error, as sqlx's decoding of it is on PostgreSQL.
fn parsed<T>(row: &Row<'_>, index: usize, parse: fn(&str) -> Option<T>) -> rusqlite::Result<T> {
    let text = row.get_ref(index)?.as_str()?;
    parse(text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("not a payment action or status: {text:?}").into(),
        )
    })
}
