//! Engine failures as provider errors: an engine that does not answer is `Unavailable`; a 404
//! means the container (or a path in it) is missing.

use bollard::errors::Error as DockerError;

use crate::ProviderError;

/// Whether the engine answered with this HTTP status.
pub(super) fn status_of(err: &DockerError) -> Option<u16> {
    match err {
        DockerError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Maps an engine error during `operation`.
pub(super) fn engine_error(operation: &str, err: &DockerError) -> ProviderError {
    match err {
        DockerError::DockerResponseServerError { message, .. } => {
            ProviderError::failed(format!("{operation}: {message}"))
        }
        DockerError::RequestTimeoutError => ProviderError::Unavailable {
            message: format!("{operation}: the Docker engine did not answer in time"),
        },
        DockerError::HyperResponseError { .. }
        | DockerError::IOError { .. }
        | DockerError::HyperLegacyError { .. }
        | DockerError::SocketNotFoundError(_) => ProviderError::Unavailable {
            message: format!("{operation}: cannot reach the Docker engine: {err}"),
        },
        other => ProviderError::failed(format!("{operation}: {other}")),
    }
}

/// Maps an error on a container call: 404 is a missing runtime.
pub(super) fn container_error(id: &str, operation: &str, err: &DockerError) -> ProviderError {
    if status_of(err) == Some(404) {
        return ProviderError::RuntimeNotFound { id: id.to_owned() };
    }
    engine_error(operation, err)
}
