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

/// Maps an engine error during `operation`: the engine's own answer is [`ProviderError::Engine`]
/// with its status; an engine that cannot be reached is `Unavailable`, the client's error kept.
pub(super) fn engine_error(operation: &str, err: DockerError) -> ProviderError {
    match err {
        DockerError::DockerResponseServerError {
            status_code,
            message,
        } => ProviderError::Engine {
            operation: operation.to_owned(),
            status: status_code,
            message,
        },
        DockerError::RequestTimeoutError => ProviderError::unavailable(format!(
            "{operation}: the Docker engine did not answer in time"
        )),
        DockerError::HyperResponseError { .. }
        | DockerError::IOError { .. }
        | DockerError::HyperLegacyError { .. }
        | DockerError::SocketNotFoundError(_) => ProviderError::Unavailable {
            message: format!("{operation}: cannot reach the Docker engine: {err}"),
            source: Some(std::sync::Arc::new(err)),
        },
        other => ProviderError::caused(operation, other),
    }
}

/// Maps an error on a container call: 404 is a missing runtime.
pub(super) fn container_error(id: &str, operation: &str, err: DockerError) -> ProviderError {
    if status_of(&err) == Some(404) {
        return ProviderError::RuntimeNotFound { id: id.to_owned() };
    }
    engine_error(operation, err)
}

/// A pause that runc gave up on because the freezer could not stop a busy container in its
/// time (cgroup v1: "unable to freeze"); asking again succeeds once the container is calmer.
pub(super) fn freezer_gave_up(err: &DockerError) -> bool {
    matches!(err, DockerError::DockerResponseServerError { status_code: 500, message }
        if message.contains("unable to freeze"))
}

/// An unpause refused as "not paused" by the runtime while the engine still holds the
/// container paused: the two agree again moments later.
pub(super) fn runtime_not_yet_paused(err: &DockerError) -> bool {
    matches!(err, DockerError::DockerResponseServerError { status_code: 500, message }
        if message.contains("is not paused") || message.contains("not paused"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(status_code: u16, message: &str) -> DockerError {
        DockerError::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        }
    }

    #[test]
    fn transient_pause_and_resume_refusals_are_told_apart() {
        let freeze = server(
            500,
            "Cannot pause container abc: OCI runtime pause failed: unable to freeze: unknown",
        );
        assert!(freezer_gave_up(&freeze));
        assert!(!runtime_not_yet_paused(&freeze));
        let not_paused = server(
            500,
            "Cannot unpause container abc: container abc is not paused",
        );
        assert!(runtime_not_yet_paused(&not_paused));
        assert!(!freezer_gave_up(&not_paused));
        // A 409 is the engine's own answer, handled by asking its state; others are final.
        assert!(!runtime_not_yet_paused(&server(
            409,
            "Container abc is not paused"
        )));
        assert!(!freezer_gave_up(&server(404, "No such container: abc")));
    }
}
