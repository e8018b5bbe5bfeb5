//! The one classification of provider failures at the crate boundary: the caller's input (400),
//! a missing file (404), an operation the provider lacks (400), or the backend failing (500,
//! reported as `operation.failed` and `provider.failed`). The provider's typed error stays the
//! source of the service error, for the log.

use svc_core::error::Resource;
use svc_core::event::{EventPayload, FailureEventData};
use svc_core::{Error, SandboxId};
use svc_provider::ProviderError;

use crate::ControlPlane;

/// Classifies `err` from `operation` on `provider`.
pub(crate) fn classify(provider: &str, operation: &str, err: ProviderError) -> Error {
    match err {
        ProviderError::InvalidRequest { message } => Error::invalid("request", message),
        ProviderError::InvalidField { field, message } => Error::invalid(field, message),
        ProviderError::Unreachable { message } => Error::BadGateway { message },
        ProviderError::FileNotFound { path } => Error::not_found(Resource::File, path),
        ProviderError::Unsupported { op } => Error::Unsupported {
            provider: provider.to_owned(),
            operation: op.to_owned(),
        },
        backend @ (ProviderError::Unavailable { .. }
        | ProviderError::Engine { .. }
        | ProviderError::Io { .. }
        | ProviderError::Failed { .. }
        | ProviderError::RuntimeNotFound { .. }) => Error::provider(provider, operation, backend),
    }
}

/// The data of `operation.failed` and `provider.failed`.
pub(crate) fn failure_data(operation: &str, provider: &str, error: &Error) -> FailureEventData {
    FailureEventData {
        operation: operation.to_owned(),
        provider: provider.to_owned(),
        error: error.public_message(),
    }
}

impl ControlPlane {
    /// Classifies `err` like [`classify`]; when the backend itself failed (not the caller's
    /// input), also publishes `operation.failed` and `provider.failed`.
    pub(crate) fn provider_failure(
        &self,
        sandbox_id: Option<&SandboxId>,
        provider: &str,
        operation: &str,
        err: ProviderError,
    ) -> Error {
        let mapped = classify(provider, operation, err);
        if matches!(mapped, Error::Provider { .. }) {
            self.publish_failure(sandbox_id, operation, provider, &mapped, true);
        }
        mapped
    }

    /// Publishes `operation.failed`, and `provider.failed` when the provider was at fault.
    pub(crate) fn publish_failure(
        &self,
        sandbox_id: Option<&SandboxId>,
        operation: &str,
        provider: &str,
        error: &Error,
        provider_at_fault: bool,
    ) {
        let data = failure_data(operation, provider, error);
        self.events()
            .publish(sandbox_id, EventPayload::OperationFailed(data.clone()));
        if provider_at_fault {
            self.events()
                .publish(sandbox_id, EventPayload::ProviderFailed(data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_core::ErrorKind;

    #[test]
    fn each_kind_of_failure_keeps_its_kind() {
        let cases = [
            (
                ProviderError::InvalidRequest {
                    message: "not a directory".into(),
                },
                ErrorKind::BadRequest,
            ),
            (
                ProviderError::FileNotFound { path: "/x".into() },
                ErrorKind::NotFound,
            ),
            (
                ProviderError::Unsupported { op: "logs" },
                ErrorKind::BadRequest,
            ),
            (
                ProviderError::unavailable("engine gone"),
                ErrorKind::ProviderError,
            ),
            (ProviderError::failed("boom"), ErrorKind::ProviderError),
        ];
        for (err, kind) in cases {
            let mapped = classify("docker", "exec", err);
            assert_eq!(mapped.kind(), kind, "{mapped}");
        }
        let mapped = classify("docker", "exec", ProviderError::failed("boom"));
        assert_eq!(mapped.to_string(), "provider docker failed to exec: boom");
        assert!(std::error::Error::source(&mapped).is_some(), "source kept");
    }
}
