//! `/payments`: make, list, show and update payments and charges. Handlers parse
//! into domain types, `ledger::payments` decides, the store commits.

use super::params::{ParamValue, Params};
use super::principal::Principal;
use super::query::{self, given};
use super::render::{self, Page, Pagination, PaymentView, Related};
use super::ApiError;
use crate::domain::{
    format_datetime_exact, now_micros, Amount, AmountError, Audience, Email, Medium, Money, Note,
    PaymentAction, PaymentStatus, Phone, Scope,
};
use crate::ledger::payments::{
    self as rules, CreateError, PaymentRequest, TargetAddress, Update, UpdateError,
};
use crate::state::AppState;
use crate::store::{Payment, PaymentFilter};
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use futures_util::future::LocalBoxFuture;
use serde::Serialize;

/// The answer of POST: the payment and, with `access_balance`, the token
/// owner's balance afterwards. (PUT answers with the payment alone.)
#[derive(Serialize)]
struct Made {
    balance: Option<Money>,
    payment: PaymentView,
}

const MICROS_PER_SECOND: i64 = 1_000_000;

fn parse_amount(params: &Params) -> Result<Amount, ApiError> {
    let out_of_bounds = || ApiError::InvalidAmount(rules::AmountOutOfBounds.to_string());
    let parsed = match params.get("amount") {
        None | Some(ParamValue::Null) => return Err(ApiError::MissingParameter("amount")),
        Some(ParamValue::Text(s)) => Amount::parse(s),
        Some(ParamValue::Number(s)) => Amount::parse_json_number(s),
        Some(_) => Err(AmountError::NotANumber),
    };
    let amount = parsed.map_err(|e| match e {
        AmountError::TooLarge(_) => out_of_bounds(),
        other => ApiError::InvalidAmount(other.to_string()),
    })?;
    // The ledger checks the bound again for every medium; checking it here
    // too keeps the API's answer order (amount before note and audience).
    rules::check_amount(amount).map_err(|_| out_of_bounds())?;
    Ok(amount)
}

fn parse_target(params: &Params) -> Result<TargetAddress, ApiError> {
    let user_id = given(params, "user_id")?;
    let email = given(params, "email")?;
    let phone = given(params, "phone")?;
    match (user_id, email, phone) {
        (Some(id), None, None) => Ok(TargetAddress::UserId(id.trim().to_owned())),
        (None, Some(email), None) => Email::parse(email)
            .map(TargetAddress::Email)
            .map_err(|e| ApiError::InvalidTarget(e.to_string())),
        (None, None, Some(phone)) => Phone::parse(phone)
            .map(TargetAddress::Phone)
            .map_err(|e| ApiError::InvalidTarget(e.to_string())),
        _ => Err(ApiError::InvalidTarget(
            "give exactly one of user_id, email or phone".to_owned(),
        )),
    }
}

fn parse_note(params: &Params) -> Result<Note, ApiError> {
    match params.text("note")? {
        None => Err(ApiError::MissingParameter("note")),
        Some(text) => Note::parse(text).map_err(|e| ApiError::InvalidNote(e.to_string())),
    }
}

fn parse_audience(params: &Params) -> Result<Audience, ApiError> {
    let invalid =
        || ApiError::InvalidAudience("audience must be public, friends or private".into());
    match given(params, "audience")? {
        None => Ok(Audience::default()),
        Some(text) => Audience::parse(text).map_err(|_| invalid()),
    }
}

/// A request that moves money (POST, PUT): its token holds `make_payments`,
/// and it may carry an `Idempotency-Key`. The token is checked first (401,
/// then 403), the key after (400), whatever else the request holds.
pub struct MoneyRequest {
    principal: Principal,
    idempotency_key: Option<String>,
}

impl FromRequest for MoneyRequest {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let principal = Principal::from_request(req, payload);
        let idempotency_key = idempotency_key(req);
        Box::pin(async move {
            let principal = principal.await?;
            principal.require(Scope::MakePayments)?;
            Ok(Self {
                principal,
                idempotency_key: idempotency_key?,
            })
        })
    }
}

