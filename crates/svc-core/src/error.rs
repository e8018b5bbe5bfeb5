//! The service error: structured variants that say what went wrong, and a closed [`ErrorKind`]
//! that the HTTP layer maps to a status and code in exactly one place.

use std::fmt;

/// A boxed error source, kept for logs but never shown to callers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The closed set of error categories, one per wire `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 400 `bad_request`.
    BadRequest,
    /// 401 `unauthorized`.
    Unauthorized,
    /// 403 `forbidden`.
    Forbidden,
    /// 403 `policy_denied`.
    PolicyDenied,
    /// 404 `not_found`.
    NotFound,
    /// 405 `method_not_allowed`.
    MethodNotAllowed,
    /// 409 `conflict`.
    Conflict,
    /// 409 `lease_conflict`.
    LeaseConflict,
    /// 413 `payload_too_large`.
    PayloadTooLarge,
    /// 429 `resource_limit`.
    ResourceLimit,
    /// 500 `provider_error`.
    ProviderError,
    /// 503 `unavailable`.
    Unavailable,
    /// 502 `bad_gateway`: nothing answers where a preview points (decisions §18).
    BadGateway,
    /// 500 `internal`.
    Internal,
}

impl ErrorKind {
    /// The HTTP status it is answered with (on the API and the E2B listener alike).
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden | ErrorKind::PolicyDenied => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::Conflict | ErrorKind::LeaseConflict => 409,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::ResourceLimit => 429,
            ErrorKind::ProviderError | ErrorKind::Internal => 500,
            ErrorKind::Unavailable => 503,
            ErrorKind::BadGateway => 502,
        }
    }

    /// The wire `code`.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::PolicyDenied => "policy_denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Conflict => "conflict",
            ErrorKind::LeaseConflict => "lease_conflict",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::ResourceLimit => "resource_limit",
            ErrorKind::ProviderError => "provider_error",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::BadGateway => "bad_gateway",
            ErrorKind::Internal => "internal",
        }
    }
}

/// The kinds of things that can be missing or conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A sandbox.
    Sandbox,
    /// A template.
    Template,
    /// A provider.
    Provider,
    /// An API route.
    Route,
    /// A file or directory inside a sandbox.
    File,
    /// A lease on a resource.
    Lease,
    /// An owner quota.
    Quota,
    /// A worker.
    Worker,
    /// An exec of a sandbox.
    Exec,
    /// A tenant.
    Tenant,
    /// A tenant member.
    Member,
    /// A tenant policy.
    Policy,
    /// A template build.
    Build,
    /// An audit log entry.
    AuditEntry,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Sandbox => "sandbox",
            Resource::Template => "template",
            Resource::Provider => "provider",
            Resource::Route => "route",
            Resource::File => "file",
            Resource::Lease => "lease",
            Resource::Quota => "quota of owner",
            Resource::Worker => "worker",
            Resource::Exec => "exec",
            Resource::Tenant => "tenant",
            Resource::Member => "member",
            Resource::Policy => "policy",
            Resource::Build => "build",
            Resource::AuditEntry => "audit entry",
        })
    }
}

/// Why a spawn or an operation was refused for limits (admission `reason` values and more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitReason {
    /// Requested TTL over the effective maximum.
    MaxTtl,
    /// Global sandbox capacity.
    MaxSandboxes,
    /// Per-owner sandbox capacity.
    MaxOwnerSandboxes,
    /// Exec timeout over the effective maximum.
    MaxExecTimeout,
    /// The API rate limit of the caller's bucket.
    RateLimit,
    /// Placement chose another worker, and spawning there needs worker RPC.
    RemoteWorkerRpcUnavailable,
    /// Workers offer the provider, but none is eligible (capacity).
    NoEligibleWorker,
}

impl LimitReason {
    /// The wire name (admission `reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitReason::MaxTtl => "max_ttl",
            LimitReason::MaxSandboxes => "max_sandboxes",
            LimitReason::MaxOwnerSandboxes => "max_owner_sandboxes",
            LimitReason::MaxExecTimeout => "max_exec_timeout",
            LimitReason::RateLimit => "rate_limit",
            LimitReason::RemoteWorkerRpcUnavailable => "remote_worker_rpc_unavailable",
            LimitReason::NoEligibleWorker => "no_eligible_worker",
        }
    }
}

