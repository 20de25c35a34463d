//! SQL text both databases accept (`$n` placeholders, `RETURNING`,
//! `ON CONFLICT`) that more than one query uses; the queries themselves are in
//! `queries/`.

use crate::domain::accounts::HELD;
use crate::domain::{is_returned, net_flow, Party, PaymentAction, PaymentStatus};

/// A user row's columns, in `User`'s order: a literal, so that statements can
/// `concat!` it at compile time.
macro_rules! user_columns {
    () => {
        "id, username, first_name, last_name, about, \
         profile_picture_url, email, email_verified, phone, phone_verified, password_hash, \
         verified, suspended, balance_cents, date_joined, profile_updated_at"
    };
}
pub(crate) use user_columns;

/// An app row's columns, in `App`'s order.
macro_rules! app_columns {
    () => {
        "client_id, secret_digest, name, description, redirect_url, \
         site_url, owner_id, suspended, created_at, introspect_any"
    };
}
pub(crate) use app_columns;

pub const USER_COLUMNS: &str = user_columns!();

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
/// `sum` is the backend's sum of cents as an integer (its `AUDIT_SUM`).
/// PostgreSQL runs this statement; SQLite applies the same rules in Rust, in
/// its walk of the payment index (`store/sqlite/audit.rs`), from the same
/// functions.
///
/// One row comes back: the suspects' ids as a JSON array of strings (`list` is
/// the backend's JSON array aggregate, its `AUDIT_JSON_LIST`), and how many
/// entries the pass matched to a payment. When that count is every entry that
/// names a payment, none names a missing one, and the audit need not look for
/// such entries with a second walk of the ledger.
pub fn audit_suspects(sum: &str, list: &str) -> String {
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
