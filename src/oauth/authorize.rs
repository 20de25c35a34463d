//! The authorization endpoint's decisions (RFC 6749 §4.1, §4.2; RFC 7636; RFC
//! 9207), as typed outcomes; the web layer decides how to show them.

use super::credentials::{self, CredentialKind};
use super::id_token::{session_sid, AMR_PASSWORD};
use super::tokens::{self, CLIENT_SIDE_TTL};
use super::{request_params, Field};
use crate::domain::{
    has_forbidden_control, micros, new_id, now_micros, Lines, RedirectUrl, Scope, ScopeError,
    ScopeSet,
};
use crate::store::{App, Consent, NewCode, NewGrant, NewOidcGrant, Store, StoreError};
use std::time::Duration;
use url::Url;

/// Authorization codes live 60 seconds.
pub const CODE_TTL: Duration = Duration::from_secs(60);

request_params! {
    /// The parameters of an authorization request, as received.
    pub struct AuthorizeParams reads [
        client_id, scope, redirect_uri, response_type, state,
        code_challenge, code_challenge_method, prompt,
        // OpenID Connect Core 1.0 §3.1.2.1 (ui_locales, claims_locales and
        // display are accepted and ignored like any unknown parameter).
        nonce, max_age, login_hint, acr_values,
    ] {
        /// Recognized parameters given more than once (SPEC §6), in order.
        pub repeated: Vec<&'static str>,
        /// Parameters, known or not, whose name or value holds a control
        /// character (SPEC §2), in order.
        pub with_controls: Vec<String>,
    }
}

impl AuthorizeParams {
    /// Notes repeats and control characters (in any parameter) for
    /// `validate` to answer in the right place.
    fn take(&mut self, name: &str, value: String, field: Option<&Field<Self>>) {
        if has_forbidden_control(name, Lines::Single)
            || has_forbidden_control(&value, Lines::Single)
        {
            self.with_controls.push(name.to_owned());
        }
        let Some(field) = field else {
            return;
        };
        let slot = (field.slot)(self);
        if slot.is_none() {
            *slot = Some(value);
        } else if !self.repeated.contains(&field.name) {
            self.repeated.push(field.name);
        }
    }

    /// Whether `name` cannot be read: given twice, or holding a control
    /// character.
    fn unreadable(&self, name: &str) -> bool {
        self.repeated.contains(&name) || self.with_controls.iter().any(|n| n == name)
    }

