#![allow(clippy::unwrap_used, clippy::expect_used)]

//! One integration binary: the real application over HTTP, the real `tally`
//! binary, and the store conformance suite, each on SQLite and on PostgreSQL.

mod browser;
mod fixtures;
mod helpers;
mod mail_sink;
mod oauth_fixture;
mod webhook_receiver;

mod abuse_limits;
mod cli;
mod concurrency;
mod config;
mod device_grant;
mod edge;
mod edge_bounds;
mod factor_store;
mod fair_hashing;
mod faults;
mod health;
mod oauth;
mod oauth_hardening;
mod oidc;
mod oidc_clients;
mod oidc_flow;
mod oidc_logout;
mod openapi;
mod pages;
mod pages_guard;
mod pages_hardening;
mod passkeys;
mod payments_api;
mod postgres_plans;
mod real_browser;
mod real_browser_factors;
mod second_factor;
mod secret_key;
mod signin_load;
mod store_conformance;
mod users_api;
mod webhooks;
