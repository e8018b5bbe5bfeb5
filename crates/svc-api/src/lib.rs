//! The svc HTTP API: the axum router, caller extraction, one module per resource, the single
//! error-to-status mapping, streaming responses and the OpenAPI document. Handlers parse, call
//! one control-plane method with the caller's principal, and render; nothing else.

mod auth;
mod error;
mod extract;
pub mod hosts;
mod node;
mod observe;
mod openapi;
mod openapi_check;
mod permissions;
mod ratelimit;
mod router;
mod routes;
mod stream;

pub use error::{ApiError, ErrorBody};
pub use node::node_router;
pub use openapi::{openapi_document, OpenApiFormat};
pub use openapi_check::{check_responses, conforms_to, CHECKED_HEADER};
pub use router::router;
