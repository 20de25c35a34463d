//! The audit's snapshot on PostgreSQL: every sum taken in SQL over the
//! covering indexes, and the suspects' pass (`audit_suspects`) in one
//! statement; only the suspects are read back. SQLite reads its snapshot its
//! own way (`sqlite/audit.rs`).

use super::PgStore;
use crate::domain::accounts::HELD;
use crate::domain::{is_returned, net_flow, Party, PaymentAction, PaymentStatus};
use crate::store::{AccountBalance, AuditChunk, AuditSnapshot, LedgerSum, StoreError};
use sqlx::Postgres;

/// The audit's snapshot reads every sum in the order of an index that holds
/// all it needs: the covering indexes on ledger_entries, and the payments'
/// primary key walked beside the entries' payment index (merge joins). The
/// planner would rather hash or sort millions of rows, which takes several
/// times as long and can spill to disk; work_mem is room for what must still
/// be sorted. No JIT, whose compiling costs seconds and saves none. No
/// parallel workers: the scans cost little per row, so splitting them saves
/// little, and on a busy or one-core server the workers only add their
/// start-up and the merging of their partial results. Measurements:
/// docs/decisions/011-audit-at-scale.md.
const AUDIT_SETTINGS: &[&str] = &[
    "SET LOCAL work_mem = '64MB'",
    "SET LOCAL jit = off",
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL enable_hashagg = off",
    "SET LOCAL enable_hashjoin = off",
    "SET LOCAL enable_sort = off",
];
/// The audit's sum of cents: `sum_cents` (a database aggregate) adds
/// bigints into a bigint; the built-in `sum` answers numeric, whose making and
/// comparing, once per payment and per movement, cost about a second of the
/// audit at a million payments.
const AUDIT_SUM: &str = "sum_cents";

/// The audit's list of suspect payment ids, as a JSON array.
const AUDIT_JSON_LIST: &str = "json_agg";
/// Entries that name no payment, looked for only when the suspects' pass
/// matched fewer entries than name a payment: the payment index and the
/// payments' primary key walked side by side (a merge anti-join, see
/// `AUDIT_SETTINGS`), then the few left made distinct. Distinct first, PostgreSQL would hash or
/// sort the millions of entries, then look up each payment.
const AUDIT_ENTRIES_WITHOUT_PAYMENT: &str = "\
    SELECT DISTINCT e.payment_id FROM ledger_entries e \
    WHERE e.payment_id IS NOT NULL AND NOT EXISTS ( \
      SELECT 1 FROM payments p WHERE p.id = e.payment_id AND p.kind = 'payment')";

