//! Signing in and out.

use super::forms::{PageForm, PageQuery};
use super::session::{self, safe_return_to, CurrentUser, Page};
use super::view::{page, see_other, PageError};
use crate::auth::password::{Connection, Requester};
use crate::auth::throttle::{confirm_password, Attempt, Confirmation};
use crate::domain::{Email, Phone, Username};
use crate::state::AppState;
use crate::store::{Store, StoreError, User, UserKey};
use actix_session::Session;
use actix_tls::accept::rustls_0_23::TlsStream;
use actix_web::dev::Extensions;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;
use serde::Deserialize;
use std::any::Any;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Template)]
#[template(path = "signin.html")]
pub struct SignInPage {
    pub csrf_token: String,
    pub return_to: String,
    pub error: Option<String>,
    pub app_name: Option<String>,
    /// What the username field holds at first (OpenID Connect `login_hint`).
    pub username: String,
    /// Whether "Sign in with a passkey" is offered (SPEC §11).
    pub passkeys: bool,
}

#[derive(Deserialize)]
pub struct ReturnTo {
    return_to: Option<String>,
}

pub async fn show(
    Page { state, session }: Page,
    CurrentUser(user): CurrentUser,
    PageQuery(query): PageQuery<ReturnTo>,
) -> Result<HttpResponse, PageError> {
    let return_to = safe_return_to(query.return_to.as_deref());
    if user.is_some() {
        return Ok(see_other(&return_to));
    }
    sign_in_page(&state, &session, return_to, None)
}

/// The sign-in page again (a 303), keeping where to go afterwards.
fn back_to_sign_in(return_to: &str) -> HttpResponse {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("return_to", &safe_return_to(Some(return_to)))
        .finish();
    see_other(&format!("/signin?{query}"))
}

/// The sign-in form, which sends the browser on to `return_to` once signed in.
pub fn sign_in_page(
    state: &AppState,
    session: &Session,
    return_to: String,
    app_name: Option<String>,
) -> Result<HttpResponse, PageError> {
    sign_in_page_for(state, session, return_to, app_name, None)
}

/// The sign-in form with its username field filled in (`login_hint`).
pub fn sign_in_page_for(
    state: &AppState,
    session: &Session,
    return_to: String,
    app_name: Option<String>,
    username: Option<&str>,
) -> Result<HttpResponse, PageError> {
    let template = SignInPage {
        csrf_token: session::csrf_token(session)?,
        return_to,
        error: session::take_flash(session),
        app_name,
        username: username.unwrap_or("").to_owned(),
        passkeys: state.passkeys.is_some(),
    };
    page(StatusCode::OK, &template)
}

#[derive(Deserialize)]
pub struct SignInForm {
    username: String,
    password: String,
    return_to: Option<String>,
}

pub async fn submit(
    req: HttpRequest,
    Page { state, session }: Page,
    form: PageForm<SignInForm>,
) -> Result<HttpResponse, PageError> {
    let form = match form.or_flashed(&session) {
        Ok(form) => form,
        Err(refused) => return Ok(back_to_sign_in(refused.value("return_to"))),
    };
    // Every attempt costs a password hash.
    limit_per_address(&req, &state)?;
    let return_to = safe_return_to(form.return_to.as_deref());
    let store = state.store.as_ref();
    let identifier = form.username.trim();
    let user = find_account(store, identifier).await?;
    let account_key = user
        .as_ref()
        .map_or_else(|| identifier.to_lowercase(), |u| u.id.clone());
    let attempt = Attempt::new(&account_key, client_ip(&req)).waited_on_by(requester(&req));
    // The same work and the same answer whether the account exists or not.
    let password_hash = user.as_ref().map(|u| u.password_hash.as_str());
    let confirmation = confirm_password(
        store,
        &state.hasher,
        &attempt,
        password_hash,
        &form.password,
    )
    .await?;
    let user = match (confirmation, user) {
        (Confirmation::Wait(wait), _) => return Err(PageError::wait(wait)),
        (Confirmation::Busy, _) => return Err(PageError::Busy),
        (Confirmation::Confirmed, Some(user)) => user,
        _ => {
            session::flash(&session, "Incorrect username or password.");
            return Ok(back_to_sign_in(&return_to));
        }
    };
    if user.suspended {
        session::flash(&session, "This account is suspended.");
        return Ok(back_to_sign_in(&return_to));
    }
    // A user with a second factor gives it next (SPEC §11); the session
    // starts only then.
    if store.factors(&user.id).await?.any() {
        session::begin_second_step(&session, &user.id, &return_to)?;
        return Ok(see_other("/signin/second-factor"));
    }
    session::sign_in(&session, &user.id)?;
    Ok(see_other(&return_to))
}