/// The `Idempotency-Key` header: 1 to 255 visible ASCII characters.
fn idempotency_key(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let Some(value) = req.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().unwrap_or("").trim();
    if key.is_empty() || key.len() > 255 || !key.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::InvalidRequest(
            "Idempotency-Key must be 1 to 255 visible ASCII characters".to_owned(),
        ));
    }
    Ok(Some(key.to_owned()))
}

/// The answer of POST (`data: {balance, payment}`) or PUT (`data`: the
/// payment, as the Venmo documentation has it), marked when it replays an
/// earlier request with the same `Idempotency-Key`.
fn made_answer(replayed: bool, data: impl Serialize) -> HttpResponse {
    let mut response = HttpResponse::Ok();
    if replayed {
        response.insert_header(("Idempotent-Replayed", "true"));
    }
    response.json(render::Data { data })
}

#[tracing::instrument(skip_all)]
pub async fn create(
    state: web::Data<AppState>,
    MoneyRequest {
        principal,
        idempotency_key: key,
    }: MoneyRequest,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    let request = PaymentRequest {
        target: parse_target(&params)?,
        amount: parse_amount(&params)?,
        note: parse_note(&params)?,
        audience: parse_audience(&params)?,
        medium: Medium::Api,
        origin: principal.client_id.clone(),
    };
    let made = rules::create(
        state.store.as_ref(),
        &principal.user,
        request,
        key.as_deref(),
        state.settings.settlement_delay,
        now_micros(),
    )
    .await
    .map_err(|e| match e {
        CreateError::AmountOutOfBounds(e) => ApiError::InvalidAmount(e.to_string()),
        CreateError::InvalidTarget(m) => ApiError::InvalidTarget(m),
        CreateError::InsufficientFunds => ApiError::InsufficientFunds,
        CreateError::IdempotencyConflict => ApiError::IdempotencyConflict,
        CreateError::Store(e) => e.into(),
    })?;
    let related = match made.parties {
        Some(users) => Related::of_users(users),
        None => Related::load(state.store.as_ref(), std::slice::from_ref(&made.payment)).await?,
    };
    Ok(made_answer(
        made.replayed,
        Made {
            balance: principal
                .has(Scope::AccessBalance)
                .then_some(made.actor_balance),
            payment: related.view(&made.payment),
        },
    ))
}