    /// What is wrong with the parameters other than `client_id` and
    /// `redirect_uri`, if anything.
    fn problem(&self) -> Option<String> {
        if let Some(name) = self.repeated.first() {
            return Some(format!("parameter {name} is given more than once"));
        }
        self.with_controls.first().map(|name| {
            format!(
                "parameter {} holds a control character",
                name.escape_debug()
            )
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// `response_type=token`: the token in the redirect (client-side).
    Token,
    /// `response_type=code`: a code to exchange (server-side).
    Code,
}

impl Flow {
    /// The `response_type` that asks for it.
    pub const fn response_type(self) -> &'static str {
        match self {
            Self::Token => "token",
            Self::Code => "code",
        }
    }
}

/// A request whose client and redirect URL are trustworthy.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    pub app: App,
    /// Where to send the answer.
    pub redirect: Url,
    /// The `redirect_uri` as given, which a code exchange must repeat.
    pub redirect_uri_given: Option<String>,
    pub scopes: ScopeSet,
    pub flow: Flow,
    pub state: Option<String>,
    pub code_challenge: Option<String>,
    pub force_consent: bool,
    pub oidc: OidcParams,
}

/// The OpenID Connect parameters of a request (Core §3.1.2.1), read.
#[derive(Debug, Clone, Default)]
pub struct OidcParams {
    /// `prompt=none`: no page may be shown.
    pub prompt_none: bool,
    /// `prompt=login`: the user signs in again, even with a session.
    pub prompt_login: bool,
    /// A sign-in older than this many seconds is asked again.
    pub max_age: Option<i64>,
    pub login_hint: Option<String>,
    pub nonce: Option<String>,
    pub acr_values: Vec<String>,
}

/// The longest `nonce` accepted (it is stored with the grant).
const MAX_NONCE_BYTES: usize = 512;

/// The sign-in behind an approval: when it happened (microseconds) and the
/// browser session's id.
#[derive(Debug, Clone)]
pub struct Authentication {
    pub auth_time: i64,
    pub session_id: String,
    /// The RFC 8176 methods used, space-separated (SPEC §11).
    pub amr: String,
}

impl Authentication {
    /// Whether a second factor was used (`mfa`).
    pub fn is_multi_factor(&self) -> bool {
        crate::auth::factors::is_multi_factor(&self.amr)
    }
}

impl ValidRequest {
    /// The fields a consent form carries back, to validate again on submit.
    pub fn form_fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("client_id", self.app.client_id.clone()),
            ("scope", self.scopes.to_string()),
            ("response_type", self.flow.response_type().to_owned()),
        ];
        if let Some(uri) = &self.redirect_uri_given {
            fields.push(("redirect_uri", uri.clone()));
        }
        if let Some(state) = &self.state {
            fields.push(("state", state.clone()));
        }
        if let Some(challenge) = &self.code_challenge {
            fields.push(("code_challenge", challenge.clone()));
            fields.push(("code_challenge_method", "S256".to_owned()));
        }
        if let Some(nonce) = &self.oidc.nonce {
            fields.push(("nonce", nonce.clone()));
        }
        if !self.oidc.acr_values.is_empty() {
            fields.push(("acr_values", self.oidc.acr_values.join(" ")));
        }
        fields
    }

    /// An OpenID Connect authentication request (SPEC §10).
    pub fn is_openid(&self) -> bool {
        self.scopes.contains(Scope::OpenId)
    }

    /// Whether the user must sign in again before this request is decided:
    /// `prompt=login`, or a sign-in at `auth_time` older than `max_age`.
    pub fn wants_fresh_sign_in(&self, auth_time: i64, now: i64) -> bool {
        self.oidc.prompt_login
            || self.oidc.max_age.is_some_and(|max_age| {
                auth_time < now.saturating_sub(max_age.saturating_mul(1_000_000))
            })
    }

    /// Whether `acr_values` asks for a second factor (SPEC §11).
    pub fn wants_mfa(&self) -> bool {
        self.oidc.acr_values.iter().any(|v| v == "mfa")
    }

    /// A refusal that only the signed-in user's account can cause:
    /// `acr_values=mfa` from a user without a second factor (SPEC §11).
    pub fn refusal_for_user(&self, issuer: &str, has_second_factor: bool) -> Option<Url> {
        (self.wants_mfa() && !has_second_factor).then(|| {
            self.refuse(
                "access_denied",
                "acr_values asks for a second factor (mfa), and this account has no second \
                 factor",
                issuer,
            )
        })
    }

    /// The app's redirect URL carrying `error` (with `state` and `iss`).
    pub fn refuse(&self, error: &str, description: &str, issuer: &str) -> Url {
        error_redirect(
            &self.redirect,
            error,
            description,
            self.state.as_deref(),
            issuer,
        )
    }
}

/// What to do with an authorization request.
#[derive(Debug)]
pub enum Validation {
    /// Client or redirect URL cannot be trusted: show an error page and never
    /// redirect (RFC 6749 §4.1.2.1).
    ErrorPage(String),
    /// Tell the app through its redirect URL, but only a signed-in user: a
    /// browser without a session is shown the sign-in page first, naming the
    /// app, so Tally is no open redirector (RFC 9700 §4.11.2).
    RedirectError {
        app_name: String,
        url: Url,
    },
    Valid(Box<ValidRequest>),
}

