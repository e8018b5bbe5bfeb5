//! Turns a provider's typed failure into the service error callers see, naming the provider
//! and the operation, and reports backend failures as `operation.failed` and `provider.failed`.

use serde_json::{json, Map};
use svc_core::event::EventType;
use svc_core::Error;
use svc_provider::ProviderError;

use crate::ControlPlane;

/// Maps a provider error from `operation` on `provider`.
pub(crate) fn provider_error(provider: &str, operation: &str, err: ProviderError) -> Error {
    match err {
        ProviderError::InvalidRequest { message } => Error::invalid("request", message),
        other => Error::Provider {
            provider: provider.to_owned(),
            operation: operation.to_owned(),
            message: other.to_string(),
        },
    }
}

/// The data of `operation.failed` and `provider.failed`.
pub(crate) fn failure_data(
    operation: &str,
    provider: &str,
    error: &Error,
) -> Map<String, serde_json::Value> {
    let mut data = Map::new();
    data.insert("operation".into(), json!(operation));
    data.insert("provider".into(), json!(provider));
    data.insert("error".into(), json!(error.public_message()));
    data
}

impl ControlPlane {
    /// Maps `err` like [`provider_error`]; when the backend itself failed (not the caller's
    /// input), also publishes `operation.failed` and `provider.failed`.
    pub(crate) fn provider_failure(
        &self,
        sandbox_id: &str,
        provider: &str,
        operation: &str,
        err: ProviderError,
    ) -> Error {
        let backend_failed = matches!(
            err,
            ProviderError::Unavailable { .. }
                | ProviderError::Failed { .. }
                | ProviderError::RuntimeNotFound { .. }
        );
        let mapped = provider_error(provider, operation, err);
        if backend_failed {
            let data = failure_data(operation, provider, &mapped);
            self.events()
                .publish(EventType::OperationFailed, sandbox_id, Some(data.clone()));
            self.events()
                .publish(EventType::ProviderFailed, sandbox_id, Some(data));
        }
        mapped
    }
}
