//! Money from the account page: pay or request from a username, e-mail address
//! or phone number, and answer or cancel pending payments. The same ledger rules
//! as the API; these payments carry `medium: web`.

use super::forms::{refuse, sentence, FormState, PageForm, PathId};
use super::session::{self, Page, SignedIn};
use super::view::{see_other, when, PageError};
use crate::domain::{
    now_micros, Amount, Audience, Email, Medium, Money, Note, PaymentAction, PaymentStatus, Phone,
    Username,
};
use crate::ledger::payments::{self as rules, CreateError, PaymentRequest, TargetAddress, Update};
use crate::store::{Payment, PaymentFilter, Store, StoreError, User, UserKey};
use actix_web::{HttpRequest, HttpResponse};
use serde::Deserialize;
use std::collections::HashMap;

pub const PAY_FORM: &str = "pay";

/// How many of the user's latest payments the account page lists.
const RECENT: i64 = 10;

/// One line of the account page's list of payments.
pub struct PaymentRow {
    pub id: String,
    /// "You paid @bob", "@ann requests from you", …
    pub summary: String,
    pub amount: Money,
    pub note: String,
    pub status: &'static str,
    pub date: String,
    /// The user made this pending payment and may cancel it.
    pub can_cancel: bool,
    /// A pending charge to the user, who may approve or deny it.
    pub can_answer: bool,
}

/// The user's latest payments, newest first, described from their side.
pub async fn recent(store: &dyn Store, user: &User) -> Result<Vec<PaymentRow>, StoreError> {
    let payments = store
        .list_payments(&PaymentFilter {
            owner_id: user.id.clone(),
            action: None,
            actor_ids: Vec::new(),
            statuses: Vec::new(),
            after: None,
            before: None,
            limit: RECENT,
        })
        .await?;
    let ids: Vec<String> = payments
        .iter()
        .flat_map(|p| [p.actor_id.clone(), p.target_user_id.clone()])
        .flatten()
        .collect();
    let names: HashMap<String, String> = store
        .find_users(&ids)
        .await?
        .into_iter()
        .map(|u| (u.id, u.username))
        .collect();
    Ok(payments.iter().map(|p| row(p, &user.id, &names)).collect())
}

