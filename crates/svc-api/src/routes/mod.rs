//! One module per resource. Each exposes `routes()` for the router, with every handler
//! registered together with its OpenAPI description.

pub(crate) mod events;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod observe;
pub(crate) mod preview;
pub(crate) mod providers;
pub(crate) mod quotas;
pub(crate) mod sandboxes;
pub(crate) mod system;
pub(crate) mod templates;
pub(crate) mod tenants;
pub(crate) mod workers;

use serde::Serialize;

/// `{status}` bodies (`destroyed`, `deleted`, ...).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct StatusBody {
    /// What happened.
    pub status: &'static str,
}

/// The crate version, plus the git revision when the build knew it.
pub fn version() -> &'static str {
    env!("SVC_VERSION")
}
