//! SQL text both databases accept (`$n` placeholders, `RETURNING`,
//! `ON CONFLICT`) that more than one query uses; the queries themselves are in
//! `queries/`.

/// A user row's columns, in `User`'s order: a literal, so that statements can
/// `concat!` it at compile time.
macro_rules! user_columns {
    () => {
        "id, username, first_name, last_name, about, \
         profile_picture_url, email, email_verified, phone, phone_verified, password_hash, \
         verified, suspended, balance_cents, date_joined, profile_updated_at"
    };
}
pub(crate) use user_columns;

/// An app row's columns, in `App`'s order.
macro_rules! app_columns {
    () => {
        "client_id, secret_digest, name, description, redirect_url, \
         site_url, owner_id, suspended, created_at, introspect_any"
    };
}
pub(crate) use app_columns;

pub const USER_COLUMNS: &str = user_columns!();