/// Accounts sign in with their username, or an e-mail address or phone number
/// they have verified: an unverified address may be anyone's (it is unique
/// only once verified), so it is treated as unknown.
async fn find_account(store: &dyn Store, identifier: &str) -> Result<Option<User>, StoreError> {
    if identifier.contains('@') {
        return match Email::parse(identifier) {
            Ok(email) => Ok(store
                .find_user(UserKey::Email(email.as_str()))
                .await?
                .filter(|u| u.email_verified)),
            Err(_) => Ok(None),
        };
    }
    if Username::parse(identifier).is_ok() {
        if let Some(user) = store.find_user(UserKey::Username(identifier)).await? {
            return Ok(Some(user));
        }
    }
    match Phone::parse(identifier) {
        Ok(phone) => Ok(store
            .find_user(UserKey::Phone(phone.as_str()))
            .await?
            .filter(|u| u.phone_verified)),
        Err(_) => Ok(None),
    }
}

/// Work that costs a password hash or a message is bounded per address: the
/// OAuth endpoints' per-address request limit holds for it too.
pub fn limit_per_address(req: &HttpRequest, state: &AppState) -> Result<(), PageError> {
    state
        .rate_limits
        .check_oauth(client_ip(req))
        .map_err(PageError::wait)
}

/// Keeps each connection's socket with the connection's data, so that a
/// password job can see whether its requester is still there (SPEC §9).
pub fn remember_connection(connection: &dyn Any, data: &mut Extensions) {
    use actix_web::rt::net::TcpStream;
    use std::os::fd::AsFd;
    let socket = if let Some(plain) = connection.downcast_ref::<TcpStream>() {
        plain.as_fd().try_clone_to_owned()
    } else if let Some(tls) = connection.downcast_ref::<TlsStream<TcpStream>>() {
        tls.get_ref().0.as_fd().try_clone_to_owned()
    } else {
        return;
    };
    match socket {
        Ok(socket) => {
            data.insert(Connection::new(socket));
        }
        // Out of descriptors: the request is served, only not watched.
        Err(error) => tracing::warn!(%error, "cannot keep a connection's socket"),
    }
}

/// Who waits for a request's password job: its connection.
pub fn requester(req: &HttpRequest) -> Requester {
    req.conn_data::<Connection>()
        .map(Connection::requester)
        .unwrap_or_default()
}

/// Who a request comes from, for throttling and rate limits: the connection's
/// address (Tally does not trust forwarding headers: run it without a proxy, or
/// make the proxy the only client). An IPv6 address stands for its /64, which
/// one subscriber usually holds whole, so rotating through it gains nothing.
pub fn client_ip(req: &HttpRequest) -> IpAddr {
    req.peer_addr()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| network_of(a.ip()))
}

fn network_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

pub async fn sign_out(Page { state, session }: Page) -> Result<HttpResponse, PageError> {
    session::sign_out(&state, &session).await?;
    Ok(see_other("/signin"))
}

#[cfg(test)]
mod tests {
    use super::network_of;
    use std::net::IpAddr;

    #[test]
    fn an_ipv6_address_stands_for_its_64_and_ipv4_for_itself() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        assert_eq!(
            network_of(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(network_of(ip("2001:db8:1:2::1")), ip("2001:db8:1:2::"));
        assert_eq!(network_of(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(network_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    }
}
