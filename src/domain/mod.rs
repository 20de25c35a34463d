//! Parsed types. Everything that crosses the edge (HTTP, CLI) becomes one of these
//! before any decision is made; none of them does I/O.

mod amount;
mod contact;
mod event;
mod ids;
mod movement;
mod payment;
mod redirect_url;
mod scope;
mod text;
mod time;
mod username;

#[cfg(test)]
mod properties;

pub use amount::{Amount, AmountError, Money};
pub use contact::{Email, EmailError, Phone, PhoneError};
pub use event::{EventFilter, EventType, UnknownEvent, TEST_EVENT};
pub use ids::new_id;
pub use movement::{
    accounts, is_returned, net_flow, EntryKind, Move, Movement, Parties, Party, Step,
};
pub use payment::{
    Audience, AudienceError, Medium, Note, NoteError, PaymentAction, PaymentKind, PaymentStatus,
    TargetType, UnknownWord,
};
pub use redirect_url::{RedirectUrl, RedirectUrlError};
pub use scope::{Scope, ScopeError, ScopeSet};
pub use text::{has_forbidden_control, Lines};
pub use time::{
    format_datetime, format_datetime_exact, micros, now_micros, parse_datetime, DatetimeError,
    Timestamp,
};
pub use username::{Password, PasswordError, Username, UsernameError};
