//! Tally: a payments and social-graph service with its own OAuth 2.0
//! authorization server. `main.rs` parses the command line; everything else
//! lives here so tests build the real application in-process.

pub mod accounts;
pub mod admin;
pub mod api;
pub mod auth;
pub mod config;
pub mod demo;
pub mod domain;
pub mod edge;
pub mod ledger;
pub mod limits;
pub mod log_throttle;
pub mod mailer;
pub mod oauth;
pub mod secret_key;
pub mod startup;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod verification;
pub mod web;
pub mod webhooks;
pub mod workers;
