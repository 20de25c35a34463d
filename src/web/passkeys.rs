//! The WebAuthn ceremonies as JSON endpoints under the pages' origin (SPEC
//! §11), driven by `static/passkeys.js`: each checks the `Origin` and the
//! page's CSRF token (sent as `X-CSRF-Token`), and the session where one is
//! needed. Where passkeys are not offered (an IP address in
//! `TALLY_PUBLIC_URL`) they answer 404. Removing a passkey is a page form.

use super::factors::{confirm_last_factor_removal, RemoveFactorForm, SteppedUp};
use super::forms::{PageForm, PathId};
use super::session::{self, Page, SignedIn};
use super::signin::client_ip;
use super::view::{see_other, PageError};
use crate::auth::factors;
use crate::auth::passkeys::{PasskeyError, Passkeys, MAX_NAME_BYTES};
use crate::auth::throttle::{confirm_second_factor, Attempt, Confirmation};
use crate::domain::now_micros;
use crate::state::AppState;
use crate::store::{User, UserKey};
use actix_session::Session;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;
use webauthn_rs::prelude::{PublicKeyCredential, RegisterPublicKeyCredential};

/// The session's ceremony in flight: its id, and (registration) the name.
const REGISTRATION: &str = "wa_reg";
const REGISTRATION_NAME: &str = "wa_reg_name";
const ASSERTION: &str = "wa_auth";
/// `second_factor`, `step_up` or `passwordless`.
const ASSERTION_MODE: &str = "wa_mode";

/// The JSON endpoints, registered before the pages' scope, with the page
/// headers but not the form check: they check their own way (`admit`).
pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::middleware::from_fn;
    type RouteOf = fn() -> actix_web::Route;
    let handlers: [(&str, RouteOf); 4] = [
        ("/account/passkeys/options", || {
            web::post().to(registration_options)
        }),
        ("/account/passkeys", || web::post().to(register)),
        ("/signin/passkey/options", || {
            web::post().to(assertion_options)
        }),
        ("/signin/passkey", || web::post().to(assert)),
    ];
    for (path, route) in handlers {
        let allow = crate::api::routes::allow_header(&["post"]);
        cfg.service(
            web::resource(path)
                .wrap(from_fn(super::guard::page_headers))
                .route(route())
                .default_service(web::to(move || {
                    crate::api::routes::method_not_allowed(allow.clone())
                })),
        );
    }
}

/// A refusal before the ceremony: its status and message.
enum Refusal {
    Status(StatusCode, String),
    /// Past the rate limit: 429 with `Retry-After` (SPEC §9).
    TooMany(std::time::Duration),
}

impl Refusal {
    fn response(self) -> HttpResponse {
        match self {
            Self::Status(status, message) => error(status, &message),
            Self::TooMany(wait) => HttpResponse::TooManyRequests()
                .insert_header((header::CACHE_CONTROL, "no-store"))
                .insert_header((header::RETRY_AFTER, (wait.as_secs() + 1).to_string()))
                .json(json!({ "error": "too many requests; try again later" })),
        }
    }
}

/// A JSON answer `{"error": message}` with `status`.
fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({ "error": message }))
}

fn ok(body: serde_json::Value) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(body)
}

/// What every ceremony endpoint checks first: passkeys are offered here, the
/// client IP is within the sign-in pages' rate limit, the request comes from
/// our own origin, and it carries the page's CSRF token.
fn admit<'a>(
    req: &HttpRequest,
    state: &'a AppState,
    session: &Session,
) -> Result<&'a Passkeys, Refusal> {
    let Some(passkeys) = state.passkeys.as_ref() else {
        return Err(Refusal::Status(
            StatusCode::NOT_FOUND,
            "passkeys are not offered here".to_owned(),
        ));
    };
    if let Err(wait) = state.rate_limits.check_oauth(client_ip(req)) {
        return Err(Refusal::TooMany(wait));
    }
    let presented = req
        .headers()
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok());
    if let Err(refused) = session::check_form(req, state, session, presented) {
        return Err(Refusal::Status(StatusCode::FORBIDDEN, refused.to_string()));
    }
    Ok(passkeys)
}

