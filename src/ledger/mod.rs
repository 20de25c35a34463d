//! The money rules. Decides what moves and asks the store to commit each movement
//! atomically; knows nothing of HTTP.

pub mod audit;
pub mod payments;

pub use payments::claim;

use crate::domain::{accounts, new_id, now_micros, Amount, EntryKind, Money, Movement};
use crate::store::{Store, StoreError};

/// Money arriving from outside (a bank transfer, say) into a user's balance.
/// Returns the new balance.
#[tracing::instrument(skip_all, fields(user_id, cents = amount.cents()))]
pub async fn deposit(
    store: &dyn Store,
    user_id: &str,
    amount: Amount,
) -> Result<Money, StoreError> {
    let balance = store
        .deposit(&Movement {
            id: new_id(),
            kind: EntryKind::Deposit,
            from: accounts::EXTERNAL.to_owned(),
            to: user_id.to_owned(),
            cents: amount.cents(),
            at: now_micros(),
        })
        .await?;
    Ok(Money::from_cents(balance))
}