#[tracing::instrument(skip_all)]
pub async fn list(
    state: web::Data<AppState>,
    principal: Principal,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    principal.require_any(&[Scope::AccessProfile, Scope::AccessPaymentHistory])?;
    let limit = query::limit(&params)?;
    let action = given(&params, "action")?
        .map(|text| {
            PaymentAction::parse(text)
                .ok_or_else(|| ApiError::InvalidRequest("action must be pay or charge".into()))
        })
        .transpose()?;
    let actor_ids: Vec<String> = given(&params, "actor")?
        .map(|text| {
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if actor_ids.len() > 50 {
        return Err(ApiError::InvalidRequest(
            "actor may name at most 50 users".to_owned(),
        ));
    }
    let statuses: Vec<PaymentStatus> = given(&params, "status")?
        .map(|text| {
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    PaymentStatus::parse(s).ok_or_else(|| {
                        ApiError::InvalidRequest(format!(
                            "status '{s}' is not one of settled, pending, failed, expired, cancelled"
                        ))
                    })
                })
                .collect::<Result<_, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    // Clients see `date_created` to the second, so a whole-second `after` means
    // "a later second": polling with the last `date_created` seen never returns
    // that payment again. A fractional `after` (as `next` carries) is exact.
    let after = query::datetime(&params, "after")?.map(|at| {
        if at % MICROS_PER_SECOND == 0 {
            at + MICROS_PER_SECOND - 1
        } else {
            at
        }
    });
    let before = query::datetime(&params, "before")?;
    let before_id = given(&params, "before_id")?.map(|s| s.trim().to_owned());
    if before_id.is_some() && before.is_none() {
        return Err(ApiError::InvalidRequest(
            "before_id is only meaningful with before".to_owned(),
        ));
    }
    let mut payments = state
        .store
        .list_payments(&PaymentFilter {
            owner_id: principal.user.id.clone(),
            action,
            actor_ids: actor_ids.clone(),
            statuses: statuses.clone(),
            after,
            before: before.map(|at| (at, before_id)),
            limit: limit + 1,
        })
        .await?;
    // The next page starts strictly below the last item by (time, id), so
    // items sharing one timestamp are neither skipped nor repeated.
    let next = query::end_of_page(&mut payments, limit).map(|last| {
        let mut pairs = vec![
            ("limit", limit.to_string()),
            ("before", format_datetime_exact(last.date_created)),
            ("before_id", last.id.clone()),
        ];
        if let Some(action) = action {
            pairs.push(("action", action.as_str().to_owned()));
        }
        if !actor_ids.is_empty() {
            pairs.push(("actor", actor_ids.join(",")));
        }
        if !statuses.is_empty() {
            let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
            pairs.push(("status", names.join(",")));
        }
        if let Some(after) = after {
            pairs.push(("after", format_datetime_exact(after)));
        }
        query::page_url(&state.public_origin, "/payments", &pairs)
    });
    let related =
        Related::load_knowing(state.store.as_ref(), &payments, Some(&principal.user)).await?;
    Ok(HttpResponse::Ok().json(Page {
        data: payments.iter().map(|p| related.view(p)).collect(),
        pagination: Pagination { next },
    }))
}

fn payment_id(req: &HttpRequest) -> &str {
    req.match_info().get("payment_id").unwrap_or("")
}

/// A payment the user is a party of; anything else is 404.
async fn visible_payment(state: &AppState, user_id: &str, id: &str) -> Result<Payment, ApiError> {
    state
        .store
        .find_payments(&[id.to_owned()])
        .await?
        .into_iter()
        .find(|p| rules::is_party(p, user_id))
        .ok_or(ApiError::NotFound)
}

#[tracing::instrument(skip_all)]
pub async fn show(
    state: web::Data<AppState>,
    principal: Principal,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    principal.require_any(&[Scope::AccessProfile, Scope::AccessPaymentHistory])?;
    let payment = visible_payment(&state, &principal.user.id, payment_id(&req)).await?;
    let related = Related::load_knowing(
        state.store.as_ref(),
        std::slice::from_ref(&payment),
        Some(&principal.user),
    )
    .await?;
    Ok(render::ok(related.view(&payment)))
}

#[tracing::instrument(skip_all)]
pub async fn update(
    state: web::Data<AppState>,
    MoneyRequest {
        principal,
        idempotency_key: key,
    }: MoneyRequest,
    params: Params,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let update = Update::parse(params.required("action")?).ok_or_else(|| {
        ApiError::InvalidRequest("action must be approve, deny or cancel".to_owned())
    })?;
    let updated = rules::update(
        state.store.as_ref(),
        &principal.user,
        payment_id(&req),
        update,
        key.as_deref(),
        now_micros(),
    )
    .await
    .map_err(|e| match e {
        UpdateError::NotFound => ApiError::NotFound,
        UpdateError::InvalidState => ApiError::InvalidState,
        UpdateError::NotAllowed(m) => ApiError::ActionNotAllowed(m.to_owned()),
        UpdateError::InsufficientFunds => ApiError::InsufficientFunds,
        UpdateError::IdempotencyConflict => ApiError::IdempotencyConflict,
        UpdateError::Store(e) => e.into(),
    })?;
    let related = Related::load(state.store.as_ref(), std::slice::from_ref(&updated.payment))
        .await?
        .with_refund(updated.refund);
    Ok(made_answer(
        updated.replayed,
        related.view(&updated.payment),
    ))
}
