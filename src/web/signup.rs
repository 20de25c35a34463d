//! Signing up, and the verification links that follow.

use super::forms::{self, sentence, FormState, PageForm, PageQuery};
use super::session::{self, CurrentUser, Page, SignedIn};
use super::signin::{client_ip, limit_per_address, requester};
use super::view::{links_message, page, see_other, LinksWording, PageError};
use crate::accounts::{self, CreateAccountError, NewAccount};
use crate::domain::{Email, Password, Phone, Username};
use crate::state::AppState;
use crate::store::User;
use crate::verification::{self, Links};
use actix_session::Session;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;
use serde::Deserialize;

const FORM: &str = "signup";

#[derive(Template)]
#[template(path = "signup.html")]
struct SignUpPage {
    csrf_token: String,
    form: FormState,
}

pub async fn show(
    session: Session,
    CurrentUser(user): CurrentUser,
) -> Result<HttpResponse, PageError> {
    if user.is_some() {
        return Ok(see_other("/account"));
    }
    let template = SignUpPage {
        csrf_token: session::csrf_token(&session)?,
        form: forms::take(&session, FORM).unwrap_or_default(),
    };
    page(StatusCode::OK, &template)
}

#[derive(Clone, Deserialize, Default)]
#[serde(default)]
pub struct SignUpForm {
    username: String,
    first_name: String,
    last_name: String,
    email: String,
    phone: String,
    password: String,
    password_confirm: String,
}

/// The form as a new account, or the form with a message on each refused field.
fn parse(form: &SignUpForm) -> Result<NewAccount, FormState> {
    let mut state = FormState::default();
    for (field, value) in [
        ("username", &form.username),
        ("first_name", &form.first_name),
        ("last_name", &form.last_name),
        ("email", &form.email),
        ("phone", &form.phone),
    ] {
        state.keep(field, value);
    }
    let username = Username::parse(&form.username)
        .map_err(|e| state.error("username", sentence(&e.to_string())))
        .ok();
    let first_name = accounts::profile_text("First name", Some(&form.first_name), 50)
        .map_err(|e| state.error("first_name", e))
        .ok();
    let last_name = accounts::profile_text("Last name", Some(&form.last_name), 50)
        .map_err(|e| state.error("last_name", e))
        .ok();
    let email = if form.email.trim().is_empty() {
        state.error("email", "Enter your e-mail address.");
        None
    } else {
        Email::parse(&form.email)
            .map_err(|e| state.error("email", sentence(&e.to_string())))
            .ok()
    };
    let phone = match form.phone.trim() {
        "" => None,
        phone => Phone::parse(phone)
            .map_err(|e| state.error("phone", sentence(&e.to_string())))
            .ok(),
    };
    let password = match Password::parse(&form.password) {
        Err(e) => {
            state.error("password", sentence(&e.to_string()));
            None
        }
        Ok(_) if form.password != form.password_confirm => {
            state.error("password_confirm", "The two passwords differ.");
            None
        }
        Ok(password) => {
            let own_words = [
                form.username.as_str(),
                form.first_name.as_str(),
                form.last_name.as_str(),
                form.email.as_str(),
                "tally",
            ];
            accounts::check_password_strength(password.expose(), &own_words)
                .map_err(|e| state.error("password", e))
                .ok()
                .map(|()| password)
        }
    };
    match (username, first_name, last_name, email, password) {
        (Some(username), Some(first_name), Some(last_name), Some(email), Some(password))
            if !state.has_errors() =>
        {
            Ok(NewAccount {
                username,
                password,
                first_name,
                last_name,
                email: Some(email),
                phone,
                about: String::new(),
                verified: false,
            })
        }
        _ => Err(state),
    }
}