impl PgStore {
    /// Begins a read transaction that sees one consistent snapshot.
    async fn snapshot(&self) -> Result<sqlx::Transaction<'static, Postgres>, StoreError> {
        Ok(self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?)
    }

    /// See `Backend::read_audit_snapshot`.
    pub(super) async fn audit_snapshot_in_sql(
        &self,
        chunk: i64,
        each: &mut (dyn FnMut(AuditChunk) + Send),
    ) -> Result<AuditSnapshot, StoreError> {
        // Every sum is taken in SQL; the covering indexes on ledger_entries
        // let each be read from an index alone.
        let mut tx = self.snapshot().await?;
        run_each(&mut tx, AUDIT_SETTINGS).await?;
        let balances = sqlx::query_as::<_, AccountBalance>(
            "SELECT id AS user_id, username, balance_cents FROM users ORDER BY id",
        )
        .fetch_all(&mut *tx)
        .await?;
        // With each account's sum, its count of entries: with the count of
        // the entries that name no payment (from an index that holds only
        // them), it tells how many name one, without a walk of the ledger.
        let by_account = sqlx::query_as::<_, (String, i64, i64)>(&format!(
            "SELECT account, {AUDIT_SUM}(amount_cents), COUNT(*) \
             FROM ledger_entries GROUP BY account ORDER BY account"
        ))
        .fetch_all(&mut *tx)
        .await?;
        let entries: i64 = by_account.iter().map(|(_, _, count)| count).sum();
        let ledger_sums: Vec<LedgerSum> = by_account
            .into_iter()
            .map(|(account, total_cents, _)| LedgerSum {
                account,
                total_cents,
            })
            .collect();
        let unbalanced_movements = sqlx::query_as::<_, LedgerSum>(&format!(
            "SELECT movement_id AS account, {AUDIT_SUM}(amount_cents) AS total_cents \
             FROM ledger_entries GROUP BY movement_id HAVING {AUDIT_SUM}(amount_cents) <> 0"
        ))
        .fetch_all(&mut *tx)
        .await?;
        let pending_pay_cents: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(amount_cents), 0) AS BIGINT) FROM payments \
             WHERE kind = 'payment' AND action = 'pay' AND status = 'pending'",
        )
        .fetch_one(&mut *tx)
        .await?;
        // Each payment's entries, net by account, against what its action
        // and status say moved, and its refund against the refund rule, in
        // one pass in SQL: only the ids of the payments that disagree come
        // back, to be read again below and worded by the audit.
        let (suspects, matched_entries): (String, i64) =
            sqlx::query_as(&audit_suspects(AUDIT_SUM, AUDIT_JSON_LIST))
                .fetch_one(&mut *tx)
                .await?;
        let mut suspects: Vec<String> = serde_json::from_str(&suspects).map_err(|e| {
            StoreError::Unexpected(anyhow::anyhow!("the audit's suspect list: {e}"))
        })?;
        // Entries that name a missing payment: only when the pass above
        // matched fewer entries than name one are they looked for, with a
        // second walk of the payment index.
        let entries_naming_no_payment: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM ledger_entries WHERE payment_id IS NULL")
                .fetch_one(&mut *tx)
                .await?;
        let entries_naming_payment = entries - entries_naming_no_payment;
        let entries_without_payment: Vec<String> = if matched_entries == entries_naming_payment {
            Vec::new()
        } else {
            sqlx::query_scalar(AUDIT_ENTRIES_WITHOUT_PAYMENT)
                .fetch_all(&mut *tx)
                .await?
        };
        suspects.sort();
        for ids in suspects.chunks(chunk.max(1) as usize) {
            let mut payments_query = sqlx::QueryBuilder::<Postgres>::new(
                "SELECT p.id, p.action, p.status, p.actor_id, p.target_user_id, \
                 p.amount_cents, r.amount_cents AS refund_amount_cents, \
                 r.target_user_id AS refund_target_id \
                 FROM payments p LEFT JOIN payments r ON r.id = p.refund_payment_id \
                 WHERE p.kind = 'payment' AND p.id IN (",
            );
            let mut entries_query = sqlx::QueryBuilder::<Postgres>::new(
                "SELECT payment_id, account, amount_cents AS total_cents \
                 FROM ledger_entries WHERE payment_id IN (",
            );
            for query in [&mut payments_query, &mut entries_query] {
                let mut list = query.separated(", ");
                for id in ids {
                    list.push_bind(id.clone());
                }
                query.push(")");
            }
            let mut payments = payments_query
                .build_query_as::<crate::store::AuditPayment>()
                .fetch_all(&mut *tx)
                .await?;
            payments.sort_by(|a, b| a.id.cmp(&b.id));
            let payment_entries = entries_query
                .build_query_as::<crate::store::PaymentEntrySum>()
                .fetch_all(&mut *tx)
                .await?;
            each(crate::store::AuditChunk {
                payments,
                payment_entries,
            });
        }
        tx.commit().await?;
        Ok(AuditSnapshot {
            balances,
            ledger_sums,
            unbalanced_movements,
            pending_pay_cents,
            entries_without_payment,
        })
    }
}

/// Runs each statement in turn (session settings).
async fn run_each(
    tx: &mut sqlx::Transaction<'static, Postgres>,
    statements: &[&str],
) -> Result<(), StoreError> {
    for statement in statements {
        sqlx::query(statement).execute(&mut **tx).await?;
    }
    Ok(())
}

