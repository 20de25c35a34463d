//! Parsed types. Everything that crosses the edge (HTTP, CLI) becomes one of these
//! before any decision is made; none of them does I/O.

mod amount;
mod contact;
mod ids;
mod redirect_url;
mod scope;
mod time;
mod username;

pub use amount::{Amount, AmountError, Money};
pub use contact::{Email, EmailError, Phone, PhoneError};
pub use ids::new_id;
pub use redirect_url::{RedirectUrl, RedirectUrlError};
pub use scope::{Scope, ScopeError, ScopeSet};
pub use time::{format_datetime, now_micros, Timestamp};
pub use username::{Password, PasswordError, Username, UsernameError};
