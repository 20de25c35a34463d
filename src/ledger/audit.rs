//! The ledger check behind `tally admin audit`: every balance must equal the sum
//! of its ledger entries, no balance may be negative, every movement and the
//! whole ledger must sum to zero, and `@held` must hold exactly the amounts of
//! the pending pays.

use crate::domain::Money;
use crate::store::{accounts, Store, StoreError};
use serde::Serialize;
use std::collections::HashMap;

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
}

#[tracing::instrument(skip_all)]
pub async fn run(store: &dyn Store) -> Result<AuditReport, StoreError> {
    let snapshot = store.audit_snapshot().await?;
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

    Ok(AuditReport {
        ok: discrepancies.is_empty(),
        accounts: snapshot.balances.len(),
        total_balance: Money::from_cents(total),
        discrepancies,
    })
}
