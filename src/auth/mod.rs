//! The resource-server side of authentication (`Principal`), and passwords.

pub mod password;
pub mod principal;

pub use principal::Principal;