/// Checks a request against the registered app and the redirect policy.
#[tracing::instrument(skip_all)]
pub async fn validate(
    store: &dyn Store,
    params: &AuthorizeParams,
    issuer: &str,
) -> Result<Validation, StoreError> {
    // Checked before the look-up: a control character never reaches the
    // database, and a repeated client_id leaves no app to trust.
    if params.unreadable("client_id") {
        return Ok(Validation::ErrorPage(
            "The request's client_id is given more than once or holds a control character.".into(),
        ));
    }
    let Some(client_id) = params.client_id.as_deref().filter(|c| !c.is_empty()) else {
        return Ok(Validation::ErrorPage(
            "The request names no app (client_id is missing).".into(),
        ));
    };
    let app = match store.find_app(client_id).await? {
        Some(app) if !app.suspended => app,
        Some(_) => return Ok(Validation::ErrorPage("This app is suspended.".into())),
        None => return Ok(Validation::ErrorPage("No app has this client_id.".into())),
    };
    let Some(registered) = app
        .redirect_url
        .as_deref()
        .and_then(|u| RedirectUrl::parse(u).ok())
    else {
        return Ok(Validation::ErrorPage(
            "This app has no valid Web Redirect URL, so it cannot ask for authorization.".into(),
        ));
    };
    if params.unreadable("redirect_uri") {
        return Ok(Validation::ErrorPage(
            "The request's redirect_uri is given more than once or holds a control character."
                .into(),
        ));
    }
    let redirect = match params.redirect_uri.as_deref().filter(|u| !u.is_empty()) {
        None => registered.url().clone(),
        Some(given) => match allowed_override(&registered, given) {
            Some(url) => url,
            None => {
                return Ok(Validation::ErrorPage(
                    "The redirect_uri does not match the app's registered Web Redirect URL.".into(),
                ))
            }
        },
    };
    // A state that cannot be read is not echoed: which copy would be the app's?
    let state = params
        .state
        .clone()
        .filter(|s| !s.is_empty() && !params.unreadable("state"));
    let fail = |error: &str, description: &str| {
        Ok(Validation::RedirectError {
            app_name: app.name.clone(),
            url: error_redirect(&redirect, error, description, state.as_deref(), issuer),
        })
    };
    if let Some(problem) = params.problem() {
        return fail("invalid_request", &problem);
    }
    let flow = match params.response_type.as_deref().unwrap_or("token") {
        "token" | "" => Flow::Token,
        "code" => Flow::Code,
        _ => {
            return fail(
                "unsupported_response_type",
                "response_type must be token or code",
            )
        }
    };
    let scopes = match ScopeSet::parse(params.scope.as_deref().unwrap_or("")) {
        Ok(scopes) => scopes,
        Err(ScopeError::Empty) => return fail("invalid_scope", "scope is required"),
        Err(ScopeError::Unknown(name)) => {
            return fail("invalid_scope", &format!("unknown scope {name}"))
        }
    };
    // SPEC §10: no ID token travels in a URL.
    if flow == Flow::Token && scopes.contains(Scope::OpenId) {
        return fail(
            "invalid_scope",
            "openid needs response_type=code: an ID token never travels in a URL",
        );
    }
    let prompts: Vec<&str> = params
        .prompt
        .as_deref()
        .unwrap_or("")
        .split(' ')
        .filter(|p| !p.is_empty())
        .collect();
    // Core §3.1.2.1: none with any other value is an error.
    if prompts.contains(&"none") && prompts.len() > 1 {
        return fail(
            "invalid_request",
            "prompt=none cannot be combined with other values",
        );
    }
    let max_age = match params.max_age.as_deref().filter(|m| !m.is_empty()) {
        None => None,
        Some(text) => match text.parse::<u32>() {
            Ok(seconds) => Some(i64::from(seconds)),
            Err(_) => return fail("invalid_request", "max_age must be a number of seconds"),
        },
    };
    let nonce = params.nonce.clone().filter(|n| !n.is_empty());
    if nonce.as_ref().is_some_and(|n| n.len() > MAX_NONCE_BYTES) {
        return fail("invalid_request", "nonce is longer than 512 bytes");
    }
    let oidc = OidcParams {
        prompt_none: prompts.contains(&"none"),
        prompt_login: prompts.contains(&"login"),
        max_age,
        login_hint: params.login_hint.clone().filter(|h| !h.is_empty()),
        nonce,
        acr_values: params
            .acr_values
            .as_deref()
            .unwrap_or("")
            .split(' ')
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect(),
    };
    let code_challenge = match (
        flow,
        params.code_challenge.as_deref().filter(|c| !c.is_empty()),
    ) {
        (Flow::Token, _) | (Flow::Code, None) => None,
        (Flow::Code, Some(challenge)) => {
            if params.code_challenge_method.as_deref() != Some("S256") {
                return fail("invalid_request", "code_challenge_method must be S256");
            }
            if !is_pkce_value(challenge) {
                return fail("invalid_request", "code_challenge is malformed");
            }
            Some(challenge.to_owned())
        }
    };
    Ok(Validation::Valid(Box::new(ValidRequest {
        redirect_uri_given: params.redirect_uri.clone().filter(|u| !u.is_empty()),
        app,
        redirect,
        scopes,
        flow,
        state,
        code_challenge,
        force_consent: prompts.contains(&"consent"),
        oidc,
    })))
}