fn answer(result: Result<HttpResponse, PasskeyError>) -> Result<HttpResponse, PageError> {
    match result {
        Ok(response) => Ok(response),
        Err(PasskeyError::NoCeremony) => Ok(error(
            StatusCode::BAD_REQUEST,
            "the passkey request has expired; try again",
        )),
        Err(PasskeyError::Refused) => Ok(error(
            StatusCode::UNAUTHORIZED,
            "the passkey could not be verified",
        )),
        Err(PasskeyError::Taken) => Ok(error(
            StatusCode::BAD_REQUEST,
            "this passkey is already registered",
        )),
        Err(PasskeyError::Store(e)) => Err(e.into()),
        Err(PasskeyError::Unexpected(e)) => Err(PageError::Unexpected(e)),
    }
}

/// What the ceremonies of a signed-in user's new passkey check first:
/// `admit`, then a signed-in user, then the body they read (`Err`: the answer
/// that refuses).
async fn admit_signed_in<'a, T: serde::de::DeserializeOwned>(
    req: &HttpRequest,
    state: &'a AppState,
    session: &Session,
    body: &[u8],
) -> Result<Result<(&'a Passkeys, User, T), HttpResponse>, PageError> {
    let passkeys = match admit(req, state, session) {
        Ok(passkeys) => passkeys,
        Err(refused) => return Ok(Err(refused.response())),
    };
    let Some(user) = session::current_user(state, session).await? else {
        return Ok(Err(error(StatusCode::UNAUTHORIZED, "sign in first")));
    };
    Ok(parse(body)
        .map(|read| (passkeys, user, read))
        .map_err(Refusal::response))
}

/// Keeps a ceremony's part in the session until its second request.
fn keep_in_session(
    session: &Session,
    key: &str,
    value: impl serde::Serialize,
) -> Result<(), anyhow::Error> {
    session
        .insert(key, value)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        Refusal::Status(
            StatusCode::BAD_REQUEST,
            format!("the request body is not what this endpoint reads: {e}"),
        )
    })
}

#[derive(Deserialize)]
struct NewPasskey {
    name: String,
}

/// `POST /account/passkeys/options` with `{"name"}`: the creation options.
/// Adding a passkey is a change of factors: it needs step-up like the others
/// (answered 401 here; the page's script then reloads, which asks).
async fn registration_options(
    req: HttpRequest,
    Page { state, session }: Page,
    body: web::Bytes,
) -> Result<HttpResponse, PageError> {
    let (passkeys, user, new) =
        match admit_signed_in::<NewPasskey>(&req, &state, &session, &body).await? {
            Ok(admitted) => admitted,
            Err(refused) => return Ok(refused),
        };
    let name = new.name.trim();
    let name = if name.is_empty() { "Passkey" } else { name };
    if name.len() > MAX_NAME_BYTES
        || crate::domain::has_forbidden_control(name, crate::domain::Lines::Single)
    {
        return Ok(error(
            StatusCode::BAD_REQUEST,
            &format!("the name must be at most {MAX_NAME_BYTES} bytes, without control characters"),
        ));
    }
    let factors = state.store.factors(&user.id).await?;
    if factors.any() && !super::factors::fresh(&state, &session) {
        return Ok(error(
            StatusCode::UNAUTHORIZED,
            "confirm with a second factor first (step-up)",
        ));
    }
    let display = crate::accounts::display_name(&user);
    answer(
        async {
            let (options, id) = passkeys
                .start_registration(
                    state.store.as_ref(),
                    &user.id,
                    &user.username,
                    &display,
                    &factors.passkeys,
                )
                .await?;
            keep_in_session(&session, REGISTRATION, id)?;
            keep_in_session(&session, REGISTRATION_NAME, name)?;
            Ok(ok(options))
        }
        .await,
    )
}

