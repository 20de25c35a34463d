//! Second factors on the pages (SPEC §11): the second step of a sign-in,
//! step-up before sensitive actions (the confirmation page that then carries
//! the action out), the authenticator app's set-up, recovery codes, removing
//! factors, and the change-password form (SPEC §8).

use super::forms::{FormFields, FormState, PageForm};
use super::reveal;
use super::session::{self, state_of, Page, SignedIn};
use super::signin::{client_ip, requester};
use super::view::{page, see_other, PageError};
use crate::auth::factors::{self, CodeCheck, CodeKind};
use crate::auth::throttle::{confirm_password, Attempt, Confirmation};
use crate::domain::{micros, now_micros, Amount, Password};
use crate::state::AppState;
use crate::store::{Factors, User, UserKey};
use actix_session::{Session, SessionExt};
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse};
use askama::Template;
use futures_util::future::LocalBoxFuture;
use serde::Deserialize;

/// The form field a confirmation page (and a last factor's removal) adds.
pub const CODE_FIELD: &str = "second_factor";
/// Whose one-time secret the recovery codes are (`reveal`).
const RECOVERY_CODES_OWNER: &str = "recovery-codes";

#[derive(Template)]
#[template(path = "second_factor.html")]
struct SecondFactorPage {
    csrf_token: String,
    heading: &'static str,
    lead: String,
    code_label: &'static str,
    error: Option<String>,
    action: String,
    button: &'static str,
    hidden: Vec<(String, String)>,
    /// Whether to offer the user's passkeys (through the script).
    passkeys: bool,
    /// `second_factor` (sign-in) or `step_up`, for the script.
    passkey_mode: &'static str,
}

/// Whether passkeys are offered on this deployment (a host name, not an IP
/// address, in `TALLY_PUBLIC_URL`).
fn passkeys_offered(state: &AppState, factors: &Factors) -> bool {
    state.passkeys.is_some() && !factors.passkeys.is_empty()
}

/// The factors a user can confirm with, in words.
fn what_to_use(state: &AppState, factors: &Factors) -> &'static str {
    match (factors.has_totp(), passkeys_offered(state, factors)) {
        (true, true) => "your authenticator app, a passkey or a recovery code",
        (true, false) => "a code from your authenticator app or a recovery code",
        (false, true) => "your passkey or a recovery code",
        (false, false) => "a recovery code",
    }
}

fn code_label(factors: &Factors) -> &'static str {
    if factors.has_totp() {
        "Code from your authenticator app, or a recovery code"
    } else {
        "A recovery code"
    }
}

// --- The second step of a sign-in ---------------------------------------

