//! Provider failures, typed so the control plane maps each to the right caller-facing error.

/// A provider operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    },
    /// Nothing answers at a port inside the sandbox (previews).
    #[error("{message}")]
    Unreachable {
        /// What could not be reached, and why.
        message: String,
    },
    /// The backend answered with a failure.
    #[error("{message}")]
    Failed {
        /// The backend's reason.
        message: String,
    },
}

impl ProviderError {
    /// Shorthand for [`ProviderError::Failed`].
    pub fn failed(message: impl Into<String>) -> Self {
        ProviderError::Failed {
            message: message.into(),
        }
    }
}

impl From<std::io::Error> for ProviderError {
    fn from(err: std::io::Error) -> Self {
        ProviderError::Failed {
            message: err.to_string(),
        }
    }
}