/// `POST /account/passkeys` with the new credential (`toJSON()`): stores it;
/// `{"id","name"}`, plus `recovery_codes` when it is the first factor.
async fn register(
    req: HttpRequest,
    Page { state, session }: Page,
    body: web::Bytes,
) -> Result<HttpResponse, PageError> {
    let (passkeys, user, credential) = match admit_signed_in::<RegisterPublicKeyCredential>(
        &req, &state, &session, &body,
    )
    .await?
    {
        Ok(admitted) => admitted,
        Err(refused) => return Ok(refused),
    };
    let ceremony = session
        .remove_as::<String>(REGISTRATION)
        .and_then(Result::ok);
    let name = session
        .remove_as::<String>(REGISTRATION_NAME)
        .and_then(Result::ok)
        .unwrap_or_else(|| "Passkey".to_owned());
    let Some(ceremony) = ceremony else {
        return answer(Err(PasskeyError::NoCeremony));
    };
    let store = state.store.as_ref();
    answer(
        async {
            let row = passkeys
                .finish_registration(store, &ceremony, &user.id, &name, &credential)
                .await?;
            let first = !store.factors(&user.id).await?.any();
            let (shown, digests) = factors::new_recovery_codes();
            if !store
                .insert_passkey(&row, first.then_some(digests.as_slice()))
                .await?
            {
                return Err(PasskeyError::Taken);
            }
            // Making the passkey used it (with user verification): this
            // session has a fresh factor, as after turning on the app.
            let methods = factors::amr(
                false,
                false,
                Some(factors::PasskeyUse {
                    synced: row.backup_eligible,
                    user_verified: true,
                }),
            );
            session::factor_used(&session, &methods).map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut body = json!({ "id": row.credential_id, "name": row.name });
            if first {
                body["recovery_codes"] = json!(shown);
            }
            Ok(ok(body))
        }
        .await,
    )
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AssertionPurpose {
    /// `step_up` for a signed-in user confirming an action.
    purpose: String,
}

/// `POST /signin/passkey/options`: the request options. After the password
/// (a second step pending) they name the user's credentials; for a signed-in
/// user with `{"purpose": "step_up"}` too; otherwise none, for a
/// discoverable credential ("Sign in with a passkey").
async fn assertion_options(
    req: HttpRequest,
    Page { state, session }: Page,
    body: web::Bytes,
) -> Result<HttpResponse, PageError> {
    let passkeys = match admit(&req, &state, &session) {
        Ok(passkeys) => passkeys,
        Err(refused) => return Ok(refused.response()),
    };
    let purpose: AssertionPurpose = if body.iter().all(u8::is_ascii_whitespace) {
        AssertionPurpose::default()
    } else {
        match parse(&body) {
            Ok(purpose) => purpose,
            Err(refused) => return Ok(refused.response()),
        }
    };
    let (mode, user_id) = if let Some((user_id, _)) = session::pending_second_step(&session) {
        ("second_factor", Some(user_id))
    } else if purpose.purpose == "step_up" {
        match session::current_user(&state, &session).await? {
            Some(user) => ("step_up", Some(user.id)),
            None => return Ok(error(StatusCode::UNAUTHORIZED, "sign in first")),
        }
    } else {
        ("passwordless", None)
    };
    let store = state.store.as_ref();
    answer(
        async {
            let (options, id) = match &user_id {
                Some(user_id) => {
                    let rows = store.factors(user_id).await?.passkeys;
                    passkeys
                        .start_authentication(store, Some((user_id, &rows)))
                        .await?
                }
                None => passkeys.start_authentication(store, None).await?,
            };
            keep_in_session(&session, ASSERTION, id)?;
            keep_in_session(&session, ASSERTION_MODE, mode)?;
            Ok(ok(options))
        }
        .await,
    )
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AssertQuery {
    return_to: Option<String>,
}

/// `POST /signin/passkey` with the assertion (`toJSON()`): `{"redirect"}`
/// and the session, or 400/401 `{"error"}`. A failed assertion of a known
/// user counts against the second-factor throttle, like a wrong code.
async fn assert(
    req: HttpRequest,
    Page { state, session }: Page,
    query: web::Query<AssertQuery>,
    body: web::Bytes,
) -> Result<HttpResponse, PageError> {
    let passkeys = match admit(&req, &state, &session) {
        Ok(passkeys) => passkeys,
        Err(refused) => return Ok(refused.response()),
    };
    let assertion: PublicKeyCredential = match parse(&body) {
        Ok(assertion) => assertion,
        Err(refused) => return Ok(refused.response()),
    };
    let ceremony = session.remove_as::<String>(ASSERTION).and_then(Result::ok);
    let mode = session
        .remove_as::<String>(ASSERTION_MODE)
        .and_then(Result::ok)
        .unwrap_or_default();
    let Some(ceremony) = ceremony else {
        return answer(Err(PasskeyError::NoCeremony));
    };
    let store = state.store.as_ref();
    let (user_id, return_to) = match mode.as_str() {
        "second_factor" => match session::pending_second_step(&session) {
            Some((user_id, return_to)) => (Some(user_id), return_to),
            None => return answer(Err(PasskeyError::NoCeremony)),
        },
        "step_up" => match session::current_user(&state, &session).await? {
            Some(user) => (Some(user.id), "/account".to_owned()),
            None => return Ok(error(StatusCode::UNAUTHORIZED, "sign in first")),
        },
        _ => (
            None,
            session::safe_return_to(query.into_inner().return_to.as_deref()),
        ),
    };
    let mut verified = None;
    let outcome = match &user_id {
        Some(user_id) => {
            let attempt = Attempt::second_factor(user_id, client_ip(&req));
            let check = async {
                match passkeys
                    .finish_authentication(store, &ceremony, Some(user_id), &assertion)
                    .await
                {
                    Ok(v) => {
                        verified = Some(v);
                        Ok(true)
                    }
                    Err(PasskeyError::Store(e)) => Err(e),
                    Err(PasskeyError::Unexpected(e)) => Err(e.into()),
                    Err(_) => Ok(false),
                }
            };
            match confirm_second_factor(store, &attempt, check).await? {
                Confirmation::Confirmed => Ok(()),
                Confirmation::Wait(wait) => {
                    return Ok(HttpResponse::TooManyRequests()
                        .insert_header((header::RETRY_AFTER, (wait.as_secs() + 1).to_string()))
                        .json(json!({ "error": "too many attempts; try again later" })))
                }
                _ => Err(PasskeyError::Refused),
            }
        }
        None => passkeys
            .finish_authentication(store, &ceremony, None, &assertion)
            .await
            .map(|v| {
                verified = Some(v);
            }),
    };
    if let Err(e) = outcome {
        return answer(Err(e));
    }
    let Some(verified) = verified else {
        return answer(Err(PasskeyError::Refused));
    };
    let Some(user) = store
        .find_user(UserKey::Id(&verified.user_id))
        .await?
        .filter(|u| !u.suspended)
    else {
        return Ok(error(
            StatusCode::UNAUTHORIZED,
            "this account cannot sign in",
        ));
    };
    let now = now_micros();
    match mode.as_str() {
        "second_factor" => {
            let amr = factors::amr(true, false, Some(verified.use_));
            session::sign_in_with(&session, &user.id, &amr, Some(now))?;
        }
        "step_up" => {
            let amr = factors::amr(false, false, Some(verified.use_));
            session::factor_used(&session, &amr)?;
        }
        _ => {
            if !verified.use_.user_verified {
                return answer(Err(PasskeyError::Refused));
            }
            let amr = factors::amr(false, false, Some(verified.use_));
            session::sign_in_with(&session, &user.id, &amr, Some(now))?;
        }
    }
    Ok(ok(json!({ "redirect": return_to })))
}

/// `POST /account/passkeys/{id}/remove`: removes one of the user's passkeys
/// (step-up; the last factor needs the password and a recovery code).
pub async fn remove(
    req: HttpRequest,
    Page { state, session }: Page,
    _: SteppedUp,
    form: PageForm<RemoveFactorForm>,
    PathId(credential_id): PathId,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let form = form.into_checked().unwrap_or_default();
    let factors = state.store.factors(&user.id).await?;
    if !factors
        .passkeys
        .iter()
        .any(|p| p.credential_id == credential_id)
    {
        return Err(PageError::NotFound(
            "There is no such passkey among yours.".to_owned(),
        ));
    }
    if factors.count() == 1 {
        if let Err(message) =
            confirm_last_factor_removal(&req, &state, &user, &factors, &form).await?
        {
            session::flash(&session, &message);
            return Ok(see_other("/account#security"));
        }
    }
    state.store.remove_passkey(&user.id, &credential_id).await?;
    session::flash(&session, "The passkey is removed.");
    Ok(see_other("/account#security"))
}