/// `GET /signin/second-factor`: asks the user whose password was right for a
/// code (or a passkey).
pub async fn second_step(Page { state, session }: Page) -> Result<HttpResponse, PageError> {
    let Some((user_id, _)) = session::pending_second_step(&session) else {
        return Ok(see_other("/signin"));
    };
    let factors = state.store.factors(&user_id).await?;
    let template = SecondFactorPage {
        csrf_token: session::csrf_token(&session)?,
        heading: "One more step",
        lead: format!(
            "Your password is right. Now confirm it is you with {}.",
            what_to_use(&state, &factors)
        ),
        code_label: code_label(&factors),
        error: session::take_flash(&session),
        action: "/signin/second-factor".to_owned(),
        button: "Sign in",
        hidden: Vec::new(),
        passkeys: passkeys_offered(&state, &factors),
        passkey_mode: "second_factor",
    };
    page(StatusCode::OK, &template)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct CodeForm {
    second_factor: String,
}

/// `POST /signin/second-factor`: the code; right, the session starts.
pub async fn second_step_submit(
    req: HttpRequest,
    Page { state, session }: Page,
    form: PageForm<CodeForm>,
) -> Result<HttpResponse, PageError> {
    let Some((user_id, return_to)) = session::pending_second_step(&session) else {
        session::flash(&session, "That took too long. Sign in again.");
        return Ok(see_other("/signin"));
    };
    let Ok(form) = form.into_checked() else {
        session::flash(&session, "That code is not right.");
        return Ok(see_other("/signin/second-factor"));
    };
    let store = state.store.as_ref();
    let Some(user) = store
        .find_user(UserKey::Id(&user_id))
        .await?
        .filter(|u| !u.suspended)
    else {
        return Ok(see_other("/signin"));
    };
    let factors = store.factors(&user.id).await?;
    let checked = factors::check_code(
        store,
        &state.secret_key,
        &user.id,
        &user.username,
        &factors,
        &form.second_factor,
        client_ip(&req),
    )
    .await?;
    match checked {
        CodeCheck::Accepted(kind) => {
            let now = now_micros();
            session::sign_in_with(
                &session,
                &user.id,
                &factors::amr(true, true, None),
                Some(now),
            )?;
            if kind == CodeKind::Recovery {
                session::flash(&session, &recovery_notice(factors.recovery_codes_left - 1));
            }
            Ok(see_other(&return_to))
        }
        CodeCheck::Wait(wait) => Err(PageError::wait(wait)),
        CodeCheck::Refused => {
            session::flash(&session, "That code is not right, or was used already.");
            Ok(see_other("/signin/second-factor"))
        }
    }
}

fn recovery_notice(left: i64) -> String {
    format!(
        "You signed in with a recovery code; {left} left. Make new ones on your account page if \
         you are running out."
    )
}

// --- Step-up --------------------------------------------------------------

/// Set on a request whose form's code was accepted by the step-up itself.
#[derive(Clone, Copy)]
struct ConfirmedNow;

/// Whether a second factor was used in this session within the window.
pub(super) fn fresh(state: &AppState, session: &Session) -> bool {
    session::factor_used_at(session)
        .is_some_and(|at| at > now_micros().saturating_sub(micros(state.settings.step_up_window)))
}

/// Lets a sensitive action through when the user has no second factor, or
/// used one in this session within `TALLY_STEP_UP_WINDOW`, or sent a right
/// code with the form now (from the confirmation page); otherwise answers
/// the confirmation page, which sends the same form again with a code.
pub(super) async fn require_fresh_factor(
    req: &HttpRequest,
    fields: Vec<(String, String)>,
    what: &str,
) -> Result<(), PageError> {
    let state = state_of(req)?;
    let session = req.get_session();
    let Some(user) = session::current_user(&state, &session).await? else {
        // The handler's `SignedIn` sends the browser to sign in.
        return Ok(());
    };
    let factors = state.store.factors(&user.id).await?;
    if !factors.any() || fresh(&state, &session) {
        return Ok(());
    }
    let code = fields
        .iter()
        .find(|(name, _)| name == CODE_FIELD)
        .map(|(_, value)| value.clone())
        .filter(|code| !code.trim().is_empty());
    let mut error = None;
    if let Some(code) = code {
        let checked = factors::check_code(
            state.store.as_ref(),
            &state.secret_key,
            &user.id,
            &user.username,
            &factors,
            &code,
            client_ip(req),
        )
        .await?;
        match checked {
            CodeCheck::Accepted(_) => {
                session::factor_used(&session, "otp")?;
                req.extensions_mut().insert(ConfirmedNow);
                return Ok(());
            }
            CodeCheck::Wait(wait) => return Err(PageError::wait(wait)),
            CodeCheck::Refused => {
                error = Some("That code is not right, or was used already.".to_owned());
            }
        }
    }
    let template = SecondFactorPage {
        csrf_token: session::csrf_token(&session)?,
        heading: "Confirm it is you",
        lead: format!("To {what}, confirm with {}.", what_to_use(&state, &factors)),
        code_label: code_label(&factors),
        error,
        action: req.path().to_owned(),
        button: "Confirm",
        hidden: carried_fields(req, &state, &session, fields)?,
        passkeys: passkeys_offered(&state, &factors),
        passkey_mode: "step_up",
    };
    let html = template
        .render()
        .map_err(|e| PageError::Unexpected(anyhow::anyhow!("template failed: {e}")))?;
    Err(PageError::Confirm(html))
}

/// The confirmation page's field that carries the form's typed passwords,
/// sealed: they never appear in the page as typed.
const SEALED_FIELD: &str = "sealed_fields";
/// How long a confirmation page's sealed fields can be sent back.
const SEALED_FIELDS_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// What the sealed field holds: when it was sealed, and the typed secrets.
#[derive(serde::Serialize, Deserialize)]
struct SealedFields {
    at: i64,
    fields: Vec<(String, String)>,
}

/// Sealed for one session and one action's path, under the deployment's
/// key: a sealed field cannot be replayed in another session or onto
/// another form.
fn sealed_fields_sealer(state: &AppState) -> Result<crate::secret_key::Sealer, PageError> {
    crate::secret_key::Sealer::new(&state.secret_key, b"tally step-up form")
        .map_err(PageError::Unexpected)
}

fn sealed_fields_aad(req: &HttpRequest, session: &Session) -> Vec<u8> {
    let session_id = session::session_id(session).unwrap_or_default();
    format!("{session_id}\n{}", req.path()).into_bytes()
}

/// The form's fields for the confirmation page to send again: the plain ones
/// as they came, the typed passwords sealed into one field.
fn carried_fields(
    req: &HttpRequest,
    state: &AppState,
    session: &Session,
    fields: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, PageError> {
    let (secrets, mut carried): (Vec<_>, Vec<_>) = fields
        .into_iter()
        .filter(|(name, _)| name != "csrf_token" && name != CODE_FIELD && name != SEALED_FIELD)
        .partition(|(name, _)| super::forms::is_secret(name));
    if !secrets.is_empty() {
        let plain = serde_json::to_vec(&SealedFields {
            at: now_micros(),
            fields: secrets,
        })
        .map_err(|e| PageError::Unexpected(e.into()))?;
        let sealed = sealed_fields_sealer(state)?
            .seal(&sealed_fields_aad(req, session), &plain)
            .map_err(PageError::Unexpected)?;
        carried.push((SEALED_FIELD.to_owned(), sealed));
    }
    Ok(carried)
}

/// The form as sent from a confirmation page, with its sealed passwords put
/// back where the action's own form reads them. A sealed field that does not
/// open (another session's, another form's, too old) is refused. Done when
/// the guard is extracted, before the action's form extractor takes the
/// fields.
fn restore_typed_secrets(
    req: &HttpRequest,
    fields: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, PageError> {
    let Some(sealed) = fields
        .iter()
        .find(|(name, _)| name == SEALED_FIELD)
        .map(|(_, value)| value.clone())
    else {
        return Ok(fields);
    };
    let expired = || {
        PageError::BadRequest(
            "This confirmation has expired. Please fill in the form again.".to_owned(),
        )
    };
    let state = state_of(req)?;
    let opened = sealed_fields_sealer(&state)?
        .open(&sealed_fields_aad(req, &req.get_session()), &sealed)
        .ok()
        .and_then(|plain| serde_json::from_slice::<SealedFields>(&plain).ok())
        .filter(|opened| opened.at >= now_micros().saturating_sub(micros(SEALED_FIELDS_TTL)))
        .ok_or_else(expired)?;
    let mut restored: Vec<(String, String)> = fields
        .into_iter()
        .filter(|(name, _)| {
            name == "csrf_token" || (name != SEALED_FIELD && !super::forms::is_secret(name))
        })
        .collect();
    restored.extend(opened.fields);
    req.extensions_mut().insert(FormFields(restored.clone()));
    Ok(restored)
}

/// What a sensitive action is, in words for the confirmation page.
pub(super) fn action_words(req: &HttpRequest) -> &'static str {
    let path = req.path();
    if path == "/account/password" {
        "change your password"
    } else if path == "/account/contact" {
        "change your e-mail address or phone"
    } else if path.starts_with("/account/totp")
        || path.starts_with("/account/passkeys")
        || path.starts_with("/account/recovery-codes")
    {
        "change your second factors"
    } else if path == "/developer/apps" {
        "create an app"
    } else if path.ends_with("/secret") {
        "make a new client secret"
    } else if path == "/developer/token" {
        "get a personal access token"
    } else if path == "/account/payments" {
        "send this payment"
    } else if path.starts_with("/account/payments/") {
        "pay this request"
    } else {
        "do this"
    }
}

/// The form's fields as sent, read when the guard is extracted: the form's
/// own extractor, after it in the handler's arguments, takes them next.
fn form_fields(req: &HttpRequest) -> Vec<(String, String)> {
    req.extensions()
        .get::<FormFields>()
        .map(|f| f.0.clone())
        .unwrap_or_default()
}

/// A sensitive action's guard (SPEC §11): in a handler's arguments before
/// its form, it lets the action run only with a fresh second factor.
pub struct SteppedUp;

impl FromRequest for SteppedUp {
    type Error = PageError;
    type Future = LocalBoxFuture<'static, Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        step_up_when(req, Self, |_, _| true)
    }
}

/// The account page's payment guard: a pay over `TALLY_STEP_UP_AMOUNT`
/// needs a fresh second factor; smaller pays and requests do not.
pub struct SteppedUpPayment;

impl FromRequest for SteppedUpPayment {
    type Error = PageError;
    type Future = LocalBoxFuture<'static, Result<Self, PageError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        step_up_when(req, Self, is_large_pay)
    }
}

