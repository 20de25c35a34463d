//! The OAuth endpoints that answer JSON: token (RFC 6749 §3.2), device
//! authorization (RFC 8628 §3.1), revocation (RFC 7009), introspection (RFC
//! 7662) and server metadata (RFC 8414). Errors follow RFC 6749 §5.2:
//! `{"error","error_description"}`.

use super::params::{self, ParamValue};
use super::principal::Principal;
use super::render::UserView;
use super::ApiError;
use crate::domain::{has_forbidden_control, Lines, Money, Scope, ScopeSet};
use crate::oauth::client_auth::{self, GrantError};
use crate::oauth::device;
use crate::oauth::grants::{self, GrantRequest};
use crate::oauth::tokens::introspect_for_client;
use crate::oauth::{credentials, IntrospectError};
use crate::state::AppState;
use crate::store::{App, TokenKind};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use base64::Engine;
use secrecy::ExposeSecret;
use serde::Serialize;
use std::collections::HashMap;

#[derive(Debug, thiserror::Error)]
#[error("{error}: {description}")]
pub struct OAuthError {
    error: &'static str,
    description: String,
    status: StatusCode,
    /// The client authenticated with HTTP Basic, so a 401 names that scheme.
    basic: bool,
    /// Seconds for `Retry-After` on a 429.
    retry_after_secs: Option<u64>,
}

impl OAuthError {
    /// An error for a client that did not use HTTP Basic, with no `Retry-After`.
    fn new(error: &'static str, description: impl Into<String>, status: StatusCode) -> Self {
        Self {
            error,
            description: description.into(),
            status,
            basic: false,
            retry_after_secs: None,
        }
    }

    fn invalid_request(description: impl Into<String>) -> Self {
        Self::new("invalid_request", description, StatusCode::BAD_REQUEST)
    }

    /// A request refused before its parameters are read (its body too large,
    /// too slow or unreadable, its media type or its method unknown), in the
    /// OAuth shape with the REST API's status for it.
    pub fn refused_request(error: ApiError) -> Self {
        let status = match error {
            ApiError::PayloadTooLarge
            | ApiError::UnsupportedMediaType
            | ApiError::RequestTimeout
            | ApiError::MethodNotAllowed { .. } => error.status_code(),
            _ => StatusCode::BAD_REQUEST,
        };
        Self {
            status,
            ..Self::invalid_request(error.to_string())
        }
    }

    /// Too many requests from one address (SPEC §9). RFC 6749 has no code for
    /// it, so the error names it as the REST API does.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self {
            retry_after_secs: Some(retry_after_secs),
            ..Self::new(
                "rate_limited",
                format!("too many requests; retry in {retry_after_secs} seconds"),
                StatusCode::TOO_MANY_REQUESTS,
            )
        }
    }
}

