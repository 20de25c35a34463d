//! The account page: profile, verification, the apps the user authorized and
//! the personal access tokens, each revocable.

use super::forms::{self, refuse, sentence, FormState, PageForm, PathId};
use super::session::{self, Page, SignedIn};
use super::signin::client_ip;
use super::view::{links_message, page, see_other, when, LinksWording, PageError};
use crate::accounts::{self, ChangeContactsError, ContactChange, ContactsChanged};
use crate::domain::{now_micros, Email, Money, Phone};
use crate::store::{ConsentRow, ProfileUpdate};
use actix_session::Session;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;
use serde::Deserialize;

const PROFILE_FORM: &str = "profile";
const CONTACT_FORM: &str = "contact";

pub struct Contact {
    pub kind: &'static str,
    pub address: String,
    pub verified: bool,
}

pub struct AuthorizedApp {
    pub client_id: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub authorized_at: String,
    pub last_used: String,
}

/// One entry per app: an app allowed with several scope sets shows them all.
fn authorized_apps(rows: Vec<ConsentRow>) -> Vec<AuthorizedApp> {
    let mut apps: Vec<AuthorizedApp> = Vec::new();
    for row in rows {
        let scopes = row.scopes.split(' ').filter(|s| !s.is_empty());
        if let Some(app) = apps.iter_mut().find(|a| a.client_id == row.client_id) {
            for scope in scopes {
                if !app.scopes.iter().any(|s| s == scope) {
                    app.scopes.push(scope.to_owned());
                }
            }
            continue;
        }
        apps.push(AuthorizedApp {
            client_id: row.client_id,
            name: row.name,
            scopes: scopes.map(str::to_owned).collect(),
            authorized_at: when(row.authorized_at),
            last_used: row.last_used_at.map_or_else(|| "never".to_owned(), when),
        });
    }
    apps
}

pub struct TokenRow {
    pub grant_id: String,
    pub scopes: String,
    pub created: String,
    pub expires: String,
    pub last_used: String,
}

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
    csrf_token: String,
    username: String,
    display_name: String,
    balance: Money,
    verified: bool,
    notice: Option<String>,
    contacts: Vec<Contact>,
    form: FormState,
    contact_form: FormState,
    pay_form: FormState,
    payments: Vec<super::payments::PaymentRow>,
    apps: Vec<AuthorizedApp>,
    tokens: Vec<TokenRow>,
    has_totp: bool,
    passkeys: Vec<PasskeyItem>,
    passkeys_enabled: bool,
    any_factor: bool,
    /// Removing a factor now needs the password and a code.
    last_factor: bool,
    recovery_left: i64,
    password_form: FormState,
}

pub struct PasskeyItem {
    pub id: String,
    pub name: String,
    pub created: String,
    pub last_used: String,
}

