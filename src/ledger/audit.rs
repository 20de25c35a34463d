//! The ledger check behind `tally admin audit`: every balance must equal the sum
//! of its ledger entries, no balance may be negative, every movement and the
//! whole ledger must sum to zero, `@held` must hold exactly the amounts of the
//! pending pays, and each payment's entries must be what its action and state
//! say moved (a settled charge: target to actor; a returned pay: back to the
//! actor, with its refund; …).

use crate::domain::{accounts, is_returned, net_flow, Money, Parties};
use crate::store::{AuditChunk, AuditPayment, Store, StoreError};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Serialize)]
pub struct AuditReport {
    pub ok: bool,
    /// Number of user accounts checked.
    pub accounts: usize,
    pub total_balance: Money,
    pub discrepancies: Vec<Discrepancy>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Discrepancy {
    /// A stored balance differs from the sum of the account's ledger entries.
    BalanceMismatch {
        account: String,
        username: String,
        balance: Money,
        ledger: Money,
    },
    NegativeBalance {
        account: String,
        username: String,
        balance: Money,
    },
    /// One movement's entries do not sum to zero: money was created or lost.
    UnbalancedMovement { movement: String, sum: Money },
    /// The money held for pending pays differs from the sum of their amounts.
    HeldMismatch { held: Money, pending_pays: Money },
    /// Ledger entries for an account that is neither a user nor a system account.
    UnknownAccount { account: String, ledger: Money },
    /// A payment's entries, net by account, differ from what its action and
    /// status say moved.
    PaymentMismatch {
        payment: String,
        expected: BTreeMap<String, Money>,
        ledger: BTreeMap<String, Money>,
    },
    /// A returned pay without its refund, or a refund that does not match.
    RefundMismatch { payment: String, problem: String },
    /// Ledger entries that name a payment that does not exist.
    EntriesWithoutPayment { payment: String },
}

/// Payments the audit reads again at a time, of those SQL finds may disagree
/// with their entries: its memory is bounded by this, not by the ledger.
pub const PAYMENTS_PER_CHUNK: i64 = 10_000;

pub async fn run(store: &dyn Store) -> Result<AuditReport, StoreError> {
    run_in_chunks(store, PAYMENTS_PER_CHUNK).await
}

/// `run`, reading `payments_per_chunk` payments at a time.
#[tracing::instrument(skip_all)]
pub async fn run_in_chunks(
    store: &dyn Store,
    payments_per_chunk: i64,
) -> Result<AuditReport, StoreError> {
    let mut payment_discrepancies = Vec::new();
    let snapshot = store
        .audit_snapshot(payments_per_chunk, &mut |chunk| {
            reconcile_payments(chunk, &mut payment_discrepancies)
        })
        .await?;
    let mut ledger: HashMap<String, i64> = snapshot
        .ledger_sums
        .into_iter()
        .map(|s| (s.account, s.total_cents))
        .collect();

    let mut discrepancies = Vec::new();
    let mut total = 0i64;
    for account in &snapshot.balances {
        total += account.balance_cents;
        let entries = ledger.remove(&account.user_id).unwrap_or(0);
        if entries != account.balance_cents {
            discrepancies.push(Discrepancy::BalanceMismatch {
                account: account.user_id.clone(),
                username: account.username.clone(),
                balance: Money::from_cents(account.balance_cents),
                ledger: Money::from_cents(entries),
            });
        }
        if account.balance_cents < 0 {
            discrepancies.push(Discrepancy::NegativeBalance {
                account: account.user_id.clone(),
                username: account.username.clone(),
                balance: Money::from_cents(account.balance_cents),
            });
        }
    }
    for movement in snapshot.unbalanced_movements {
        discrepancies.push(Discrepancy::UnbalancedMovement {
            movement: movement.account,
            sum: Money::from_cents(movement.total_cents),
        });
    }
    ledger.remove(accounts::EXTERNAL);
    let held = ledger.remove(accounts::HELD).unwrap_or(0);
    if held != snapshot.pending_pay_cents {
        discrepancies.push(Discrepancy::HeldMismatch {
            held: Money::from_cents(held),
            pending_pays: Money::from_cents(snapshot.pending_pay_cents),
        });
    }
    let mut unknown: Vec<_> = ledger.into_iter().collect();
    unknown.sort();
    for (account, cents) in unknown {
        discrepancies.push(Discrepancy::UnknownAccount {
            account,
            ledger: Money::from_cents(cents),
        });
    }

    discrepancies.append(&mut payment_discrepancies);
    let mut orphans = snapshot.entries_without_payment;
    orphans.sort();
    discrepancies.extend(
        orphans
            .into_iter()
            .map(|payment| Discrepancy::EntriesWithoutPayment { payment }),
    );

    Ok(AuditReport {
        ok: discrepancies.is_empty(),
        accounts: snapshot.balances.len(),
        total_balance: Money::from_cents(total),
        discrepancies,
    })
}

/// What a payment in its state must have moved, net by account (zeros left
/// out): the ledger's rule, `net_flow` of its action and status, between its
/// parties.
fn expected_flows(p: &AuditPayment) -> BTreeMap<String, i64> {
    let mut flows = BTreeMap::new();
    let parties = Parties {
        actor: p.actor_id.as_deref(),
        target: p.target_user_id.as_deref(),
    };
    if let Some((from, to)) = net_flow(p.action, p.status) {
        for (party, cents) in [(from, -p.amount_cents), (to, p.amount_cents)] {
            if let Some(account) = parties.account(party) {
                *flows.entry(account.to_owned()).or_insert(0) += cents;
            }
        }
    }
    flows.retain(|_, cents| *cents != 0);
    flows
}

/// Checks one chunk of payments against their entries, and words what differs.
fn reconcile_payments(chunk: AuditChunk, discrepancies: &mut Vec<Discrepancy>) {
    let AuditChunk {
        payments,
        payment_entries,
    } = chunk;
    // Net by account (zeros left out), as `expected_flows` states it.
    let mut actual: HashMap<String, BTreeMap<String, i64>> = HashMap::new();
    for entry in payment_entries {
        *actual
            .entry(entry.payment_id)
            .or_default()
            .entry(entry.account)
            .or_insert(0) += entry.total_cents;
    }
    for flows in actual.values_mut() {
        flows.retain(|_, cents| *cents != 0);
    }
    let money = |flows: &BTreeMap<String, i64>| {
        flows
            .iter()
            .map(|(account, cents)| (account.clone(), Money::from_cents(*cents)))
            .collect()
    };
    for payment in &payments {
        let expected = expected_flows(payment);
        let ledger = actual.remove(&payment.id).unwrap_or_default();
        if expected != ledger {
            discrepancies.push(Discrepancy::PaymentMismatch {
                payment: payment.id.clone(),
                expected: money(&expected),
                ledger: money(&ledger),
            });
        }
        let returned = is_returned(payment.action, payment.status);
        let problem = match (returned, payment.refund_amount_cents) {
            (true, None) => Some("a returned pay has no refund".to_owned()),
            (false, Some(_)) => Some(format!(
                "a {} {} has a refund",
                payment.status,
                payment.action.as_str()
            )),
            (true, Some(cents)) if cents != payment.amount_cents => {
                Some("the refund's amount differs from the pay's".to_owned())
            }
            (true, Some(_)) if payment.refund_target_id != payment.actor_id => {
                Some("the refund does not go to the pay's actor".to_owned())
            }
            _ => None,
        };
        if let Some(problem) = problem {
            discrepancies.push(Discrepancy::RefundMismatch {
                payment: payment.id.clone(),
                problem,
            });
        }
    }
}