/// The ids of the payments (not refunds) the audit must look at: those whose
/// refund breaks the refund rule (a returned pay has one, of its amount, to its
/// actor; nothing else has one), and those whose ledger entries, net by account,
/// may differ from what their action and status say moved (the audit's
/// `expected_flows`), both written here from the ledger's rule (`net_flow`
/// and `is_returned` over every action and status). Each payment is read with its entries through the
/// payment index: the net of its actor, its target and `@held` must be the
/// expected one, and an entry on any other account (never written by Tally)
/// makes the payment a suspect, which the audit then checks in full. Each entry
/// is compared with as few accounts as that takes: they are most of the work.
/// `sum` is the sum of cents as an integer (`AUDIT_SUM`). SQLite applies the
/// same rules in Rust, in its walk of the payment index
/// (`store/sqlite/audit.rs`), from the same functions.
///
/// One row comes back: the suspects' ids as a JSON array of strings (`list` is
/// the JSON array aggregate, `AUDIT_JSON_LIST`), and how many
/// entries the pass matched to a payment. When that count is every entry that
/// names a payment, none names a missing one, and the audit need not look for
/// such entries with a second walk of the ledger.
fn audit_suspects(sum: &str, list: &str) -> String {
    // A pay that came back (1) must have its refund; any other payment must
    // have none. The refund is read only for the few payments that name one:
    // joined to every payment, it cost a probe of the primary key per payment
    // and two aggregates per entry.
    let returned = format!("CASE WHEN {} THEN 1 ELSE 0 END", states(is_returned));
    let (debited, credited) = (flow_case(|(from, _)| from), flow_case(|(_, to)| to));
    format!(
        "SELECT COALESCE(CAST({list}(id) FILTER (WHERE refund_bad = 1 OR other_entries <> 0 \
          OR s_actor <> CASE WHEN actor IS NULL THEN 0 \
               ELSE CASE WHEN debited = actor THEN -amount ELSE 0 END \
                  + CASE WHEN credited = actor THEN amount ELSE 0 END END \
          OR s_target <> CASE WHEN target IS NULL OR target IS NOT DISTINCT FROM actor THEN 0 \
               ELSE CASE WHEN debited = target THEN -amount ELSE 0 END \
                  + CASE WHEN credited = target THEN amount ELSE 0 END END \
          OR s_held <> CASE WHEN credited = '{HELD}' THEN amount ELSE 0 END \
          ) AS TEXT), '[]') AS suspects, \
          COALESCE({sum}(matched_entries), 0) AS matched_entries \
        FROM ( \
          SELECT p.id, p.actor_id AS actor, p.target_user_id AS target, \
            p.amount_cents AS amount, \
            {debited} AS debited, \
            {credited} AS credited, \
            CASE WHEN p.refund_payment_id IS NULL THEN {returned} \
                 ELSE COALESCE(( \
                   SELECT CASE WHEN {returned} = 1 AND r.amount_cents = p.amount_cents \
                                 AND r.target_user_id IS NOT DISTINCT FROM p.actor_id \
                               THEN 0 ELSE 1 END \
                   FROM payments r WHERE r.id = p.refund_payment_id), {returned}) END \
              AS refund_bad, \
            {sum}(CASE WHEN e.account = p.actor_id THEN e.amount_cents ELSE 0 END) AS s_actor, \
            {sum}(CASE WHEN e.account = p.target_user_id AND e.account IS DISTINCT FROM p.actor_id \
                       THEN e.amount_cents ELSE 0 END) AS s_target, \
            {sum}(CASE WHEN e.account = '{HELD}' THEN e.amount_cents ELSE 0 END) AS s_held, \
            {sum}(CASE WHEN e.account = p.actor_id OR e.account = p.target_user_id \
                        OR e.account = '{HELD}' OR e.account IS NULL THEN 0 ELSE 1 END) \
              AS other_entries, \
            COUNT(e.payment_id) AS matched_entries \
          FROM payments p \
          LEFT JOIN ledger_entries e ON e.payment_id = p.id \
          WHERE p.kind = 'payment' \
          GROUP BY p.id \
        ) g"
    )
}

/// A payment's account in a row of `payments p`, for `party`.
fn column(party: Party) -> String {
    match party {
        Party::Actor => "p.actor_id".to_owned(),
        Party::Target => "p.target_user_id".to_owned(),
        Party::Held => format!("'{HELD}'"),
    }
}

/// `CASE WHEN <action and status> THEN <account> … END`: for each action and
/// status that moved money (`net_flow`), the account `pick` takes of its flow
/// (the one it left or the one it reached); NULL for the others.
fn flow_case(pick: fn((Party, Party)) -> Party) -> String {
    let mut case = String::from("CASE");
    for action in PaymentAction::ALL {
        for status in PaymentStatus::ALL {
            if let Some(flow) = net_flow(action, status) {
                case.push_str(&format!(
                    " WHEN p.action = '{}' AND p.status = '{}' THEN {}",
                    action.as_str(),
                    status.as_str(),
                    column(pick(flow))
                ));
            }
        }
    }
    case.push_str(" END");
    case
}

/// A condition on `payments p` that holds for each action and status `rule`
/// holds for (FALSE for none).
fn states(rule: fn(PaymentAction, PaymentStatus) -> bool) -> String {
    let mut any = Vec::new();
    for action in PaymentAction::ALL {
        for status in PaymentStatus::ALL {
            if rule(action, status) {
                any.push(format!(
                    "(p.action = '{}' AND p.status = '{}')",
                    action.as_str(),
                    status.as_str()
                ));
            }
        }
    }
    if any.is_empty() {
        "FALSE".to_owned()
    } else {
        format!("({})", any.join(" OR "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The audit's SQL says what the ledger's rule says, state by state.
    #[test]
    fn the_audits_expected_accounts_are_written_from_the_ledgers_rule() {
        let when = |action: &str, status: &str, then: &str| {
            format!(" WHEN p.action = '{action}' AND p.status = '{status}' THEN {then}")
        };
        let case = |then: [&str; 3]| {
            format!(
                "CASE{}{}{} END",
                when("pay", "pending", then[0]),
                when("pay", "settled", then[1]),
                when("charge", "settled", then[2]),
            )
        };
        let debited = ["p.actor_id", "p.actor_id", "p.target_user_id"];
        assert_eq!(flow_case(|(from, _)| from), case(debited));
        let credited = ["'@held'", "p.target_user_id", "p.actor_id"];
        assert_eq!(flow_case(|(_, to)| to), case(credited));
        assert_eq!(
            states(is_returned),
            "((p.action = 'pay' AND p.status = 'failed') \
             OR (p.action = 'pay' AND p.status = 'expired') \
             OR (p.action = 'pay' AND p.status = 'cancelled'))"
        );
        assert_eq!(states(|_, _| false), "FALSE");
    }
}
