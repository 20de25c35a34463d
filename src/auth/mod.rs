//! The resource-server side of authentication, and passwords.

pub mod password;
