//! The resource-server side of authentication (`Principal`), and passwords.

pub mod password;
pub mod principal;
pub mod usage;

pub use principal::{Principal, PrincipalWithFriendsCount};
