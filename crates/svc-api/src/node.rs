//! The node-to-node listener (`worker.rpc.listen`; decisions §22): what other nodes of a fleet
//! call, never the public API. Every request presents `worker.rpc.token` as
//! `Authorization: Bearer` (compared in constant time); without it the answer is 401 and
//! nothing is done. `POST /rpc` carries one request of the worker RPC contract
//! (docs/worker-rpc.md).

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use svc_control::ControlPlane;
use svc_core::rpc::{RpcRequest, RpcResponse};
use svc_core::Error;

use crate::extract::ApiJson;
use crate::ApiError;

/// The listener's routes, for `worker.rpc.listen`.
pub fn node_router(plane: ControlPlane) -> Router {
    Router::new()
        .route("/rpc", post(rpc))
        .fallback(|| async {
            ApiError(Error::not_found(
                svc_core::error::Resource::Route,
                "this listener serves other nodes only (POST /rpc)",
            ))
        })
        .layer(middleware::from_fn_with_state(plane.clone(), only_nodes))
        .with_state(plane)
}

/// Other nodes only: the shared token, else 401 before anything else is looked at.
async fn only_nodes(State(plane): State<ControlPlane>, request: Request, next: Next) -> Response {
    let presented = svc_control::identity::bearer(request.headers());
    let token = &plane.config().worker.rpc.token;
    if presented.is_some_and(|presented| token.constant_time_eq(presented)) {
        return next.run(request).await;
    }
    ApiError(Error::Unauthorized {
        message: "this listener answers other nodes only: present worker.rpc.token as \
                  Authorization: Bearer"
            .into(),
    })
    .into_response()
}

async fn rpc(
    State(plane): State<ControlPlane>,
    ApiJson(request): ApiJson<RpcRequest>,
) -> Json<RpcResponse> {
    Json(plane.answer_rpc(request).await)
}