pub async fn submit(
    req: HttpRequest,
    Page { state, session }: Page,
    form: PageForm<SignUpForm>,
) -> Result<HttpResponse, PageError> {
    // Each sign-up costs a password hash and a message: bounded per address,
    // by the OAuth endpoints' limit and by the sign-ups' own (SPEC §9).
    limit_per_address(&req, &state)?;
    state
        .rate_limits
        .check_signup(client_ip(&req))
        .map_err(PageError::wait)?;
    let (form, account) = form
        .parse_with(|form| parse(form).map(|account| (form.clone(), account)))
        .map_err(|refused| forms::refuse(&session, FORM, &refused, "/signup"))?;
    let created = accounts::create(
        state.store.as_ref(),
        &state.hasher,
        &requester(&req),
        account,
    )
    .await;
    let user = match created {
        Ok(user) => user,
        Err(CreateAccountError::Taken(field)) => {
            let mut refused = FormState::with_values(&[
                ("username", form.username.as_str()),
                ("first_name", form.first_name.as_str()),
                ("last_name", form.last_name.as_str()),
                ("email", form.email.as_str()),
                ("phone", form.phone.as_str()),
            ]);
            let (field, what) = match field {
                "email" => ("email", "e-mail address"),
                "phone" => ("phone", "phone number"),
                _ => ("username", "username"),
            };
            refused.error(
                field,
                format!("This {what} already belongs to an account. Sign in instead, or choose another."),
            );
            return Err(forms::refuse(&session, FORM, &refused, "/signup"));
        }
        Err(CreateAccountError::Busy(_)) => return Err(PageError::Busy),
        Err(CreateAccountError::Store(e)) => return Err(e.into()),
        Err(CreateAccountError::Unexpected(e)) => return Err(PageError::Unexpected(e)),
    };
    session::sign_in(&session, &user.id)?;
    let links = send_links(&req, &state, &user).await;
    let sent = format!(
        "Welcome to Tally! We sent a verification link to {}. Open it to verify your account.",
        user.email.as_deref().unwrap_or("your address")
    );
    let wording = LinksWording {
        nothing_to_send: "Welcome to Tally!",
        sent: &sent,
        only_held: "Welcome to Tally! ",
        failed: "Welcome to Tally! We could not send your verification link just now; use \"Send the link again\" below.",
    };
    session::flash(&session, &links_message(&links, &wording));
    Ok(see_other("/account"))
}

#[derive(Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
}

#[derive(Template)]
#[template(path = "verify.html")]
struct VerifyPage {
    csrf_token: String,
    token: String,
    outcome: Option<bool>,
    signed_in: bool,
}

/// The link opens a page with a button, so that mail scanners that fetch links
/// do not spend it.
pub async fn verify_page(
    session: Session,
    CurrentUser(user): CurrentUser,
    PageQuery(query): PageQuery<TokenQuery>,
) -> Result<HttpResponse, PageError> {
    let outcome = match session::take_flash(&session).as_deref() {
        Some("verified") => Some(true),
        Some("not-verified") => Some(false),
        _ => None,
    };
    let template = VerifyPage {
        csrf_token: session::csrf_token(&session)?,
        token: query.token.clone().unwrap_or_default(),
        outcome,
        signed_in: user.is_some(),
    };
    page(StatusCode::OK, &template)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct VerifyForm {
    token: String,
}

pub async fn verify(
    Page { state, session }: Page,
    form: PageForm<VerifyForm>,
) -> Result<HttpResponse, PageError> {
    let verified = match form.into_checked() {
        Ok(form) => {
            verification::verify(state.store.as_ref(), &state.settings, &form.token).await?
        }
        Err(_) => None,
    };
    session::flash(
        &session,
        if verified.is_some() {
            "verified"
        } else {
            "not-verified"
        },
    );
    Ok(see_other("/verify"))
}

async fn send_links(req: &HttpRequest, state: &AppState, user: &User) -> Links {
    verification::send_links(
        state.store.as_ref(),
        &state.mailer,
        &state.public_origin,
        user,
        client_ip(req),
    )
    .await
}

/// Sends the signed-in user's verification links again.
pub async fn resend(
    req: HttpRequest,
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    limit_per_address(&req, &state)?;
    let links = send_links(&req, &state, &user).await;
    let wording = LinksWording {
        nothing_to_send: "Your account is already verified.",
        sent: "We sent a new verification link.",
        only_held: "",
        failed: "We could not send the link just now. Try again later.",
    };
    session::flash(&session, &links_message(&links, &wording));
    Ok(see_other("/account"))
}
