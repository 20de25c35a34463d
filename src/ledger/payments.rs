//! The payment state machine of SPEC §5. Each function decides what happens and
//! hands the store one change to commit atomically: a state change together with
//! the money it moves.

use crate::config::Settings;
use crate::domain::{
    micros, new_id, Amount, Audience, Email, EntryKind, Medium, Money, Movement, Note, Parties,
    PaymentAction, PaymentKind, PaymentStatus, Phone, Step, TargetType,
};
use crate::store::{
    Claimant, DuePayment, IdempotencyKey, InsertOutcome, Payment, PaymentInsert, Settlement, Store,
    StoreError, Transition, TransitionOutcome, User, UserKey,
};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// How long an Idempotency-Key replays its first answer.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The timings the deployment configures.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub settlement_delay: Duration,
    pub unclaimed_expiry: Duration,
}

impl From<&Settings> for Timing {
    fn from(settings: &Settings) -> Self {
        Self {
            settlement_delay: settings.settlement_delay,
            unclaimed_expiry: settings.unclaimed_expiry,
        }
    }
}

/// How the target of a new payment was addressed.
#[derive(Debug, Clone)]
pub enum TargetAddress {
    UserId(String),
    Email(Email),
    Phone(Phone),
}

/// A new payment or charge, parsed. A negative amount is a charge.
#[derive(Debug, Clone)]
pub struct PaymentRequest {
    pub target: TargetAddress,
    pub amount: Amount,
    pub note: Note,
    pub audience: Audience,
    pub medium: Medium,
    /// The app whose token made it (none from the pages or a personal
    /// token): the payment's webhook events reach that app (SPEC §12).
    pub origin: Option<String>,
}

impl PaymentRequest {
    /// What makes two requests "the same" for an Idempotency-Key.
    fn fingerprint(&self) -> String {
        let (kind, value) = match &self.target {
            TargetAddress::UserId(id) => ("user", id.as_str()),
            TargetAddress::Email(e) => ("email", e.as_str()),
            TargetAddress::Phone(p) => ("phone", p.as_str()),
        };
        let text = format!(
            "{kind}\0{value}\0{}\0{}\0{}\0{}",
            self.amount.cents(),
            self.note.as_str(),
            self.audience.as_str(),
            self.medium.as_str()
        );
        hex::encode(Sha256::digest(text.as_bytes()))
    }
}

#[derive(Debug)]
pub struct Made {
    pub payment: Payment,
    pub actor_balance: Money,
    /// The answer is the replay of an earlier request with the same key.
    pub replayed: bool,
    /// The payment's users (actor, target account) when they are known without
    /// reading them again.
    pub parties: Option<Vec<User>>,
}

/// Largest amount one payment may move, in absolute value (SPEC §4); the
/// smallest is one cent.
pub const MAX_PAYMENT: Money = Money::from_cents(500_000);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("amount must be between 0.01 and {MAX_PAYMENT} in absolute value")]
pub struct AmountOutOfBounds;

