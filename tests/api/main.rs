#![allow(clippy::unwrap_used, clippy::expect_used)]

//! One integration binary: the real application over HTTP, the real `tally`
//! binary, and the store conformance suite, each on SQLite and on PostgreSQL.

mod helpers;

mod cli;
mod config;
mod health;
mod store_conformance;