/// Parameters Tally adds to an authorization response. An override whose own
/// query already has one would hand the app two values, the first of them
/// chosen by whoever crafted the link.
const RESPONSE_PARAMETERS: &[&str] = &[
    "access_token",
    "token_type",
    "expires_in",
    "scope",
    "state",
    "code",
    "iss",
    "id_token",
    "error",
    "error_description",
];

/// The override policy (SPEC §6): `RedirectUrl::admits_override` (origin,
/// path, dot segments, fragment), and a query free of the response's
/// parameters, whatever their letter case: many apps read query names without
/// regard to case, so `Access_Token` would stand for `access_token` there.
/// A post-logout URL (SPEC §10) must pass it too.
pub(crate) fn allowed_override(registered: &RedirectUrl, given: &str) -> Option<Url> {
    let given = registered.admits_override(given)?;
    let clean_query = !given.url().query_pairs().any(|(name, _)| {
        RESPONSE_PARAMETERS
            .iter()
            .any(|parameter| parameter.eq_ignore_ascii_case(&name))
    });
    clean_query.then(|| given.url().clone())
}

/// RFC 7636 §4.1: 43 to 128 characters of the unreserved set.
pub fn is_pkce_value(value: &str) -> bool {
    (43..=128).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether the user must be asked: consent is remembered per user, app, exact
/// scope set and response type, so a consent to the code flow never hands out
/// a token in a URL.
pub async fn needs_consent(
    store: &dyn Store,
    user_id: &str,
    request: &ValidRequest,
) -> Result<bool, StoreError> {
    if request.force_consent {
        return Ok(true);
    }
    let scopes = request.scopes.to_string();
    Ok(!store
        .has_consent(consent(user_id, request, &scopes))
        .await?)
}

/// The consent `request` asks of the user; `scopes` is its scope set as text.
fn consent<'a>(user_id: &'a str, request: &'a ValidRequest, scopes: &'a str) -> Consent<'a> {
    Consent {
        user_id,
        client_id: &request.app.client_id,
        scopes,
        response_type: request.flow.response_type(),
    }
}