/// The bound of every payment, whatever makes it (the API, the account page,
/// an operator): `create` applies it, and a handler may call it first to
/// answer in its own order.
pub fn check_amount(amount: Amount) -> Result<(), AmountOutOfBounds> {
    if (1..=MAX_PAYMENT.cents()).contains(&amount.cents().abs()) {
        Ok(())
    } else {
        Err(AmountOutOfBounds)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error(transparent)]
    AmountOutOfBounds(#[from] AmountOutOfBounds),
    #[error("{0}")]
    InvalidTarget(String),
    #[error("the balance does not cover this payment")]
    InsufficientFunds,
    #[error("the Idempotency-Key was used with other parameters")]
    IdempotencyConflict,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Makes a pay (held from the actor at once) or a charge (nothing moves yet).
/// A pay to an account under a `settlement_delay` of 0 is due the moment it is
/// made: the store may settle it in the same transaction (see
/// `PaymentInsert::settle_at_once`); the answer shows it as made, pending.
#[tracing::instrument(skip_all, fields(actor = %actor.id))]
pub async fn create(
    store: &dyn Store,
    actor: &User,
    request: PaymentRequest,
    idempotency_key: Option<&str>,
    settlement_delay: Duration,
    now: i64,
) -> Result<Made, CreateError> {
    check_amount(request.amount)?;
    // An account named by id is not read here: the store checks that it
    // exists as it writes the payment (one trip on PostgreSQL) and returns it.
    let (target_type, named_target, target_user, email, phone) = match &request.target {
        TargetAddress::UserId(id) => (TargetType::User, Some(id.clone()), None, None, None),
        TargetAddress::Email(email) => {
            let (owner, unclaimed) =
                address_target(store, actor, UserKey::Email(email.as_str())).await?;
            (TargetType::Email, None, owner, unclaimed, None)
        }
        TargetAddress::Phone(phone) => {
            let (owner, unclaimed) =
                address_target(store, actor, UserKey::Phone(phone.as_str())).await?;
            (TargetType::Phone, None, owner, None, unclaimed)
        }
    };
    let target_id = named_target
        .clone()
        .or_else(|| target_user.as_ref().map(|u| u.id.clone()));
    if target_id.as_deref() == Some(actor.id.as_str()) {
        return Err(CreateError::InvalidTarget("you cannot pay yourself".into()));
    }
    let action = if request.amount.cents() > 0 {
        PaymentAction::Pay
    } else {
        PaymentAction::Charge
    };
    let to_account = target_id.is_some();
    let payment = Payment {
        id: new_id(),
        kind: PaymentKind::Payment,
        actor_id: Some(actor.id.clone()),
        target_type,
        target_user_id: target_id,
        target_email: email,
        target_phone: phone,
        action,
        amount_cents: request.amount.cents().abs(),
        note: request.note.as_str().to_owned(),
        audience: request.audience,
        status: PaymentStatus::Pending,
        medium: request.medium,
        date_created: now,
        date_completed: None,
        reached_account_at: to_account.then_some(now),
        refund_payment_id: None,
    };
    let idempotency = idempotency_key.map(|key| IdempotencyKey {
        owner_id: actor.id.clone(),
        key: key.to_owned(),
        fingerprint: request.fingerprint(),
        now,
        expired_before: now.saturating_sub(micros(IDEMPOTENCY_WINDOW)),
    });
    let due_at_once = action == PaymentAction::Pay && to_account && settlement_delay.is_zero();
    let insert = PaymentInsert {
        hold: (action == PaymentAction::Pay)
            .then(|| hold(actor, &payment))
            .flatten(),
        settle_at_once: due_at_once.then(new_id),
        payment,
        idempotency,
        check_target: named_target.is_some(),
        origin: request.origin.clone(),
    };
    match store.insert_payment(&insert).await? {
        InsertOutcome::Created {
            mut payment,
            actor_balance_cents,
            target,
        } => {
            let parties: Vec<User> = std::iter::once(actor.clone())
                .chain(target.map(|t| *t).or(target_user))
                .collect();
            // The owner was looked up before the insert; if the address was
            // verified in between, that verification's claim missed this
            // payment, so claim it now.
            let mut parties = Some(parties);
            if payment.target_user_id.is_none() {
                if let Some(owner) = verified_owner(store, &payment).await? {
                    claim(store, &owner, now).await?;
                    if let Some(fresh) = store.find_payments(&[payment.id.clone()]).await?.pop() {
                        payment = fresh;
                        parties = None;
                    }
                }
            }
            Ok(Made {
                payment,
                actor_balance: Money::from_cents(actor_balance_cents),
                replayed: false,
                parties,
            })
        }
        InsertOutcome::Replayed {
            payment,
            actor_balance_cents,
        } => Ok(Made {
            payment: as_first_answered(payment),
            actor_balance: Money::from_cents(actor_balance_cents),
            replayed: true,
            parties: None,
        }),
        InsertOutcome::NoSuchTarget => Err(CreateError::InvalidTarget(format!(
            "no user has the id {}",
            named_target.unwrap_or_default()
        ))),
        InsertOutcome::InsufficientFunds => Err(CreateError::InsufficientFunds),
        InsertOutcome::KeyConflict => Err(CreateError::IdempotencyConflict),
    }
}

/// A pay's amount going from its actor to `@held` when it is made
/// ([`Step::Hold`]); settling, failing or expiring it later moves it on from
/// there.
fn hold(actor: &User, payment: &Payment) -> Option<Movement> {
    let parties = Parties {
        actor: Some(&actor.id),
        target: None,
    };
    parties.movement(
        Step::Hold,
        new_id(),
        payment.amount_cents,
        payment.date_created,
    )
}

/// Where a new payment to an address (`UserKey::Email` or `Phone`) goes: the
/// account that has verified it, or else the address itself, where it waits to
/// be claimed. One's own address, verified or not, is no one else's to pay.
async fn address_target(
    store: &dyn Store,
    actor: &User,
    address: UserKey<'_>,
) -> Result<(Option<User>, Option<String>), CreateError> {
    let owner = verified_holder(store, address).await?;
    let (value, own) = match address {
        UserKey::Email(value) => (value, actor.email.as_deref()),
        UserKey::Phone(value) => (value, actor.phone.as_deref()),
        UserKey::Id(value) | UserKey::Username(value) => (value, None),
    };
    if own == Some(value) && owner.as_ref().is_none_or(|u| u.id == actor.id) {
        return Err(CreateError::InvalidTarget("you cannot pay yourself".into()));
    }
    let unclaimed = owner.is_none().then(|| value.to_owned());
    Ok((owner, unclaimed))
}

/// The account that holds an e-mail or phone and has verified it.
async fn verified_holder(
    store: &dyn Store,
    address: UserKey<'_>,
) -> Result<Option<User>, StoreError> {
    let holder = store.find_user(address).await?;
    Ok(holder.filter(|u| match address {
        UserKey::Email(_) => u.email_verified,
        UserKey::Phone(_) => u.phone_verified,
        UserKey::Id(_) | UserKey::Username(_) => true,
    }))
}

/// The account that has verified the address a pending payment waits on, other
/// than its actor (who never claims their own payment).
async fn verified_owner(store: &dyn Store, payment: &Payment) -> Result<Option<User>, StoreError> {
    let owner = match (&payment.target_email, &payment.target_phone) {
        (Some(email), _) => verified_holder(store, UserKey::Email(email)).await?,
        (None, Some(phone)) => verified_holder(store, UserKey::Phone(phone)).await?,
        (None, None) => None,
    };
    Ok(owner.filter(|u| payment.actor_id.as_deref() != Some(u.id.as_str())))
}

/// A payment as it was when it was made: a replay repeats the first answer.
fn as_first_answered(mut payment: Payment) -> Payment {
    payment.status = PaymentStatus::Pending;
    payment.date_completed = None;
    payment.refund_payment_id = None;
    payment
}

/// What a party asks of a pending payment (`PUT /payments/:id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    Approve,
    Deny,
    Cancel,
}

impl Update {
    /// What makes two updates "the same" for an Idempotency-Key (never the same
    /// as any new payment's).
    fn fingerprint(self, payment_id: &str) -> String {
        let text = format!("update\0{payment_id}\0{self:?}");
        hex::encode(Sha256::digest(text.as_bytes()))
    }

    pub fn parse(input: &str) -> Option<Self> {
        match input.trim().to_ascii_lowercase().as_str() {
            "approve" => Some(Self::Approve),
            "deny" => Some(Self::Deny),
            "cancel" => Some(Self::Cancel),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub struct Updated {
    pub payment: Payment,
    pub refund: Option<Payment>,
    /// The answer is the replay of an earlier request with the same key.
    pub replayed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error("no such payment")]
    NotFound,
    #[error("the payment is not pending")]
    InvalidState,
    #[error("{0}")]
    NotAllowed(&'static str),
    #[error("the balance does not cover this charge")]
    InsufficientFunds,
    #[error("the Idempotency-Key was used with other parameters")]
    IdempotencyConflict,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The first answer to an update with this key, if the key was used within the
/// window; a key first used for anything else is a conflict.
async fn replayed_update(
    store: &dyn Store,
    key: &IdempotencyKey,
) -> Result<Option<Updated>, UpdateError> {
    let Some(stored) = store.find_idempotency_key(key).await? else {
        return Ok(None);
    };
    let payment_id = match stored.payment_id {
        Some(id) if stored.fingerprint == key.fingerprint => id,
        _ => return Err(UpdateError::IdempotencyConflict),
    };
    // The update left the payment in a final state, which never changes, so
    // the payment as stored is the payment as first answered.
    let payment = store
        .find_payments(&[payment_id])
        .await?
        .pop()
        .ok_or(UpdateError::NotFound)?;
    let refund = match &payment.refund_payment_id {
        Some(id) => store.find_payments(std::slice::from_ref(id)).await?.pop(),
        None => None,
    };
    Ok(Some(Updated {
        payment,
        refund,
        replayed: true,
    }))
}

/// Approves, denies or cancels a pending payment on behalf of `user`.
#[tracing::instrument(skip_all, fields(user = %user.id, payment_id))]
pub async fn update(
    store: &dyn Store,
    user: &User,
    payment_id: &str,
    update: Update,
    idempotency_key: Option<&str>,
    now: i64,
) -> Result<Updated, UpdateError> {
    let idempotency = idempotency_key.map(|key| IdempotencyKey {
        owner_id: user.id.clone(),
        key: key.to_owned(),
        fingerprint: update.fingerprint(payment_id),
        now,
        expired_before: now.saturating_sub(micros(IDEMPOTENCY_WINDOW)),
    });
    // A retry of an update that committed finds the payment no longer
    // pending: its key answers first.
    if let Some(key) = &idempotency {
        if let Some(first) = replayed_update(store, key).await? {
            return Ok(first);
        }
    }
    let payment = store
        .find_payments(&[payment_id.to_owned()])
        .await?
        .into_iter()
        .next()
        .filter(|p| is_party(p, &user.id))
        .ok_or(UpdateError::NotFound)?;
    // A refund is settled from birth, so like any settled payment it cannot change.
    if payment.kind != PaymentKind::Payment || payment.status != PaymentStatus::Pending {
        return Err(UpdateError::InvalidState);
    }
    let is_actor = payment.actor_id.as_deref() == Some(user.id.as_str());
    let is_charge = payment.action == PaymentAction::Charge;
    let mut transition = match update {
        Update::Approve | Update::Deny if is_actor => {
            return Err(UpdateError::NotAllowed(
                "only the target of a charge may approve or deny it",
            ))
        }
        Update::Approve | Update::Deny if !is_charge => {
            return Err(UpdateError::NotAllowed(
                "a pay cannot be approved or denied; its actor may cancel it",
            ))
        }
        Update::Approve => {
            let actor_id = payment.actor_id.clone().ok_or(UpdateError::NotFound)?;
            let actor = store.find_user(UserKey::Id(&actor_id)).await?;
            if actor.is_none_or(|a| a.suspended) {
                // Like a pay to a suspended account: the charge fails and no
                // money goes to an account that cannot use it.
                base(&payment, PaymentStatus::Failed, EntryKind::Fail, now)
            } else {
                // The target (this user) pays the actor.
                let parties = Parties {
                    actor: Some(&actor_id),
                    target: Some(&user.id),
                };
                let step = Step::Charge;
                let mut t = base(&payment, PaymentStatus::Settled, step.entry_kind(), now);
                t.moves.extend(parties.step(step, payment.amount_cents));
                t
            }
        }
        Update::Deny => base(&payment, PaymentStatus::Cancelled, EntryKind::Cancel, now),
        Update::Cancel if !is_actor => {
            return Err(UpdateError::NotAllowed(
                "only the actor of a payment may cancel it",
            ))
        }
        Update::Cancel => returning(&payment, PaymentStatus::Cancelled, now),
    };
    transition.idempotency = idempotency.clone();
    match store.apply_transition(&transition).await? {
        TransitionOutcome::Applied { payment, refund } => Ok(Updated {
            payment: *payment,
            refund: refund.map(|r| *r),
            replayed: false,
        }),
        TransitionOutcome::NotPending => Err(UpdateError::InvalidState),
        TransitionOutcome::InsufficientFunds => Err(UpdateError::InsufficientFunds),
        // A request with the same key committed while this one was deciding.
        TransitionOutcome::KeyTaken => match &idempotency {
            Some(key) => replayed_update(store, key)
                .await?
                .ok_or(UpdateError::IdempotencyConflict),
            None => Err(UpdateError::IdempotencyConflict),
        },
    }
}

pub fn is_party(payment: &Payment, user_id: &str) -> bool {
    payment.actor_id.as_deref() == Some(user_id)
        || payment.target_user_id.as_deref() == Some(user_id)
}

fn base(payment: &Payment, status: PaymentStatus, entry_kind: EntryKind, now: i64) -> Transition {
    Transition {
        payment_id: payment.id.clone(),
        status,
        at: now,
        movement_id: new_id(),
        entry_kind,
        moves: Vec::new(),
        refund: None,
        skip_locked: false,
        unclaimed_only: false,
        only_if_active: None,
        idempotency: None,
    }
}

/// Ends a payment without it completing: a held pay goes back to its actor as a
/// refund ([`Step::Return`]); a charge moves nothing.
fn returning(payment: &Payment, status: PaymentStatus, now: i64) -> Transition {
    let step = Step::Return;
    let mut t = base(payment, status, step.entry_kind(), now);
    if payment.action == PaymentAction::Pay {
        let parties = Parties {
            actor: payment.actor_id.as_deref(),
            target: payment.target_user_id.as_deref(),
        };
        if let Some(back) = parties.step(step, payment.amount_cents) {
            t.moves.push(back);
            t.refund = Some(refund_of(payment, now));
        }
    }
    t
}

/// The payment that returns a held pay to its actor (SPEC §5): a settled pay of
/// the same amount whose target is the original actor. Its actor is null: the
/// money comes back from Tally's hold, never from the original target, who did
/// not receive it.
fn refund_of(payment: &Payment, now: i64) -> Payment {
    Payment {
        id: new_id(),
        kind: PaymentKind::Refund,
        actor_id: None,
        target_type: TargetType::User,
        target_user_id: payment.actor_id.clone(),
        target_email: None,
        target_phone: None,
        action: PaymentAction::Pay,
        amount_cents: payment.amount_cents,
        note: format!("Refund: {}", payment.note),
        audience: Audience::Private,
        status: PaymentStatus::Settled,
        medium: payment.medium,
        date_created: now,
        date_completed: Some(now),
        reached_account_at: None,
        refund_payment_id: None,
    }
}

/// Most payments the workers take on per round.
const WORKER_BATCH: i64 = 200;
/// Most rounds one call runs while rounds come back full, so a backlog drains
/// in one tick but a call still ends.
const WORKER_ROUNDS: usize = 25;

/// Settles, fails or expires every payment whose time has come. Safe to run on
/// many instances at once: each payment changes state exactly once. The timings
/// apply when the worker looks, so a changed setting applies to every payment.
/// Settlements, nearly all of the work, are committed a round at a time (on
/// SQLite in slices of a round), found by the store as it settles them; then
/// what is left is read: the rare failures and expiries, done one by one.
#[tracing::instrument(skip_all)]
pub async fn process_due(store: &dyn Store, timing: Timing, now: i64) -> Result<usize, StoreError> {
    let settle_by = now.saturating_sub(micros(timing.settlement_delay));
    let expire_by = now.saturating_sub(micros(timing.unclaimed_expiry));
    let mut done = settle_due(store, settle_by, now).await?;
    for _ in 0..WORKER_ROUNDS {
        let due = store
            .due_payments(settle_by, expire_by, WORKER_BATCH)
            .await?;
        let full = i64::try_from(due.len()).unwrap_or(i64::MAX) >= WORKER_BATCH;
        let moved = process_round(store, &due, now).await?;
        done += moved;
        if !full || moved == 0 {
            break;
        }
    }
    Ok(done)
}

/// Settles the pays due by `settle_by`, a round at a time while rounds come
/// back full; how many. A round that cannot be settled is left to the rounds
/// that read what is due, which settle one by one what a round cannot.
async fn settle_due(store: &dyn Store, settle_by: i64, now: i64) -> Result<usize, StoreError> {
    let mut done = 0;
    for _ in 0..WORKER_ROUNDS {
        let settled = match store.settle_due(settle_by, now, WORKER_BATCH).await {
            Ok(settled) => settled,
            Err(StoreError::Unavailable(e)) => return Err(StoreError::Unavailable(e)),
            Err(error) => {
                let cause = format!("cannot settle a round: {error}");
                if let Some(suppressed) = crate::log_throttle::admit(&cause) {
                    tracing::error!(error = ?error, suppressed, "cannot settle a round; reading what is due instead");
                }
                break;
            }
        };
        done += settled;
        if i64::try_from(settled).unwrap_or(i64::MAX) < WORKER_BATCH {
            break;
        }
    }
    Ok(done)
}

async fn process_round(
    store: &dyn Store,
    due: &[DuePayment],
    now: i64,
) -> Result<usize, StoreError> {
    let mut done = 0;
    let mut to_settle = Vec::new();
    for due in due {
        let payment = &due.payment;
        let transition = match (&payment.target_user_id, due.target_suspended) {
            // Only pays to accounts are due for settlement: together, below.
            (Some(_), Some(false)) => {
                to_settle.push(payment);
                continue;
            }
            (Some(_), _) => returning(payment, PaymentStatus::Failed, now),
            (None, _) => {
                // Verified but never claimed (a crash between verification and
                // its claim): claimed now rather than expired.
                if let Some(owner) = verified_owner(store, payment).await? {
                    claim(store, &owner, now).await?;
                    continue;
                }
                let mut t = returning(payment, PaymentStatus::Expired, now);
                t.unclaimed_only = true;
                t
            }
        };
        done += apply_due(store, transition).await?;
    }
    let settlements: Vec<Settlement> = to_settle
        .iter()
        .map(|p| Settlement {
            payment_id: p.id.clone(),
            movement_id: new_id(),
        })
        .collect();
    match store.settle_payments(&settlements, now).await {
        Ok(settled) => done += settled.len(),
        Err(StoreError::Unavailable(e)) => return Err(StoreError::Unavailable(e)),
        Err(error) => {
            // One payment that cannot be moved must not hold up the others.
            let cause = format!("cannot settle a batch: {error}");
            if let Some(suppressed) = crate::log_throttle::admit(&cause) {
                tracing::error!(error = ?error, suppressed, "cannot settle a batch; settling one by one");
            }
            for settlement in &settlements {
                done += settle_alone(store, settlement, now).await?;
            }
        }
    }
    Ok(done)
}

/// Settles one due pay by the store's one settlement (a batch of one), as a
/// batch does for each; 1 if it settled. Only an unreachable database is an
/// error, as in [`apply_due`].
async fn settle_alone(
    store: &dyn Store,
    settlement: &Settlement,
    now: i64,
) -> Result<usize, StoreError> {
    match store
        .settle_payments(std::slice::from_ref(settlement), now)
        .await
    {
        Ok(settled) => Ok(settled.len()),
        Err(StoreError::Unavailable(e)) => Err(StoreError::Unavailable(e)),
        Err(error) => {
            let cause = format!("cannot move a due payment: {error}");
            if let Some(suppressed) = crate::log_throttle::admit(&cause) {
                tracing::error!(payment_id = %settlement.payment_id, error = ?error, suppressed, "cannot move a due payment");
            }
            Ok(0)
        }
    }
}

/// Applies one due payment's transition; 1 if it moved. Only an unreachable
/// database is an error: one payment that cannot be moved must not hold up
/// those behind it.
async fn apply_due(store: &dyn Store, mut transition: Transition) -> Result<usize, StoreError> {
    transition.skip_locked = true;
    match store.apply_transition(&transition).await {
        Ok(TransitionOutcome::Applied { .. }) => return Ok(1),
        Ok(TransitionOutcome::NotPending | TransitionOutcome::KeyTaken) => {}
        Ok(TransitionOutcome::InsufficientFunds) => {
            tracing::error!(payment_id = %transition.payment_id, "held money is short");
        }
        Err(StoreError::Unavailable(e)) => return Err(StoreError::Unavailable(e)),
        Err(error) => {
            let cause = format!("cannot move a due payment: {error}");
            if let Some(suppressed) = crate::log_throttle::admit(&cause) {
                tracing::error!(payment_id = %transition.payment_id, error = ?error, suppressed, "cannot move a due payment");
            }
        }
    }
    Ok(0)
}

/// Points pending payments to the user's verified e-mail and phone at the user;
/// a claimed pay then settles once the settlement delay has passed from now.
/// Call it whenever an e-mail or phone becomes verified on an account.
#[tracing::instrument(skip_all, fields(user = %user.id))]
pub async fn claim(store: &dyn Store, user: &User, now: i64) -> Result<u64, StoreError> {
    let claimant = Claimant {
        user_id: &user.id,
        email: user.email.as_deref().filter(|_| user.email_verified),
        phone: user.phone.as_deref().filter(|_| user.phone_verified),
    };
    store.claim_payments(claimant, now).await
}
