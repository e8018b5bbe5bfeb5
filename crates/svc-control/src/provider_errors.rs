//! Turns a provider's typed failure into the service error callers see, naming the provider
//! and the operation.

use svc_core::Error;
use svc_provider::ProviderError;

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