/// Every way a service operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field, header or parameter is invalid.
    #[error("{field}: {message}")]
    InvalidInput {
        /// The field, header or parameter, as the caller named it.
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A request body that is not valid JSON of the expected shape.
    #[error("malformed request body: {message}")]
    MalformedBody {
        /// Parser diagnostics, with the field path when known.
        message: String,
    },
    /// A provider no worker offers.
    #[error("unknown provider {}; enabled providers: {}", echo(name), enabled.join(", "))]
    UnknownProvider {
        /// The requested name.
        name: String,
        /// What is enabled.
        enabled: Vec<String>,
    },
    /// Something addressed by the caller does not exist.
    #[error("{resource} {} not found", echo(id))]
    NotFound {
        /// What kind of thing.
        resource: Resource,
        /// Its name or ID.
        id: String,
    },
    /// A name that must be unique is taken.
    #[error("{resource} {} already exists", echo(id))]
    AlreadyExists {
        /// What kind of thing.
        resource: Resource,
        /// Its name.
        id: String,
    },
    /// The sandbox is not running (still being created, or ended), so it cannot run commands,
    /// move files or be extended. An ended one says why and when (decisions §7), so a caller
    /// learns from the refusal itself what became of its sandbox.
    #[error("sandbox {id} {}", not_running(*state, *reason, message.as_deref(), *ended_at))]
    SandboxNotRunning {
        /// The sandbox.
        id: String,
        /// The state it is in.
        state: crate::sandbox::SandboxState,
        /// Why it ended (its `state_reason`); absent until it has.
        reason: Option<crate::sandbox::StateReason>,
        /// Its `state_message`; absent or empty when there is nothing to add.
        message: Option<String>,
        /// When it ended (its `destroyed_at`), where the record keeps it.
        ended_at: Option<crate::clock::Timestamp>,
    },
    /// No credentials, or credentials that match nothing.
    #[error("{message}")]
    Unauthorized {
        /// What was missing or wrong (never the credential itself).
        message: String,
    },
    /// A known caller whose role does not allow the action.
    #[error("role {role} may not {action}")]
    Forbidden {
        /// The caller's role.
        role: &'static str,
        /// What it tried, in words.
        action: &'static str,
    },
    /// Authenticated, but refused for a reason other than the role table (a token that maps to
    /// no role, another tenant's administration).
    #[error("{message}")]
    Denied {
        /// Why.
        message: String,
    },
    /// A tenant policy refuses the spawn (decisions §6).
    #[error(
        "policy {} ({policy_id}) denies {resource} {}",
        echo(policy_name),
        echo(value)
    )]
    PolicyDenied {
        /// The deciding policy's name.
        policy_name: String,
        /// Its ID.
        policy_id: String,
        /// `image`, `provider` or `network`.
        resource: &'static str,
        /// The denied value.
        value: String,
    },
    /// Another worker holds the lease on a resource.
    #[error("{resource} {id} is held by worker {holder}")]
    LeaseHeld {
        /// What kind of thing.
        resource: Resource,
        /// Its ID.
        id: String,
        /// The worker holding it.
        holder: String,
    },
    /// A worker RPC request's lease token is not the current, unexpired lease (worker RPC
    /// fencing): the sender may not act on the resource.
    #[error("{0}")]
    Fenced(String),
    /// The provider does not offer this operation (see its capabilities).
    #[error("provider {provider} does not support {operation}")]
    Unsupported {
        /// The provider name.
        provider: String,
        /// The operation.
        operation: String,
    },
    /// A quota, capacity or rate limit.
    #[error("{message}")]
    ResourceLimit {
        /// Machine-readable reason.
        reason: LimitReason,
        /// What limit and by how much.
        message: String,
    },
    /// A provider operation failed.
    #[error("provider {provider} failed to {operation}: {source}")]
    Provider {
        /// The provider name.
        provider: String,
        /// The operation (`spawn`, `destroy`, ...).
        operation: String,
        /// The provider's typed error; its text is the provider's reason.
        #[source]
        source: BoxError,
    },
    /// Nothing answers at a sandbox's port (a preview).
    #[error("{message}")]
    BadGateway {
        /// What could not be reached.
        message: String,
    },
    /// A configured provider is unhealthy.
    #[error("provider {provider} is unavailable: {message}")]
    ProviderUnavailable {
        /// The provider name.
        provider: String,
        /// Its health error.
        message: String,
    },
    /// A feature this request needs is not configured on this server.
    #[error("{what} is not configured ({key})")]
    NotConfigured {
        /// What is missing, in words.
        what: String,
        /// The configuration key that would enable it.
        key: &'static str,
    },
    /// The store cannot be reached (closed during shutdown, locked, disk gone).
    #[error("the store is unavailable")]
    StoreUnavailable {
        /// The cause, for the log.
        #[source]
        source: BoxError,
    },
    /// An exec that no longer runs (or takes no stdin) was asked to act.
    #[error("exec {id} {status}")]
    ExecEnded {
        /// The exec.
        id: String,
        /// What became of it, in words (`has exited`, `was killed`).
        status: &'static str,
    },
    /// A template build that has ended was asked to stop.
    #[error("build {id} has already ended ({status})")]
    BuildEnded {
        /// The build.
        id: String,
        /// How it ended (`succeeded`, `failed`, `cancelled`).
        status: &'static str,
    },
    /// Pool mode: every pool VM is full and no more may start (overflow `reject`).
    #[error("{message}")]
    PoolFull {
        /// How full, and which keys bound it.
        message: String,
    },
    /// Pool mode: the owner already holds a logical sandbox (one per user).
    #[error(
        "user {} already holds {}; pool mode allows one sandbox per user",
        echo(owner),
        existing.as_deref().map_or_else(|| "a sandbox".to_owned(), |id| format!("sandbox {id}"))
    )]
    OwnerHasSandbox {
        /// The owner.
        owner: String,
        /// The sandbox it holds, named only to callers of its own tenant (decisions §30).
        existing: Option<String>,
    },
    /// The request body is larger than allowed.
    #[error("request body is larger than {limit_bytes} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit_bytes: u64,
    },
    /// A streamed upload is larger than `server.max_upload_bytes`.
    #[error("the upload is larger than server.max_upload_bytes ({limit_bytes} bytes)")]
    UploadTooLarge {
        /// The limit.
        limit_bytes: u64,
    },
    /// The route exists, the method does not.
    #[error("method {method} is not allowed on {}", echo(path))]
    MethodNotAllowed {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
    /// Anything else; the source is logged, never shown.
    #[error("internal error: {context}")]
    Internal {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// The category, which decides status and code.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidInput { .. }
            | Error::MalformedBody { .. }
            | Error::UnknownProvider { .. }
            | Error::Unsupported { .. } => ErrorKind::BadRequest,
            Error::Unauthorized { .. } => ErrorKind::Unauthorized,
            Error::Forbidden { .. } | Error::Denied { .. } => ErrorKind::Forbidden,
            Error::PolicyDenied { .. } => ErrorKind::PolicyDenied,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::AlreadyExists { .. }
            | Error::SandboxNotRunning { .. }
            | Error::OwnerHasSandbox { .. }
            | Error::ExecEnded { .. }
            | Error::BuildEnded { .. } => ErrorKind::Conflict,
            Error::LeaseHeld { .. } | Error::Fenced(_) => ErrorKind::LeaseConflict,
            Error::ResourceLimit { .. } => ErrorKind::ResourceLimit,
            Error::Provider { .. } => ErrorKind::ProviderError,
            Error::ProviderUnavailable { .. }
            | Error::StoreUnavailable { .. }
            | Error::PoolFull { .. }
            | Error::NotConfigured { .. } => ErrorKind::Unavailable,
            Error::PayloadTooLarge { .. } | Error::UploadTooLarge { .. } => {
                ErrorKind::PayloadTooLarge
            }
            Error::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            Error::BadGateway { .. } => ErrorKind::BadGateway,
            Error::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidInput {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`Error::NotFound`].
    pub fn not_found(resource: Resource, id: impl Into<String>) -> Self {
        Error::NotFound {
            resource,
            id: id.into(),
        }
    }

    /// Shorthand for [`Error::Internal`].
    pub fn internal(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Internal {
            context: context.into(),
            source: source.into(),
        }
    }

    /// Shorthand for [`Error::Provider`].
    pub fn provider(
        provider: impl Into<String>,
        operation: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Provider {
            provider: provider.into(),
            operation: operation.into(),
            source: source.into(),
        }
    }

    /// The message shown to callers: internal details stay in the logs.
    pub fn public_message(&self) -> String {
        match self {
            Error::Internal { context, .. } => format!("internal error while {context}"),
            other => other.to_string(),
        }
    }
}

/// The longest piece of caller input echoed back in a message.
pub const ECHO_LIMIT: usize = 64;

/// Caller input as quoted in an error message: cut to [`ECHO_LIMIT`] characters, so a huge or
/// hostile value never fills a response or a log line.
pub fn echo(input: &str) -> String {
    match input.char_indices().nth(ECHO_LIMIT) {
        None => format!("{input:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &input[..cut], input.len()),
    }
}

/// The longest message built from another library's diagnostics (a JSON parser quoting the
/// value it choked on, say).
pub const MESSAGE_LIMIT: usize = 300;

/// A diagnostic message cut to [`MESSAGE_LIMIT`] characters: parsers quote the input they
/// refuse, and a request body can be megabytes.
pub fn cut(message: &str) -> String {
    match message.char_indices().nth(MESSAGE_LIMIT) {
        None => message.to_owned(),
        Some((at, _)) => format!("{}... (cut)", &message[..at]),
    }
}

/// What follows "sandbox X" in [`Error::SandboxNotRunning`]: the state, and for an ended
/// sandbox its reason, message and end, e.g. `was destroyed: expired at 2026-11-23T07:00:00Z`
/// or `has failed: provider_failed (the runtime stopped on provider docker)`.
fn not_running(
    state: crate::sandbox::SandboxState,
    reason: Option<crate::sandbox::StateReason>,
    message: Option<&str>,
    ended_at: Option<crate::clock::Timestamp>,
) -> String {
    use crate::sandbox::SandboxState;
    let verb = match state {
        SandboxState::Destroyed => "was destroyed",
        SandboxState::Error => "has failed",
        SandboxState::Creating | SandboxState::Running | SandboxState::Paused => {
            return state.describe().to_owned()
        }
    };
    let Some(reason) = reason else {
        // A record ended before reasons were kept.
        return state.describe().to_owned();
    };
    let mut text = format!("{verb}: {}", reason.as_str());
    if let Some(message) = message.filter(|m| !m.is_empty()) {
        text.push_str(&format!(" ({})", cut(message)));
    }
    if let Some(at) = ended_at {
        text.push_str(&format!(
            " at {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        ));
    }
    text
}

/// Result alias for service operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages() {
        let err = Error::UnknownProvider {
            name: "nope".into(),
            enabled: vec!["mock".into(), "docker".into()],
        };
        assert_eq!(err.kind().code(), "bad_request");
        assert_eq!(
            err.to_string(),
            "unknown provider \"nope\"; enabled providers: mock, docker"
        );
        let internal =
            Error::internal("saving sandbox", std::io::Error::other("disk: secret path"));
        assert_eq!(internal.kind(), ErrorKind::Internal);
        assert!(!internal.public_message().contains("secret"));
    }

    #[test]
    fn a_refusal_on_an_ended_sandbox_says_why_and_when() {
        use crate::sandbox::{SandboxState, StateReason};
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-23T07:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let refusal = |state, reason, message: &str, ended_at| Error::SandboxNotRunning {
            id: "sb-0123456789abcdef".into(),
            state,
            reason,
            message: Some(message.to_owned()),
            ended_at,
        };
        let expired = refusal(
            SandboxState::Destroyed,
            Some(StateReason::Expired),
            "",
            Some(at),
        );
        assert_eq!(expired.kind(), ErrorKind::Conflict);
        assert_eq!(
            expired.to_string(),
            "sandbox sb-0123456789abcdef was destroyed: expired at 2026-11-23T07:00:00Z"
        );
        let failed = refusal(
            SandboxState::Error,
            Some(StateReason::ProviderFailed),
            "the runtime stopped on provider docker",
            None,
        );
        assert_eq!(failed.kind(), ErrorKind::Conflict);
        assert_eq!(
            failed.to_string(),
            "sandbox sb-0123456789abcdef has failed: provider_failed \
             (the runtime stopped on provider docker)"
        );
        let creating = refusal(SandboxState::Creating, None, "", None);
        assert_eq!(
            creating.to_string(),
            "sandbox sb-0123456789abcdef is still being created"
        );
        let reasonless = refusal(SandboxState::Destroyed, None, "", Some(at));
        assert_eq!(
            reasonless.to_string(),
            "sandbox sb-0123456789abcdef is destroyed"
        );
    }

    #[test]
    fn echo_cuts_long_input() {
        assert_eq!(echo("abc"), "\"abc\"");
        let long = "x".repeat(10_000);
        let echoed = echo(&long);
        assert!(echoed.len() < 100, "{echoed}");
        assert!(echoed.ends_with("(10000 bytes)"));
        // Never cuts inside a character.
        assert!(echo(&"é".repeat(200)).contains("(400 bytes)"));
        assert_eq!(cut("short"), "short");
        assert!(cut(&"x".repeat(100_000)).len() < MESSAGE_LIMIT + 20);
    }
}
