//! The authorization server: apps (clients) and their credentials.

pub mod clients;
pub mod credentials;