/// A guard's check: the request goes on as `guard` when it needs no second
/// factor (`needs_one`, from its form's fields) or has a fresh one.
fn step_up_when<G: 'static>(
    req: &HttpRequest,
    guard: G,
    needs_one: fn(&AppState, &[(String, String)]) -> bool,
) -> LocalBoxFuture<'static, Result<G, PageError>> {
    let req = req.clone();
    let fields = restore_typed_secrets(&req, form_fields(&req));
    Box::pin(async move {
        let fields = fields?;
        if needs_one(&*state_of(&req)?, &fields) {
            require_fresh_factor(&req, fields, action_words(&req)).await?;
        }
        Ok(guard)
    })
}

/// Whether a payment form pays more than `TALLY_STEP_UP_AMOUNT`.
fn is_large_pay(state: &AppState, fields: &[(String, String)]) -> bool {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    field("kind") == Some("pay")
        && field("amount")
            .and_then(|a| Amount::parse_positive(a.trim()).ok())
            .is_some_and(|a| a.cents() > state.settings.step_up_amount_cents)
}

// --- The authenticator app ----------------------------------------------

#[derive(Template)]
#[template(path = "totp_setup.html")]
struct TotpSetupPage {
    csrf_token: String,
    username: String,
    error: Option<String>,
    /// Drawn by `qrcode` from the otpauth URI: shapes only, no text of the
    /// user's (an `<img>` of a data URL would break `default-src 'self'`).
    qr_svg: String,
    secret_spaced: String,
}

