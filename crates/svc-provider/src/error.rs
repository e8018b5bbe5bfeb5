//! Provider failures, typed so the control plane maps each to the right caller-facing error
//! (`svc-control`'s `provider_errors`), and keeping the error that caused them as their
//! `source` for the log.

use std::sync::Arc;

/// The error behind a provider failure. Shared, so a failure can be handed to every waiter of
/// one operation.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// A provider operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// The provider does not implement this operation (see its capabilities).
    #[error("operation {op} is not supported by this provider")]
    Unsupported {
        /// The operation.
        op: &'static str,
    },
    /// The sandbox's runtime does not exist.
    #[error("runtime for sandbox {id} not found")]
    RuntimeNotFound {
        /// The sandbox ID.
        id: String,
    },
    /// A file or directory inside the sandbox does not exist.
    #[error("{path}: no such file or directory")]
    FileNotFound {
        /// The sandbox path.
        path: String,
    },
    /// A request the provider cannot honour because of its input (bad path, not a directory).
    #[error("{message}")]
    InvalidRequest {
        /// What is wrong.
        message: String,
    },
    /// A spawn field the provider cannot honour (a network the engine does not have).
    #[error("{message}")]
    InvalidField {
        /// The request field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The provider's backend cannot be reached (engine down, socket missing).
    #[error("provider backend unavailable: {message}")]
    Unavailable {
        /// The reason.
        message: String,
        /// The error that said so.
        #[source]
        source: Option<Cause>,
    },
    /// Nothing answers at a port inside the sandbox (previews).
    #[error("{message}")]
    Unreachable {
        /// What could not be reached, and why.
        message: String,
    },
    /// The container engine answered a request with a failure status.
    #[error("{operation}: {message}")]
    Engine {
        /// What was asked.
        operation: String,
        /// The engine's HTTP status.
        status: u16,
        /// The engine's message.
        message: String,
    },
    /// Reading or writing on the host failed.
    #[error("{context}{}{source}", if context.is_empty() { "" } else { ": " })]
    Io {
        /// What was being done (may be empty).
        context: String,
        /// The host's error, whose kind tells what failed.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The backend failed.
    #[error("{message}")]
    Failed {
        /// The backend's reason.
        message: String,
        /// The error that caused it, when another error said so.
        #[source]
        source: Option<Cause>,
    },
}

impl ProviderError {
    /// A backend failure with no other error behind it.
    pub fn failed(message: impl Into<String>) -> Self {
        ProviderError::Failed {
            message: message.into(),
            source: None,
        }
    }

    /// A backend failure while doing `context`, because of `cause` (kept as the source).
    pub fn caused(
        context: impl std::fmt::Display,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        ProviderError::Failed {
            message: format!("{context}: {cause}"),
            source: Some(Arc::new(cause)),
        }
    }

    /// A backend that cannot be reached, with no other error behind it.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ProviderError::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// Host I/O that failed while doing `context`, mapped by its kind: a connection that is
    /// refused, reset or timed out means the backend cannot be reached; anything else is an
    /// I/O failure. The error is kept either way.
    pub fn io(context: impl Into<String>, err: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let context = context.into();
        match err.kind() {
            K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::TimedOut => ProviderError::Unavailable {
                message: if context.is_empty() {
                    err.to_string()
                } else {
                    format!("{context}: {err}")
                },
                source: Some(Arc::new(err)),
            },
            _ => ProviderError::Io {
                context,
                source: Arc::new(err),
            },
        }
    }
}

impl From<std::io::Error> for ProviderError {
    fn from(err: std::io::Error) -> Self {
        ProviderError::io("", err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn io_failures_keep_their_error_and_are_mapped_by_kind() {
        let refused = ProviderError::io(
            "dialling the agent",
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        );
        assert!(
            matches!(&refused, ProviderError::Unavailable { .. }),
            "{refused:?}"
        );
        let full = ProviderError::io("writing", std::io::Error::other("disk full"));
        assert_eq!(full.to_string(), "writing: disk full");
        let kept = full
            .source()
            .and_then(|s| s.downcast_ref::<Arc<std::io::Error>>());
        assert_eq!(kept.map(|e| e.kind()), Some(std::io::ErrorKind::Other));
        let bare = ProviderError::from(std::io::Error::other("boom"));
        assert_eq!(bare.to_string(), "boom");
    }

    #[test]
    fn a_caused_failure_says_why_and_keeps_the_cause() {
        let err = ProviderError::caused("reading /proc", std::io::Error::other("gone"));
        assert_eq!(err.to_string(), "reading /proc: gone");
        assert!(err.source().is_some());
        assert!(ProviderError::failed("boom").source().is_none());
    }
}