pub async fn show(
    Page { state, session }: Page,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let store = state.store.as_ref();
    let apps = authorized_apps(store.consents_of_user(&user.id).await?);
    let tokens = store
        .personal_tokens(&user.id, now_micros())
        .await?
        .into_iter()
        .map(|t| TokenRow {
            grant_id: t.grant_id,
            scopes: t.scopes.replace(' ', ", "),
            created: when(t.created_at),
            expires: when(t.expires_at),
            last_used: t.last_used_at.map_or_else(|| "never".to_owned(), when),
        })
        .collect();
    let mut contacts = Vec::new();
    if let Some(email) = &user.email {
        contacts.push(Contact {
            kind: "E-mail",
            address: email.clone(),
            verified: user.email_verified,
        });
    }
    if let Some(phone) = &user.phone {
        contacts.push(Contact {
            kind: "Phone",
            address: phone.clone(),
            verified: user.phone_verified,
        });
    }
    let form = forms::take(&session, PROFILE_FORM).unwrap_or_else(|| {
        FormState::with_values(&[
            ("first_name", &user.first_name),
            ("last_name", &user.last_name),
            ("about", &user.about),
        ])
    });
    let contact_form = forms::take(&session, CONTACT_FORM).unwrap_or_else(|| {
        FormState::with_values(&[
            ("email", user.email.as_deref().unwrap_or("")),
            ("phone", user.phone.as_deref().unwrap_or("")),
        ])
    });
    let pay_form = forms::take(&session, super::payments::PAY_FORM)
        .unwrap_or_else(|| FormState::with_values(&[("kind", "pay"), ("audience", "private")]));
    let payments = super::payments::recent(store, &user).await?;
    let factors = store.factors(&user.id).await?;
    let password_form = forms::take(&session, super::factors::PASSWORD_FORM).unwrap_or_default();
    let template = AccountPage {
        has_totp: factors.has_totp(),
        passkeys: factors
            .passkeys
            .iter()
            .map(|p| PasskeyItem {
                id: p.credential_id.clone(),
                name: p.name.clone(),
                created: when(p.created_at),
                last_used: p.last_used_at.map_or_else(|| "never".to_owned(), when),
            })
            .collect(),
        passkeys_enabled: state.passkeys.is_some(),
        any_factor: factors.any(),
        last_factor: factors.count() == 1,
        recovery_left: factors.recovery_codes_left,
        password_form,
        csrf_token: session::csrf_token(&session)?,
        display_name: accounts::display_name(&user),
        balance: Money::from_cents(user.balance_cents),
        verified: user.verified,
        notice: session::take_flash(&session),
        contacts,
        form,
        contact_form,
        pay_form,
        payments,
        apps,
        tokens,
        username: user.username,
    };
    page(StatusCode::OK, &template)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ProfileForm {
    first_name: String,
    last_name: String,
    about: String,
}

/// The profile's fields checked, or the form to show again with a message on
/// each refused one.
fn parse_profile(form: &ProfileForm) -> Result<ProfileUpdate, FormState> {
    let mut refused = FormState::with_values(&[
        ("first_name", &form.first_name),
        ("last_name", &form.last_name),
        ("about", &form.about),
    ]);
    let mut checked = |field: &str, label: &'static str, value: &str, max: usize| {
        accounts::profile_text(label, Some(value), max)
            .map_err(|e| refused.error(field, sentence(&e.to_string())))
            .ok()
    };
    let first_name = checked("first_name", "first name", &form.first_name, 50);
    let last_name = checked("last_name", "last name", &form.last_name, 50);
    let about = checked("about", "about", &form.about, 500);
    let (Some(first_name), Some(last_name), Some(about)) = (first_name, last_name, about) else {
        return Err(refused);
    };
    Ok(ProfileUpdate {
        first_name,
        last_name,
        about,
        at: crate::domain::now_micros(),
    })
}

