//! SQL text both databases accept (`$n` placeholders, `RETURNING`,
//! `ON CONFLICT`) that more than one query uses; the queries themselves are in
//! `queries/`.

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
/// `expected_flows`). Each payment is read with its entries through the
/// payment index: the net of its actor, its target and `@held` must be the
/// expected one, and an entry on any other account (never written by Tally)
/// makes the payment a suspect, which the audit then checks in full. Each entry
/// is compared with as few accounts as that takes: they are most of the work.
/// `sum` is the backend's sum of cents as an integer (its `AUDIT_SUM`).
/// PostgreSQL runs this statement; SQLite applies the same rules in Rust, in
/// its walk of the payment index (`store/sqlite/audit.rs`): a change here
/// belongs there too (the store conformance tests hold both to each rule).
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
    let returned = "CASE WHEN p.action = 'pay' \
        AND p.status IN ('failed', 'cancelled', 'expired') THEN 1 ELSE 0 END";
    format!(
        "SELECT COALESCE(CAST({list}(id) FILTER (WHERE refund_bad = 1 OR other_entries <> 0 \
          OR s_actor <> CASE WHEN actor IS NULL THEN 0 \
               ELSE CASE WHEN debited = actor THEN -amount ELSE 0 END \
                  + CASE WHEN credited = actor THEN amount ELSE 0 END END \
          OR s_target <> CASE WHEN target IS NULL OR target IS NOT DISTINCT FROM actor THEN 0 \
               ELSE CASE WHEN debited = target THEN -amount ELSE 0 END \
                  + CASE WHEN credited = target THEN amount ELSE 0 END END \
          OR s_held <> CASE WHEN credited = '@held' THEN amount ELSE 0 END \
          ) AS TEXT), '[]') AS suspects, \
          COALESCE({sum}(matched_entries), 0) AS matched_entries \
        FROM ( \
          SELECT p.id, p.actor_id AS actor, p.target_user_id AS target, \
            p.amount_cents AS amount, \
            CASE WHEN p.action = 'pay' AND p.status IN ('pending', 'settled') THEN p.actor_id \
                 WHEN p.action = 'charge' AND p.status = 'settled' THEN p.target_user_id END \
              AS debited, \
            CASE WHEN p.action = 'pay' AND p.status = 'pending' THEN '@held' \
                 WHEN p.action = 'pay' AND p.status = 'settled' THEN p.target_user_id \
                 WHEN p.action = 'charge' AND p.status = 'settled' THEN p.actor_id END \
              AS credited, \
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
            {sum}(CASE WHEN e.account = '@held' THEN e.amount_cents ELSE 0 END) AS s_held, \
            {sum}(CASE WHEN e.account = p.actor_id OR e.account = p.target_user_id \
                        OR e.account = '@held' OR e.account IS NULL THEN 0 ELSE 1 END) \
              AS other_entries, \
            COUNT(e.payment_id) AS matched_entries \
          FROM payments p \
          LEFT JOIN ledger_entries e ON e.payment_id = p.id \
          WHERE p.kind = 'payment' \
          GROUP BY p.id \
        ) g"
    )
}
