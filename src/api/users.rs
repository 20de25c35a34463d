//! `/me`, `/users/:user_id`, `/users?query=` and `/users/:user_id/friends`.

use super::params::Params;
use super::principal::Principal;
use super::principal::PrincipalWithFriendsCount;
use super::query::{self, given};
use super::render::{self, Page, Pagination, UserView};
use super::ApiError;
use crate::domain::{Email, Money, Phone, Scope};
use crate::state::AppState;
use crate::store::{User, UserKey, UserSearch};
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use serde::Serialize;

#[derive(Serialize)]
struct Me {
    balance: Option<Money>,
    user: MeUser,
}

/// The user object with what only its owner sees.
#[derive(Serialize)]
struct MeUser {
    #[serde(flatten)]
    user: UserView,
    is_friend: bool,
    friends_count: i64,
    email: Option<String>,
    phone: Option<String>,
}

/// Answered from the one statement that checks the token: it reads the user
/// row (so the balance is as of this request) and the friend count with it.
#[tracing::instrument(skip_all)]
pub async fn me(found: PrincipalWithFriendsCount) -> Result<HttpResponse, ApiError> {
    let PrincipalWithFriendsCount {
        principal,
        friends_count,
    } = found;
    principal.require(Scope::AccessProfile)?;
    let user = &principal.user;
    Ok(render::ok(Me {
        balance: principal
            .has(Scope::AccessBalance)
            .then(|| Money::from_cents(user.balance_cents)),
        user: MeUser {
            user: UserView::from(user),
            is_friend: false,
            friends_count,
            email: user
                .email
                .as_deref()
                .and_then(render::present)
                .filter(|_| principal.has(Scope::AccessEmail)),
            phone: user
                .phone
                .as_deref()
                .and_then(render::present)
                .filter(|_| principal.has(Scope::AccessPhone)),
        },
    }))
}

/// The `{user_id}` of the path, as matched (empty if the route has none).
pub struct UserId(String);

impl FromRequest for UserId {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let id = req.match_info().get("user_id").unwrap_or("");
        std::future::ready(Ok(Self(id.to_owned())))
    }
}

async fn existing_user(state: &AppState, id: &str) -> Result<User, ApiError> {
    state
        .store
        .find_user(UserKey::Id(id))
        .await?
        .ok_or(ApiError::NotFound)
}

#[tracing::instrument(skip_all)]
pub async fn show(
    state: web::Data<AppState>,
    principal: Principal,
    UserId(id): UserId,
) -> Result<HttpResponse, ApiError> {
    principal.require(Scope::AccessProfile)?;
    // The token owner's row came with the token.
    if id == principal.user.id {
        return Ok(render::ok(UserView::from(&principal.user)));
    }
    let user = existing_user(&state, &id).await?;
    Ok(render::ok(UserView::from(&user)))
}

/// Escapes `LIKE` wildcards so a lower-case needle matches literally.
fn like_pattern(needle: &str) -> String {
    let mut pattern = String::from("%");
    for c in needle.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[tracing::instrument(skip_all)]
pub async fn search(
    state: web::Data<AppState>,
    principal: Principal,
    params: Params,
) -> Result<HttpResponse, ApiError> {
    principal.require(Scope::AccessProfile)?;
    let text = params.required("query")?.trim();
    if text.chars().count() > 100 {
        return Err(ApiError::InvalidRequest(
            "query must be at most 100 characters long".to_owned(),
        ));
    }
    let limit = query::limit(&params)?;
    let offset = query::offset(&params)?;
    let needle = text.to_lowercase();
    let mut users = state
        .store
        .search_users(&UserSearch {
            pattern: like_pattern(&needle),
            needle,
            email: Email::parse(text).ok().map(|e| e.as_str().to_owned()),
            phone: Phone::parse(text).ok().map(|p| p.as_str().to_owned()),
            limit: limit + 1,
            offset,
        })
        .await?;
    let next = query::end_of_page(&mut users, limit).map(|_| {
        query::page_url(
            &state.public_origin,
            "/users",
            &[
                ("query", text.to_owned()),
                ("limit", limit.to_string()),
                ("offset", (offset + limit).to_string()),
            ],
        )
    });
    Ok(HttpResponse::Ok().json(Page {
        data: users.iter().map(UserView::from).collect(),
        pagination: Pagination { next },
    }))
}

#[tracing::instrument(skip_all)]
pub async fn friends(
    state: web::Data<AppState>,
    principal: Principal,
    params: Params,
    UserId(id): UserId,
) -> Result<HttpResponse, ApiError> {
    principal.require(Scope::AccessFriends)?;
    let limit = query::limit(&params)?;
    let after = given(&params, "after")?.map(str::trim);
    let mut friends = state.store.list_friends(&id, after, limit + 1).await?;
    // A friend proves the user exists (friendships name users); only an empty
    // page needs to ask, and not for the token owner, read with the token.
    if friends.is_empty() && id != principal.user.id {
        existing_user(&state, &id).await?;
    }
    let next = query::end_of_page(&mut friends, limit).map(|last| {
        query::page_url(
            &state.public_origin,
            &format!("/users/{id}/friends"),
            &[("limit", limit.to_string()), ("after", last.id.clone())],
        )
    });
    Ok(HttpResponse::Ok().json(Page {
        data: friends.iter().map(UserView::from).collect(),
        pagination: Pagination { next },
    }))
}