pub async fn update_profile(
    Page { state, session }: Page,
    form: PageForm<ProfileForm>,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let profile = form
        .parse_with(parse_profile)
        .map_err(|refused| refuse(&session, PROFILE_FORM, &refused, "/account#profile"))?;
    state.store.update_profile(&user.id, &profile).await?;
    session::flash(&session, "Your profile is saved.");
    Ok(see_other("/account"))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct ContactForm {
    email: String,
    phone: String,
    password: String,
}

/// The form's addresses, or `None` with a message on each refused one.
fn parse_contacts(form: &ContactForm, refused: &mut FormState) -> Option<(Email, Option<Phone>)> {
    let email = Email::parse(&form.email).map_err(|e| {
        let message = if form.email.trim().is_empty() {
            "Enter your e-mail address.".to_owned()
        } else {
            sentence(&e.to_string())
        };
        refused.error("email", message)
    });
    let phone = match form.phone.trim() {
        "" => Ok(None),
        phone => Phone::parse(phone)
            .map(Some)
            .map_err(|e| refused.error("phone", sentence(&e.to_string()))),
    };
    Some((email.ok()?, phone.ok()?))
}

/// `POST /account/contact`: the account's e-mail and phone, changed by
/// `accounts::change_contacts` once the password is confirmed.
pub async fn update_contacts(
    req: HttpRequest,
    Page { state, session }: Page,
    _: super::factors::SteppedUp,
    form: PageForm<ContactForm>,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let form = form.or_back(&session, CONTACT_FORM, "/account#contact")?;
    let mut refused = FormState::with_values(&[("email", &form.email), ("phone", &form.phone)]);
    let wanted = parse_contacts(&form, &mut refused);
    let change = ContactChange {
        user: &user,
        from: client_ip(&req),
        requester: super::signin::requester(&req),
        password: &form.password,
        wanted,
    };
    let changed = accounts::change_contacts(
        state.store.as_ref(),
        &state.hasher,
        &state.mailer,
        &state.public_origin,
        change,
    )
    .await;
    let back = |refused: &FormState| refuse(&session, CONTACT_FORM, refused, "/account#contact");
    let message = match changed {
        Ok(_) if refused.has_errors() => return Err(back(&refused)),
        Ok(ContactsChanged::PasswordOnly) => return Err(back(&refused)),
        Ok(ContactsChanged::Unchanged) => {
            "Your e-mail address and phone number are unchanged.".to_owned()
        }
        Ok(ContactsChanged::Saved(links)) => links_message(
            &links,
            &LinksWording {
                nothing_to_send: "Your e-mail address and phone number are saved.",
                sent: "Saved. Follow the link we sent to verify the new address.",
                only_held: "Saved. ",
                failed: "Saved, but we could not send the verification link just now. \
                         Use \"Send the link again\" later.",
            },
        ),
        Err(ChangeContactsError::Wait(wait)) => return Err(PageError::wait(wait)),
        Err(ChangeContactsError::Busy(_)) => return Err(PageError::Busy),
        Err(ChangeContactsError::WrongPassword) => {
            refused.error("password", "That is not your password.");
            return Err(back(&refused));
        }
        Err(ChangeContactsError::Taken(field)) => {
            let field = if field == "phone" { "phone" } else { "email" };
            refused.error(field, "Another account uses this address.");
            return Err(back(&refused));
        }
        Err(ChangeContactsError::Gone) => {
            return Err(PageError::SignInRequired {
                return_to: "/account".to_owned(),
            })
        }
        Err(ChangeContactsError::Store(e)) => return Err(e.into()),
    };
    session::flash(&session, &message);
    Ok(see_other("/account"))
}

/// Back to the revoked thing's `section` of the account page, saying `done`,
/// or `nothing` when there was nothing left to revoke.
fn revocation_answer(
    session: &Session,
    revoked: bool,
    done: &str,
    nothing: &str,
    section: &str,
) -> HttpResponse {
    session::flash(session, if revoked { done } else { nothing });
    see_other(&format!("/account#{section}"))
}

/// Ends an app's access: its consents are forgotten and every token it holds
/// for this user stops working.
pub async fn revoke_app(
    Page { state, session }: Page,
    PathId(client_id): PathId,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let store = state.store.as_ref();
    let name = store
        .find_app(&client_id)
        .await?
        .map_or_else(|| "The app".to_owned(), |a| a.name);
    let revoked = store
        .revoke_app_for_user(&user.id, &client_id, now_micros())
        .await?;
    Ok(revocation_answer(
        &session,
        revoked,
        &format!("{name} can no longer use your account."),
        &format!("{name} had no access to your account."),
        "apps",
    ))
}

pub async fn revoke_token(
    Page { state, session }: Page,
    PathId(grant_id): PathId,
    SignedIn(user): SignedIn,
) -> Result<HttpResponse, PageError> {
    let revoked = state
        .store
        .revoke_personal_token(&user.id, &grant_id, now_micros())
        .await?;
    Ok(revocation_answer(
        &session,
        revoked,
        "The personal access token is revoked.",
        "That token was already revoked or has expired.",
        "tokens",
    ))
}