/// The user allowed: remember it, issue a token or a code, and build the
/// redirect that carries it.
#[tracing::instrument(skip_all, fields(client_id = %request.app.client_id))]
pub async fn approve(
    store: &dyn Store,
    user_id: &str,
    request: &ValidRequest,
    issuer: &str,
    signed_in: &Authentication,
) -> Result<Url, StoreError> {
    let now = now_micros();
    let scopes = request.scopes.to_string();
    store
        .insert_consent(consent(user_id, request, &scopes), now)
        .await?;
    let mut redirect = request.redirect.clone();
    match request.flow {
        Flow::Token => {
            let token = tokens::issue_access_token(
                store,
                user_id,
                Some(&request.app.client_id),
                &request.scopes,
                Flow::Token.response_type(),
                CLIENT_SIDE_TTL,
            )
            .await?;
            redirect
                .query_pairs_mut()
                .append_pair("access_token", token.expose())
                .append_pair("token_type", "bearer")
                .append_pair("expires_in", &CLIENT_SIDE_TTL.as_secs().to_string())
                .append_pair("scope", &scopes);
        }
        Flow::Code => {
            let code = credentials::generate(CredentialKind::AuthorizationCode);
            let grant = NewGrant {
                id: new_id(),
                user_id: user_id.to_owned(),
                client_id: Some(request.app.client_id.clone()),
                scopes,
                flow: Flow::Code.response_type(),
                created_at: now,
            };
            let new_code = NewCode {
                digest: code.digest.clone(),
                redirect_uri: request.redirect_uri_given.clone(),
                code_challenge: request.code_challenge.clone(),
                created_at: now,
                expires_at: now + micros(CODE_TTL),
            };
            if request.is_openid() {
                // What the grant's ID tokens will say of this sign-in.
                let oidc = NewOidcGrant {
                    auth_time: signed_in.auth_time,
                    sid: session_sid(&signed_in.session_id),
                    nonce: request.oidc.nonce.clone(),
                    acr: (!request.oidc.acr_values.is_empty()).then(|| {
                        if signed_in.is_multi_factor() {
                            "mfa".to_owned()
                        } else {
                            AMR_PASSWORD.to_owned()
                        }
                    }),
                    amr: signed_in.amr.clone(),
                };
                store
                    .insert_grant_with_code_and_oidc(&grant, &new_code, &oidc)
                    .await?;
            } else {
                store.insert_grant_with_code(&grant, &new_code).await?;
            }
            redirect
                .query_pairs_mut()
                .append_pair("code", code.expose());
        }
    }
    finish(&mut redirect, request.state.as_deref(), issuer);
    Ok(redirect)
}

/// The user said no.
pub fn deny(request: &ValidRequest, issuer: &str) -> Url {
    error_redirect(
        &request.redirect,
        "access_denied",
        "the user denied the request",
        request.state.as_deref(),
        issuer,
    )
}

fn error_redirect(
    redirect: &Url,
    error: &str,
    description: &str,
    state: Option<&str>,
    issuer: &str,
) -> Url {
    let mut url = redirect.clone();
    url.query_pairs_mut()
        .append_pair("error", error)
        .append_pair("error_description", description);
    finish(&mut url, state, issuer);
    url
}

/// Every authorization response echoes `state` and names the issuer (RFC 9207).
fn finish(url: &mut Url, state: Option<&str>, issuer: &str) {
    let mut pairs = url.query_pairs_mut();
    if let Some(state) = state {
        pairs.append_pair("state", state);
    }
    pairs.append_pair("iss", issuer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_may_not_hold_a_response_parameter_in_any_letter_case() {
        let Ok(registered) = RedirectUrl::parse("https://app.example.com/cb") else {
            panic!("a valid redirect URL");
        };
        let base = "https://app.example.com/cb";
        for (query, allowed) in [
            ("", true),
            ("?x=1", true),
            ("?tokens=1&codes=2", true),
            ("?access_token_hint=1", true),
            ("?access_token=x", false),
            ("?Access_Token=x", false),
            ("?ACCESS_TOKEN=x", false),
            ("?access%5Ftoken=x", false),
            ("?Access%5FToken=x", false),
            ("?x=1&CODE=x", false),
            ("?State=x", false),
            ("?ISS=x", false),
            ("?Error_Description=x", false),
            ("?Token_Type=x", false),
            ("?Expires_In=x", false),
            ("?sCoPe=x", false),
            ("?ERROR", false),
        ] {
            assert_eq!(
                allowed_override(&registered, &format!("{base}{query}")).is_some(),
                allowed,
                "{query}"
            );
        }
        // Every response parameter, in upper case, is refused.
        for parameter in RESPONSE_PARAMETERS {
            let query = format!("?{}=x", parameter.to_ascii_uppercase());
            assert!(
                allowed_override(&registered, &format!("{base}{query}")).is_none(),
                "{query}"
            );
        }
    }
}