fn row(p: &Payment, me: &str, names: &HashMap<String, String>) -> PaymentRow {
    let name = |id: &Option<String>| {
        id.as_ref()
            .and_then(|id| names.get(id))
            .map(|n| format!("@{n}"))
    };
    let target = name(&p.target_user_id)
        .or_else(|| p.target_email.clone())
        .or_else(|| p.target_phone.clone())
        .unwrap_or_default();
    let actor = name(&p.actor_id).unwrap_or_default();
    let mine = p.actor_id.as_deref() == Some(me);
    let charge = p.action == PaymentAction::Charge;
    let summary = match (mine, charge) {
        (true, false) => format!("You paid {target}"),
        (true, true) => format!("You requested money from {target}"),
        (false, false) => format!("{actor} paid you"),
        (false, true) => format!("{actor} requests money from you"),
    };
    let pending = p.status == PaymentStatus::Pending;
    PaymentRow {
        id: p.id.clone(),
        summary,
        amount: Money::from_cents(p.amount_cents),
        note: p.note.clone(),
        status: p.status.as_str(),
        date: when(p.date_created),
        can_cancel: pending && mine,
        can_answer: pending && charge && !mine,
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct PayForm {
    to: String,
    amount: String,
    note: String,
    audience: String,
    /// `pay` or `request`.
    kind: String,
}

/// A username, e-mail address or US phone number, as people type them.
async fn recipient(store: &dyn Store, to: &str) -> Result<TargetAddress, String> {
    let to = to.trim();
    if to.is_empty() {
        return Err("Enter a username, e-mail address or phone number.".to_owned());
    }
    if to.contains('@') && !to.starts_with('@') {
        return Email::parse(to)
            .map(TargetAddress::Email)
            .map_err(|e| sentence(&e.to_string()));
    }
    let name = to.trim_start_matches('@');
    if Username::parse(name).is_ok() {
        if let Ok(Some(user)) = store.find_user(UserKey::Username(name)).await {
            return Ok(TargetAddress::UserId(user.id));
        }
    }
    Phone::parse(to).map(TargetAddress::Phone).map_err(|_| {
        "No one has that username, and it is not an e-mail address or US phone number.".to_owned()
    })
}

/// `POST /account/payments`: pays or requests money; the answer is the account
/// page, with the refused fields and their messages if any.
pub async fn send(
    Page { state, session }: Page,
    _: super::factors::SteppedUpPayment,
    form: PageForm<PayForm>,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let form = form.or_back(&session, PAY_FORM, "/account#pay")?;
    let store = state.store.as_ref();
    let mut refused = FormState::with_values(&[
        ("to", &form.to),
        ("amount", &form.amount),
        ("note", &form.note),
        ("audience", &form.audience),
        ("kind", &form.kind),
    ]);
    let target = recipient(store, &form.to)
        .await
        .map_err(|m| refused.error("to", m));
    let amount = Amount::parse_positive(&form.amount)
        .map_err(|e| refused.error("amount", sentence(&e.to_string())));
    let note = Note::parse(&form.note).map_err(|e| refused.error("note", sentence(&e.to_string())));
    let audience = match form.audience.trim() {
        "" => Ok(Audience::default()),
        text => {
            Audience::parse(text).map_err(|e| refused.error("audience", sentence(&e.to_string())))
        }
    };
    let request_money = match form.kind.as_str() {
        "pay" => Ok(false),
        "request" => Ok(true),
        _ => {
            refused.error("kind", "Choose to pay or to request.");
            Err(())
        }
    };
    let (Ok(target), Ok(amount), Ok(note), Ok(audience), Ok(request_money)) =
        (target, amount, note, audience, request_money)
    else {
        return Err(refuse(&session, PAY_FORM, &refused, "/account#pay"));
    };
    let payment = PaymentRequest {
        target,
        // A request is a charge: the negative amount of the API.
        amount: if request_money {
            amount.negated()
        } else {
            amount
        },
        note,
        audience,
        medium: Medium::Web,
        origin: None,
    };
    let delay = state.settings.settlement_delay;
    let made = rules::create(store, &user, payment, None, delay, now_micros()).await;
    let (field, message) = match made {
        Ok(_) => {
            session::flash(
                &session,
                if request_money {
                    "Your request is sent."
                } else {
                    "Your payment is on its way."
                },
            );
            return Ok(see_other("/account#payments"));
        }
        Err(CreateError::AmountOutOfBounds(e)) => ("amount", sentence(&e.to_string())),
        Err(CreateError::InvalidTarget(message)) => ("to", sentence(&message)),
        Err(CreateError::InsufficientFunds) => (
            "amount",
            "Your balance does not cover this payment.".to_owned(),
        ),
        Err(CreateError::IdempotencyConflict) => {
            return Err(PageError::Unexpected(anyhow::anyhow!(
                "an idempotency conflict without a key"
            )))
        }
        Err(CreateError::Store(e)) => return Err(e.into()),
    };
    refused.error(field, message);
    Err(refuse(&session, PAY_FORM, &refused, "/account#pay"))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct AnswerForm {
    action: String,
    /// The code of a step-up's confirmation page, when it sends the form again.
    second_factor: String,
}

/// `POST /account/payments/{id}`: approve, deny or cancel a pending payment.
/// Approving a request over `TALLY_STEP_UP_AMOUNT` pays it: like a pay from
/// the form, it needs a fresh second factor (SPEC §11).
pub async fn answer(
    req: HttpRequest,
    Page { state, session }: Page,
    form: PageForm<AnswerForm>,
    PathId(payment_id): PathId,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let (action, code) = form
        .into_checked()
        .map(|f| (f.action, f.second_factor))
        .unwrap_or_default();
    let Some(update) = Update::parse(&action) else {
        return Err(PageError::BadRequest(
            "The action must be approve, deny or cancel.".to_owned(),
        ));
    };
    if action == "approve" {
        let large = state
            .store
            .find_payments(std::slice::from_ref(&payment_id))
            .await?
            .first()
            .is_some_and(|p| p.amount_cents.abs() > state.settings.step_up_amount_cents);
        if large {
            let fields = vec![
                ("action".to_owned(), action.clone()),
                (super::factors::CODE_FIELD.to_owned(), code),
            ];
            super::factors::require_fresh_factor(&req, fields, super::factors::action_words(&req))
                .await?;
        }
    }
    let message = match rules::update(
        state.store.as_ref(),
        &user,
        &payment_id,
        update,
        None,
        now_micros(),
    )
    .await
    {
        Ok(updated) => match updated.payment.status {
            PaymentStatus::Settled => "The request is paid.".to_owned(),
            PaymentStatus::Failed => {
                "The request could not be paid: its sender's account is suspended.".to_owned()
            }
            _ if updated.refund.is_some() => "Cancelled; the money is back.".to_owned(),
            _ => "Cancelled.".to_owned(),
        },
        Err(error) => match error {
            rules::UpdateError::NotFound => {
                return Err(PageError::NotFound("There is no such payment.".to_owned()))
            }
            rules::UpdateError::InvalidState => "That payment is no longer pending.".to_owned(),
            rules::UpdateError::NotAllowed(why) => sentence(why),
            rules::UpdateError::InsufficientFunds => {
                "Your balance does not cover this request.".to_owned()
            }
            rules::UpdateError::Store(e) => return Err(e.into()),
            rules::UpdateError::IdempotencyConflict => {
                return Err(PageError::Unexpected(anyhow::anyhow!(
                    "an update without a key had a key conflict"
                )))
            }
        },
    };
    session::flash(&session, &message);
    Ok(see_other("/account#payments"))
}
