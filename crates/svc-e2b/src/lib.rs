//! The E2B API on a listener of its own (decisions §20), so the unmodified `e2b` SDKs work with
//! `E2B_API_URL` and `E2B_SANDBOX_URL` pointed at it:
//!
//! - `rest.rs`: the control-plane routes (`/v2/sandboxes`, `/sandboxes/{id}`, `.../timeout`,
//!   `.../pause`, `.../connect`), on svc's spawn pipeline, lifecycle and templates;
//! - `files.rs`, `process.rs`, `filesystem.rs`: what E2B's in-sandbox daemon (envd) serves,
//!   routed by the `E2b-Sandbox-Id` header: `/health`, `/files`, and the connect-rpc services
//!   `process.Process` (on exec jobs) and `filesystem.Filesystem` (on the file API, with
//!   directory watches by listing, `watch.rs`);
//! - `connect.rs`: the connect-rpc wire format (JSON codec, 5-byte envelopes for streams).
//!
//! Everything goes through [`svc_control::ControlPlane`], so quotas, policies, events and
//! metrics apply as on svc's own API.

mod caller;
mod connect;
mod error;
mod files;
mod filesystem;
mod process;
mod ratelimit;
mod rest;
mod watch;

use axum::routing::{get, post};
use axum::Router;
use svc_control::ControlPlane;

/// The envd version reported to the SDKs: the features they gate on up to it (close stdin,
/// octet-stream uploads) are served; later ones (file metadata, watch entries) are not.
pub const ENVD_VERSION: &str = "0.5.7";

/// The E2B listener's application.
pub fn router(plane: ControlPlane) -> Router {
    let max_body = usize::try_from(plane.config().server.max_body_bytes).unwrap_or(usize::MAX);
    let state = caller::E2b::new(plane);
    Router::new()
        .route("/v2/sandboxes", post(rest::create).get(rest::list))
        .route("/sandboxes", post(rest::create).get(rest::list_v1))
        .route("/sandboxes/{id}", get(rest::info).delete(rest::kill))
        .route("/sandboxes/{id}/timeout", post(rest::set_timeout))
        .route("/sandboxes/{id}/metrics", get(rest::metrics))
        .route("/sandboxes/{id}/refreshes", post(rest::refresh))
        .route("/sandboxes/{id}/pause", post(rest::pause))
        .route("/sandboxes/{id}/resume", post(rest::resume))
        .route("/sandboxes/{id}/connect", post(rest::connect))
        .route("/v2/sandboxes/{id}/connect", post(rest::connect))
        .route("/health", get(files::health))
        // Uploads stream, bounded by `server.max_upload_bytes` like svc's own (multipart
        // parts too): not by the JSON bodies' limit below.
        .route(
            "/files",
            get(files::read)
                .post(files::write)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/process.Process/{method}", post(process::call))
        .route("/filesystem.Filesystem/{method}", post(filesystem::call))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        // JSON bodies are read only after authentication (see `caller::ApiCaller`) and no
        // larger than `server.max_body_bytes`; uploads stream and connect-rpc messages have
        // limits of their own.
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ratelimit::limit,
        ))
        .with_state(state)
}