/// `POST /account/totp`: starts setting up an authenticator app.
pub async fn begin_totp(
    Page { state, session }: Page,
    _: SteppedUp,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let (sealed, _) =
        factors::new_seed(&state.secret_key, &user.id).map_err(PageError::Unexpected)?;
    if !state
        .store
        .begin_totp(&user.id, &sealed, now_micros())
        .await?
    {
        session::flash(&session, "Your authenticator app is already set up.");
        return Ok(see_other("/account#security"));
    }
    Ok(see_other("/account/totp"))
}

/// `GET /account/totp`: the app being set up, as a QR code and as text.
pub async fn show_totp(
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let factors = state.store.factors(&user.id).await?;
    let Some(row) = factors.totp.filter(|t| t.confirmed_at.is_none()) else {
        return Ok(see_other("/account#security"));
    };
    let seed = factors::open_seed(&state.secret_key, &user.id, &row.secret_sealed)
        .map_err(PageError::Unexpected)?;
    let setup = factors::setup(&seed, &user.username).map_err(PageError::Unexpected)?;
    let secret_spaced = setup
        .secret_base32
        .as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let template = TotpSetupPage {
        csrf_token: session::csrf_token(&session)?,
        username: user.username.clone(),
        error: session::take_flash(&session),
        qr_svg: setup.qr_svg,
        secret_spaced,
    };
    page(StatusCode::OK, &template)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ConfirmTotpForm {
    code: String,
}

/// `POST /account/totp/confirm`: the app's first code turns it on; a first
/// factor comes with 10 recovery codes, shown once.
pub async fn confirm_totp(
    Page { state, session }: Page,
    form: PageForm<ConfirmTotpForm>,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let code = form.into_checked().map(|f| f.code).unwrap_or_default();
    let code: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    let store = state.store.as_ref();
    let factors = store.factors(&user.id).await?;
    let Some(row) = factors.totp.as_ref().filter(|t| t.confirmed_at.is_none()) else {
        return Ok(see_other("/account#security"));
    };
    let seed = factors::open_seed(&state.secret_key, &user.id, &row.secret_sealed)
        .map_err(PageError::Unexpected)?;
    let Some(step) = factors::step_of(
        &factors::totp(&seed, &user.username).map_err(PageError::Unexpected)?,
        &code,
    ) else {
        session::flash(
            &session,
            "That code is not right. Check the app's clock and type the code it shows now.",
        );
        return Ok(see_other("/account/totp"));
    };
    let first = !factors.any();
    let (shown, digests) = factors::new_recovery_codes();
    let now = now_micros();
    if !store
        .confirm_totp(&user.id, step, now, first.then_some(digests.as_slice()))
        .await?
    {
        return Ok(see_other("/account#security"));
    }
    // Setting the factor up used it: this session has it now.
    session::factor_used(&session, "otp")?;
    if first {
        show_recovery_codes_once(&state, &session, &user, &shown).await?;
        session::flash(&session, "Your authenticator app is on.");
        return Ok(see_other("/account/recovery-codes"));
    }
    session::flash(&session, "Your authenticator app is on.");
    Ok(see_other("/account#security"))
}

async fn show_recovery_codes_once(
    state: &AppState,
    session: &Session,
    user: &User,
    codes: &[String],
) -> Result<(), PageError> {
    reveal::show_once(
        state,
        session,
        &user.id,
        RECOVERY_CODES_OWNER,
        "recovery codes",
        &codes.join("\n"),
    )
    .await
}

#[derive(Template)]
#[template(path = "recovery_codes.html")]
struct RecoveryCodesPage {
    csrf_token: String,
    username: String,
    codes: Vec<String>,
}

/// `GET /account/recovery-codes`: the new codes, shown this once.
pub async fn show_recovery_codes(
    req: HttpRequest,
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let Some(secret) = reveal::take(&req, &state, &session, &user.id, RECOVERY_CODES_OWNER).await?
    else {
        return Ok(see_other("/account#security"));
    };
    let template = RecoveryCodesPage {
        csrf_token: session::csrf_token(&session)?,
        username: user.username.clone(),
        codes: secret.value.lines().map(str::to_owned).collect(),
    };
    page(StatusCode::OK, &template)
}

/// `POST /account/recovery-codes`: new codes; the old ones stop working.
pub async fn new_recovery_codes(
    Page { state, session }: Page,
    _: SteppedUp,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    if !state.store.factors(&user.id).await?.any() {
        return Ok(see_other("/account#security"));
    }
    let (shown, digests) = factors::new_recovery_codes();
    state
        .store
        .replace_recovery_codes(&user.id, &digests, now_micros())
        .await?;
    show_recovery_codes_once(&state, &session, &user, &shown).await?;
    Ok(see_other("/account/recovery-codes"))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct RemoveFactorForm {
    password: String,
    second_factor: String,
}

/// Whether `given` is the signed-in user's password, checked under the
/// sign-in throttle (a wait or a busy hasher is the error page).
async fn is_own_password(
    req: &HttpRequest,
    state: &AppState,
    user: &User,
    given: &str,
) -> Result<bool, PageError> {
    let confirmation = confirm_password(
        state.store.as_ref(),
        &state.hasher,
        &Attempt::new(&user.id, client_ip(req)).waited_on_by(requester(req)),
        Some(&user.password_hash),
        given,
    )
    .await?;
    match confirmation {
        Confirmation::Confirmed => Ok(true),
        Confirmation::Refused => Ok(false),
        Confirmation::Wait(wait) => Err(PageError::wait(wait)),
        Confirmation::Busy => Err(PageError::Busy),
    }
}

/// The last factor goes only with the password and a factor or recovery
/// code (SPEC §11): `Ok(())` when both were given and right.
pub async fn confirm_last_factor_removal(
    req: &HttpRequest,
    state: &AppState,
    user: &User,
    factors: &Factors,
    form: &RemoveFactorForm,
) -> Result<Result<(), String>, PageError> {
    if !is_own_password(req, state, user, &form.password).await? {
        return Ok(Err("That is not your password.".to_owned()));
    }
    if req.extensions().contains::<ConfirmedNow>() {
        return Ok(Ok(()));
    }
    let checked = factors::check_code(
        state.store.as_ref(),
        &state.secret_key,
        &user.id,
        &user.username,
        factors,
        &form.second_factor,
        client_ip(req),
    )
    .await?;
    match checked {
        CodeCheck::Accepted(_) => Ok(Ok(())),
        CodeCheck::Wait(wait) => Err(PageError::wait(wait)),
        CodeCheck::Refused => Ok(Err(
            "Removing your last second factor needs your password and a code from it or a \
             recovery code."
                .to_owned(),
        )),
    }
}

/// `POST /account/totp/remove`: turns the authenticator app off.
pub async fn remove_totp(
    req: HttpRequest,
    Page { state, session }: Page,
    _: SteppedUp,
    form: PageForm<RemoveFactorForm>,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let form = form.into_checked().unwrap_or_default();
    let factors = state.store.factors(&user.id).await?;
    if !factors.has_totp() {
        return Ok(see_other("/account#security"));
    }
    if factors.count() == 1 {
        if let Err(message) =
            confirm_last_factor_removal(&req, &state, &user, &factors, &form).await?
        {
            session::flash(&session, &message);
            return Ok(see_other("/account#security"));
        }
    }
    state.store.remove_totp(&user.id).await?;
    session::flash(&session, "Your authenticator app is off.");
    Ok(see_other("/account#security"))
}

// --- Changing the password (SPEC §8) ------------------------------------

pub const PASSWORD_FORM: &str = "password";

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct PasswordForm {
    current_password: String,
    new_password: String,
}

/// `POST /account/password`: the current password, then the new one; the
/// user's other sessions end, this one goes on.
pub async fn change_password(
    req: HttpRequest,
    Page { state, session }: Page,
    _: SteppedUp,
    form: PageForm<PasswordForm>,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    const BACK: &str = "/account#password";
    let form = form.or_back(&session, PASSWORD_FORM, BACK)?;
    let mut refused = FormState::default();
    let back = |refused: &FormState| super::forms::refuse(&session, PASSWORD_FORM, refused, BACK);
    let new_password = match Password::parse(&form.new_password) {
        Ok(password) => {
            let own_words = [
                user.username.as_str(),
                user.first_name.as_str(),
                user.last_name.as_str(),
                user.email.as_deref().unwrap_or(""),
                "tally",
            ];
            match crate::accounts::check_password_strength(password.expose(), &own_words) {
                Ok(()) => password,
                Err(weak) => {
                    refused.error("new_password", weak);
                    return Err(back(&refused));
                }
            }
        }
        Err(e) => {
            refused.error("new_password", super::forms::sentence(&e.to_string()));
            return Err(back(&refused));
        }
    };
    if !is_own_password(&req, &state, &user, &form.current_password).await? {
        refused.error("current_password", "That is not your current password.");
        return Err(back(&refused));
    }
    let hash = state
        .hasher
        .hash(&requester(&req), &new_password)
        .await
        .map_err(|e| match e {
            crate::auth::password::HashError::Busy(_) => PageError::Busy,
            crate::auth::password::HashError::Unexpected(e) => PageError::Unexpected(e),
        })?;
    let amr = session::amr(&session);
    let factor_at = session::factor_used_at(&session);
    state
        .store
        .change_password(&user.id, &hash, now_micros())
        .await?;
    // This session goes on as a new one, begun after the cut.
    session::sign_in_with(&session, &user.id, &amr, factor_at)?;
    session::flash(
        &session,
        "Your password is changed. Your other sessions have ended.",
    );
    Ok(see_other("/account"))
}
