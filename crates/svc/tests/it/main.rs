//! Black-box tests: the real server on an ephemeral port with a temporary SQLite file, spoken to
//! over HTTP and SSE with real clients. One test binary; each area is a module.

// Helpers outside #[test] functions panic on purpose when the server misbehaves.
#![allow(clippy::unwrap_used)]

mod harness;
mod idp;

mod auth;
mod bad_input;
mod browser;
mod builds;
mod cli;
mod client;
mod concurrency;
mod docker;
mod e2b;
mod egress;
mod events;
mod exec;
mod files;
mod fleet;
mod isolation;
mod lifecycle;
mod microvm;
mod observe;
mod oidc;
mod paging;
mod pause;
mod permissions;
mod pool;
mod preview;
mod providers;
mod queue;
mod quotas;
mod ratelimit;
mod readme;
mod reconcile;
mod registry;
mod replicas;
mod sdks;
mod system;
mod templates;
mod tenancy;
mod ui;
mod warm;
mod workers;
mod ws;
