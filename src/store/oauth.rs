//! Storage of the authorization server: consents, grants, tokens and codes.
//! Single-use things (codes, refresh tokens) are consumed by one guarded
//! statement, never found first and deleted after.

use super::User;

/// A single-use credential (a code or a refresh token) as an app presents it:
/// its digest, the app, and the moment.
#[derive(Debug, Clone, Copy)]
pub struct Presented<'a> {
    pub digest: &'a str,
    pub client_id: &'a str,
    pub now: i64,
}

/// A secret sealed for its single showing to its user.
#[derive(Debug, Clone)]
pub struct NewReveal {
    pub id: String,
    pub user_id: String,
    pub sealed: String,
    pub created_at: i64,
}

/// A user's consent to an app: remembered per exact scope set and response
/// type (`token` or `code`).
#[derive(Debug, Clone, Copy)]
pub struct Consent<'a> {
    pub user_id: &'a str,
    pub client_id: &'a str,
    pub scopes: &'a str,
    pub response_type: &'a str,
}

/// One authorization of an app by a user, the family of every token issued
/// under it.
#[derive(Debug, Clone)]
pub struct NewGrant {
    pub id: String,
    pub user_id: String,
    /// `None` for a personal access token.
    pub client_id: Option<String>,
    pub scopes: String,
    /// `token`, `code` or `personal`.
    pub flow: &'static str,
    pub created_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Access,
    Refresh,
}

impl TokenKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Access => "access",
            Self::Refresh => "refresh",
        }
    }
}

#[derive(Debug, Clone)]
pub struct NewToken {
    pub digest: String,
    pub kind: TokenKind,
    /// The token's own scopes when narrower than its grant's (a refresh that
    /// asked for less, RFC 6749 §6); `None`: the grant's.
    pub scopes: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone)]
pub struct NewCode {
    pub digest: String,
    pub redirect_uri: Option<String>,
    pub code_challenge: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

/// What a refresh token's rotation returns: its grant and the grant's user,
/// read by the rotating statement itself.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RotatedGrant {
    pub grant_id: String,
    pub grant_scopes: String,
    #[sqlx(flatten)]
    pub user: User,
}

/// Everything introspection needs about a token, read in one query.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRecord {
    #[sqlx(flatten)]
    pub user: User,
    pub token_kind: String,
    pub expires_at: i64,
    pub created_at: i64,
    pub revoked: bool,
    pub grant_id: String,
    pub client_id: Option<String>,
    pub scopes: String,
    pub app_suspended: bool,
    /// Read only by `find_token_with_friends_count` (for `/me`).
    #[sqlx(default)]
    pub friends_count: Option<i64>,
}

/// The app that calls the introspection endpoint, as far as authenticating it
/// needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IntrospectingClient {
    #[sqlx(rename = "caller_client_id")]
    pub client_id: String,
    #[sqlx(rename = "caller_secret_digest")]
    pub secret_digest: String,
    #[sqlx(rename = "caller_suspended")]
    pub suspended: bool,
    /// May learn about tokens issued to other apps.
    #[sqlx(rename = "caller_introspect_any")]
    pub introspect_any: bool,
}

/// A code taken for exchange.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CodeRecord {
    pub grant_id: String,
    pub client_id: Option<String>,
    pub user_id: String,
    pub scopes: String,
    pub redirect_uri: Option<String>,
    pub code_challenge: Option<String>,
    pub expires_at: i64,
}

#[derive(Debug)]
pub enum CodeUse {
    /// First use, checks passed: the code is spent and the tokens are stored.
    Issued(CodeRecord),
    /// First use, a check failed (the reason): the code is spent all the same.
    Refused(String),
    /// First use, but the user revoked the authorization since: spent, nothing
    /// issued.
    Revoked,
    /// The code was spent before; its grant (every token issued from it) has
    /// now been revoked.
    Replayed,
    /// Unknown, or another client's (which leaves it untouched).
    Unknown,
}

/// Given each key's failures in the window (count, latest time), whether an
/// attempt may go ahead, or how long it must wait.
pub type SigninDecision<'a> =
    &'a (dyn Fn(&[(i64, Option<i64>)]) -> Result<(), std::time::Duration> + Send + Sync);

/// What must hold of a code before tokens are issued for it (expiry,
/// `redirect_uri`, PKCE); `Err` gives the reason.
pub type CodeCheck<'a> = &'a (dyn Fn(&CodeRecord) -> Result<(), String> + Send + Sync);

#[derive(Debug)]
pub enum RefreshUse {
    /// The refresh token was spent and the new tokens stored under its grant.
    Rotated(Box<RotatedGrant>),
    /// A spent refresh token came back: its whole family is now revoked.
    Replayed,
    /// Unknown, expired, revoked, or of another client.
    Invalid,
}

/// One remembered consent of a user to an app (an app the user allowed with
/// several scope sets has one per set).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConsentRow {
    pub client_id: String,
    pub name: String,
    pub scopes: String,
    pub authorized_at: i64,
    pub last_used_at: Option<i64>,
}

/// A live personal access token, by its grant.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PersonalToken {
    pub grant_id: String,
    pub scopes: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub expires_at: i64,
}

/// The SQL that reads a token (digest `$n`) with its grant, user and app, and,
/// if asked, the user's friend count.
fn token_select(digest_param: u8, with_friends_count: bool) -> String {
    let user_columns: Vec<String> = super::sql::USER_COLUMNS
        .split(',')
        .map(|c| format!("u.{}", c.trim()))
        .collect();
    let friends_count = if with_friends_count {
        ", u.friends_count"
    } else {
        ""
    };
    format!(
        "SELECT {}, t.kind AS token_kind, t.expires_at, t.created_at, \
         (t.revoked_at IS NOT NULL OR g.revoked_at IS NOT NULL) AS revoked, \
         g.id AS grant_id, g.client_id, COALESCE(t.scopes, g.scopes) AS scopes, \
         COALESCE(a.suspended, FALSE) AS app_suspended{friends_count} \
         FROM oauth_tokens t \
         JOIN oauth_grants g ON g.id = t.grant_id \
         JOIN users u ON u.id = g.user_id \
         LEFT JOIN apps a ON a.client_id = g.client_id \
         WHERE t.digest = ${digest_param}",
        user_columns.join(", ")
    )
}

/// The token queries, built once.
pub(crate) struct TokenQueries {
    pub token: String,
    pub token_with_friends_count: String,
    pub client_and_token: String,
}

pub(crate) fn token_queries() -> &'static TokenQueries {
    static QUERIES: std::sync::OnceLock<TokenQueries> = std::sync::OnceLock::new();
    QUERIES.get_or_init(|| TokenQueries {
        token: token_select(1, false),
        token_with_friends_count: token_select(1, true),
        // The caller's row, and the token's columns beside it (NULL when the
        // token is unknown).
        client_and_token: format!(
            "SELECT c.client_id AS caller_client_id, c.secret_digest AS caller_secret_digest, \
             c.suspended AS caller_suspended, c.introspect_any AS caller_introspect_any, \
             tok.* \
             FROM apps c LEFT JOIN ({}) tok ON TRUE \
             WHERE c.client_id = $1",
            token_select(2, false)
        ),
    })
}