impl From<GrantError> for OAuthError {
    fn from(error: GrantError) -> Self {
        let status = match &error {
            GrantError::InvalidClient(_) => StatusCode::UNAUTHORIZED,
            GrantError::Store(crate::store::StoreError::Unavailable(_)) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            GrantError::Store(e) => {
                tracing::error!(error = ?e, "token endpoint failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
            _ => StatusCode::BAD_REQUEST,
        };
        if status == StatusCode::SERVICE_UNAVAILABLE {
            if let GrantError::Store(e) = &error {
                tracing::warn!(error = %e, "database unavailable");
            }
            // RFC 6749 names this condition only for the authorization
            // endpoint; the JSON endpoints use the same code.
            return Self {
                retry_after_secs: Some(super::UNAVAILABLE_RETRY_AFTER_SECS),
                ..Self::new(
                    "temporarily_unavailable",
                    "the database cannot be reached; retry later",
                    status,
                )
            };
        }
        let description = match &error {
            GrantError::Store(_) => "the server could not complete the request".to_owned(),
            other => other.to_string(),
        };
        Self::new(error.code(), description, status)
    }
}

impl From<crate::store::StoreError> for OAuthError {
    fn from(error: crate::store::StoreError) -> Self {
        GrantError::Store(error).into()
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    error_description: &'a str,
}

impl ResponseError for OAuthError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        no_store(&mut response);
        if self.status == StatusCode::UNAUTHORIZED {
            let scheme = if self.basic {
                r#"Basic realm="tally""#
            } else {
                r#"Basic realm="tally", error="invalid_client""#
            };
            response.insert_header((header::WWW_AUTHENTICATE, scheme));
        }
        if let Some(secs) = self.retry_after_secs {
            response.insert_header((header::RETRY_AFTER, secs.to_string()));
        }
        response.json(ErrorBody {
            error: self.error,
            error_description: &self.description,
        })
    }
}

/// RFC 6749 §5.1: token responses must not be cached.
fn no_store(response: &mut actix_web::HttpResponseBuilder) {
    response
        .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .insert_header((header::PRAGMA, HeaderValue::from_static("no-cache")));
}

/// A 200 answer of the token endpoints, never cached.
fn uncached(body: impl Serialize) -> HttpResponse {
    let mut response = HttpResponse::Ok();
    no_store(&mut response);
    response.json(body)
}

/// The parameters the token endpoint reads; any other is ignored.
const TOKEN_PARAMETERS: &[&str] = &[
    "grant_type",
    "code",
    "redirect_uri",
    "code_verifier",
    "refresh_token",
    "device_code",
    "scope",
    "client_id",
    "client_secret",
];

/// The parameters the device authorization endpoint reads.
const DEVICE_AUTHORIZATION_PARAMETERS: &[&str] = &["scope", "client_id", "client_secret"];

/// The parameters revocation and introspection read; any other is ignored.
const TOKEN_CHECK_PARAMETERS: &[&str] = &["token", "token_type_hint", "client_id", "client_secret"];

/// The recognized parameters of an OAuth request, from the query string and
/// the body.
struct OAuthParams(HashMap<&'static str, ParamValue>);

/// Reads an OAuth request's parameters, before any client authentication: a
/// control character in any of them is `invalid_request` (SPEC §2), and so is
/// a recognized parameter given twice, even with the same value (SPEC §6);
/// other parameters are ignored however often they come (e.g. RFC 8707
/// `resource`).
async fn read_params(
    req: &HttpRequest,
    payload: web::Payload,
    recognized: &[&'static str],
) -> Result<OAuthParams, OAuthError> {
    let mut payload = payload.into_inner();
    let sent = params::read_as_sent(req, &mut payload)
        .await
        .map_err(OAuthError::refused_request)?;
    for (name, value) in &sent.pairs {
        let value_has_control = matches!(
            value,
            ParamValue::Text(text) | ParamValue::Number(text)
                if has_forbidden_control(text, Lines::Single)
        );
        if value_has_control || has_forbidden_control(name, Lines::Single) {
            return Err(OAuthError::invalid_request(format!(
                "parameter {} holds a control character",
                name.escape_debug()
            )));
        }
    }
    let mut map = HashMap::new();
    for (name, value) in sent.pairs {
        let Some(known) = recognized.iter().copied().find(|k| *k == name) else {
            continue;
        };
        if map.insert(known, value).is_some() {
            return Err(OAuthError::invalid_request(format!(
                "parameter {known} is given more than once"
            )));
        }
    }
    Ok(OAuthParams(map))
}

/// A text parameter (a JSON number is taken as its text: old clients send
/// client ids as numbers); absent, null or empty is `None`.
fn text(params: &OAuthParams, name: &str) -> Result<Option<String>, OAuthError> {
    match params.0.get(name) {
        None | Some(ParamValue::Null) => Ok(None),
        Some(ParamValue::Text(value) | ParamValue::Number(value)) => {
            Ok(Some(value.clone()).filter(|v| !v.is_empty()))
        }
        Some(_) => Err(OAuthError::invalid_request(format!(
            "parameter {name} must be a string or a number"
        ))),
    }
}

/// Client credentials from HTTP Basic (RFC 6749 §2.3.1, form-encoded inside) or
/// from the `client_id` and `client_secret` parameters.
async fn authenticate_client(
    req: &HttpRequest,
    state: &AppState,
    params: &OAuthParams,
) -> Result<App, OAuthError> {
    let credentials = client_credentials(req, params)?;
    client_auth::authenticate_client(
        state.store.as_ref(),
        &state.client_cache,
        &credentials.id,
        &credentials.secret,
    )
    .await
    .map_err(|e| credentials.refusal(e))
}

/// Client credentials as presented, not yet checked.
struct ClientCredentials {
    id: String,
    secret: String,
    /// Given with HTTP Basic, so a 401 names that scheme.
    basic: bool,
}

impl ClientCredentials {
    fn refusal(&self, error: GrantError) -> OAuthError {
        OAuthError {
            basic: self.basic,
            ..error.into()
        }
    }
}

fn client_credentials(
    req: &HttpRequest,
    params: &OAuthParams,
) -> Result<ClientCredentials, OAuthError> {
    let basic = match req.headers().get(header::AUTHORIZATION) {
        Some(value) => {
            let value = value.to_str().unwrap_or("");
            match value.split_once(' ') {
                Some((scheme, encoded)) if scheme.eq_ignore_ascii_case("basic") => {
                    Some(decode_basic(encoded.trim()).ok_or_else(|| OAuthError {
                        basic: true,
                        ..OAuthError::from(GrantError::InvalidClient(
                            "malformed Basic credentials".into(),
                        ))
                    })?)
                }
                _ => None,
            }
        }
        None => None,
    };
    // A control character never reaches the look-up (SPEC §2).
    if let Some((id, secret)) = &basic {
        if has_forbidden_control(id, Lines::Single) || has_forbidden_control(secret, Lines::Single)
        {
            return Err(OAuthError::invalid_request(
                "the Basic credentials hold a control character",
            ));
        }
    }
    let form_id = text(params, "client_id")?;
    let form_secret = text(params, "client_secret")?;
    let used_basic = basic.is_some();
    let (client_id, secret) = match basic {
        Some((id, secret)) => {
            if form_id.as_ref().is_some_and(|f| *f != id) || form_secret.is_some() {
                return Err(OAuthError::invalid_request(
                    "client credentials given both in the header and in the body",
                ));
            }
            (id, secret)
        }
        None => match (form_id, form_secret) {
            (Some(id), Some(secret)) => (id, secret),
            _ => {
                return Err(
                    GrantError::InvalidClient("client authentication is required".into()).into(),
                )
            }
        },
    };
    Ok(ClientCredentials {
        id: client_id,
        secret,
        basic: used_basic,
    })
}

fn decode_basic(encoded: &str) -> Option<(String, String)> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (id, secret) = text.split_once(':')?;
    let decode = |s: &str| {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Some((decode(id)?, decode(secret)?))
}

#[derive(Serialize)]
struct TokenResponse {
    access_token: String,
    token_type: &'static str,
    expires_in: u64,
    refresh_token: String,
    scope: String,
    balance: Option<Money>,
    user: UserView,
    /// OpenID Connect (SPEC §10): for a grant whose scope holds `openid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
}

/// `POST /oauth/access_token` (and `/oauth/token`).
pub async fn token(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, OAuthError> {
    let params = read_params(&req, payload, TOKEN_PARAMETERS).await?;
    let app = authenticate_client(&req, &state, &params).await?;
    let grant_type = text(&params, "grant_type")?;
    let code = text(&params, "code")?;
    let refresh_token = text(&params, "refresh_token")?;
    // Old clients leave grant_type out; the parameters tell which grant it is.
    let request = match (grant_type.as_deref(), code, refresh_token) {
        (Some(device::GRANT_TYPE), _, _) => GrantRequest::DeviceCode {
            device_code: text(&params, "device_code")?
                .ok_or_else(|| OAuthError::invalid_request("device_code is required"))?,
        },
        (Some("authorization_code") | None, Some(code), None) => GrantRequest::AuthorizationCode {
            code,
            redirect_uri: text(&params, "redirect_uri")?,
            code_verifier: text(&params, "code_verifier")?,
        },
        (Some("refresh_token") | None, None, Some(refresh_token)) => {
            let scope = text(&params, "scope")?
                .map(|s| ScopeSet::parse(&s))
                .transpose()
                .map_err(|e| GrantError::InvalidScope(e.to_string()))?;
            GrantRequest::RefreshToken {
                refresh_token,
                scope,
            }
        }
        (Some("authorization_code"), None, _) => {
            return Err(OAuthError::invalid_request("code is required"))
        }
        (Some("refresh_token"), _, None) => {
            return Err(OAuthError::invalid_request("refresh_token is required"))
        }
        (None | Some("authorization_code" | "refresh_token"), _, _) => {
            return Err(OAuthError::invalid_request(
                "give either a code or a refresh_token",
            ))
        }
        (Some(_), _, _) => return Err(GrantError::UnsupportedGrantType.into()),
    };
    let issued = grants::exchange(state.store.as_ref(), &app, request).await?;
    let balance = issued
        .scopes
        .contains(Scope::AccessBalance)
        .then(|| Money::from_cents(issued.user.balance_cents));
    let id_token = if issued.scopes.contains(Scope::OpenId) {
        crate::oauth::id_token::issue(
            state.store.as_ref(),
            &state.signing_keys,
            crate::oauth::id_token::IdTokenFor {
                issuer: &state.public_origin,
                client_id: &app.client_id,
                user_id: &issued.user.id,
                grant_id: &issued.grant_id,
                access_token: issued.access_token.expose(),
                refreshed: issued.refreshed,
            },
        )
        .await
        .map_err(|e| match e {
            crate::oauth::keys::KeyError::Store(e) => OAuthError::from(e),
            crate::oauth::keys::KeyError::Unexpected(e) => {
                OAuthError::from(crate::store::StoreError::Unexpected(e))
            }
        })?
    } else {
        None
    };
    let body = TokenResponse {
        id_token,
        access_token: issued.access_token.expose().to_owned(),
        token_type: "bearer",
        expires_in: crate::oauth::tokens::SERVER_SIDE_TTL.as_secs(),
        refresh_token: issued.refresh_token.secret.expose_secret().to_owned(),
        scope: issued.scopes.to_string(),
        balance,
        user: UserView::from(&issued.user),
    };
    Ok(uncached(body))
}

#[derive(Serialize)]
struct DeviceAuthorizationResponse {
    device_code: String,
    user_code: String,
    verification_uri: String,
    verification_uri_complete: String,
    expires_in: u64,
    interval: i64,
}

/// `POST /oauth/device_authorization` (RFC 8628 §3.1): a device asks for a
/// device code and a user code, for scopes read as at authorize.
pub async fn device_authorization(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, OAuthError> {
    let params = read_params(&req, payload, DEVICE_AUTHORIZATION_PARAMETERS).await?;
    let app = authenticate_client(&req, &state, &params).await?;
    let scopes = ScopeSet::parse(&text(&params, "scope")?.unwrap_or_default())
        .map_err(|e| GrantError::InvalidScope(e.to_string()))?;
    let started = device::start(state.store.as_ref(), &app.client_id, &scopes).await?;
    let verification_uri = format!("{}/device", state.public_origin);
    let user_code = started.user_code.to_string();
    Ok(uncached(DeviceAuthorizationResponse {
        device_code: started.device_code.expose().to_owned(),
        verification_uri_complete: format!("{verification_uri}?user_code={user_code}"),
        verification_uri,
        user_code,
        expires_in: started.expires_in.as_secs(),
        interval: started.interval_secs,
    }))
}

/// `POST /oauth/revoke` (RFC 7009): the app revokes one of its own tokens. The
/// answer is 200 whether or not the token was known (§2.2), with the JSON body
/// `{}`: clients that parse every answer as JSON (simple-oauth2) fail on an
/// empty one.
pub async fn revoke(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, OAuthError> {
    let params = read_params(&req, payload, TOKEN_CHECK_PARAMETERS).await?;
    let app = authenticate_client(&req, &state, &params).await?;
    let token =
        text(&params, "token")?.ok_or_else(|| OAuthError::invalid_request("token is required"))?;
    state
        .store
        .revoke_token(
            &credentials::digest(&token),
            Some(&app.client_id),
            crate::domain::now_micros(),
        )
        .await?;
    Ok(uncached(serde_json::json!({})))
}

/// `DELETE /oauth/access_token`: revokes the token that authenticates the call.
pub async fn revoke_presented(
    principal: Principal,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    state
        .store
        .revoke_token(&principal.token_digest, None, crate::domain::now_micros())
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Serialize)]
struct Introspection {
    active: bool,
    scope: String,
    client_id: Option<String>,
    username: String,
    sub: String,
    token_type: &'static str,
    exp: i64,
    iat: i64,
    iss: String,
}

/// `POST /oauth/introspect` (RFC 7662): for a registered app. A dead or unknown
/// token gets only `{"active":false}`.
pub async fn introspection(
    req: HttpRequest,
    state: web::Data<AppState>,
    payload: web::Payload,
) -> Result<HttpResponse, OAuthError> {
    let params = read_params(&req, payload, TOKEN_CHECK_PARAMETERS).await?;
    let client = client_credentials(&req, &params)?;
    let token = match text(&params, "token") {
        Ok(Some(token)) => token,
        // The client's refusal, if any, comes first.
        unusable => {
            authenticate_client(&req, &state, &params).await?;
            unusable?;
            return Err(OAuthError::invalid_request("token is required"));
        }
    };
    let found = introspect_for_client(
        state.store.as_ref(),
        &state.introspection_cache,
        &client.id,
        &client.secret,
        &token,
    )
    .await
    .map_err(|e| client.refusal(e))?;
    match found {
        Ok(active) => Ok(uncached(Introspection {
            active: true,
            scope: active.scopes.to_string(),
            client_id: active.client_id,
            username: active.user.username,
            sub: active.user.id,
            token_type: match active.kind {
                // RFC 7662 §2.2 after RFC 6749 §7.1: the type a client
                // presents it as.
                TokenKind::Access => "bearer",
                TokenKind::Refresh => "refresh_token",
            },
            exp: active.expires_at / 1_000_000,
            iat: active.issued_at / 1_000_000,
            iss: state.public_origin.clone(),
        })),
        Err(IntrospectError::Store(e)) => Err(e.into()),
        Err(_) => Ok(uncached(serde_json::json!({"active": false}))),
    }
}

/// `GET /.well-known/oauth-authorization-server` (RFC 8414), at the origin.
pub async fn metadata(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(server_metadata(&state.public_origin))
}

/// The authorization server's metadata: RFC 8414's document and OpenID
/// Connect Discovery 1.0's are this one, with one issuer (the public origin,
/// every ID token's `iss` too). Only endpoints that exist are named.
pub fn server_metadata(origin: &str) -> serde_json::Value {
    let oauth = format!("{origin}/v1/oauth");
    let scopes: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
    let algs: Vec<&str> = crate::oauth::keys::IdTokenAlg::ALL
        .iter()
        .map(|a| a.as_str())
        .collect();
    serde_json::json!({
        "issuer": origin,
        "authorization_endpoint": format!("{oauth}/authorize"),
        "token_endpoint": format!("{oauth}/access_token"),
        "userinfo_endpoint": format!("{oauth}/userinfo"),
        "jwks_uri": format!("{oauth}/jwks"),
        "end_session_endpoint": format!("{oauth}/logout"),
        "revocation_endpoint": format!("{oauth}/revoke"),
        "introspection_endpoint": format!("{oauth}/introspect"),
        "device_authorization_endpoint": format!("{oauth}/device_authorization"),
        "scopes_supported": scopes,
        "response_types_supported": ["code", "token"],
        "response_modes_supported": ["query"],
        "grant_types_supported": [
            "authorization_code", "refresh_token", "implicit", device::GRANT_TYPE,
        ],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": algs,
        "claims_supported": [
            "iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "at_hash", "amr", "acr",
            "sid", "name", "given_name", "family_name", "preferred_username", "picture", "updated_at",
            "email", "email_verified", "phone_number", "phone_number_verified",
        ],
        "prompt_values_supported": ["none", "login", "consent"],
        "acr_values_supported": ["pwd", "mfa"],
        "claims_parameter_supported": false,
        "request_parameter_supported": false,
        "request_uri_parameter_supported": false,
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": true,
    })
}
