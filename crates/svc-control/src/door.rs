//! The one door for every call on a sandbox's runtime (files, logs, stats, pause and resume,
//! exec): the caller is authorized, the sandbox is found as the caller may see it and in a
//! state the operation accepts, no other worker holds its lease, its provider is enabled and
//! capable, and a provider's failure is classified once ([`crate::provider_errors`]). A new
//! operation names its [`Operation`] and writes only its call. A call on a sandbox another node
//! holds is to be forwarded here.

use std::sync::Arc;

use svc_core::access::Action;
use svc_core::sandbox::Sandbox;
use svc_core::{Capability, Error, SandboxId};
use svc_provider::{Provider, ProviderError};

use crate::{ControlPlane, Principal};

/// An operation on a sandbox's runtime: what the caller must be allowed, what the provider must
/// be able to do, and its name in errors and `operation.failed` events.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operation {
    pub(crate) action: Action,
    pub(crate) capability: Capability,
    pub(crate) name: &'static str,
}

impl Operation {
    pub(crate) const fn new(action: Action, capability: Capability, name: &'static str) -> Self {
        Operation {
            action,
            capability,
            name,
        }
    }
}

/// Why a call through the door failed: the provider (classified by the door) or the service's
/// own rules (passed on as they are).
pub(crate) enum Failure {
    Provider(ProviderError),
    Service(Error),
}

impl From<ProviderError> for Failure {
    fn from(err: ProviderError) -> Self {
        Failure::Provider(err)
    }
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        Failure::Service(err)
    }
}

/// A sandbox through the door: the caller may act on it with its provider.
pub(crate) struct Target {
    pub(crate) sandbox: Sandbox,
    pub(crate) provider: Arc<dyn Provider>,
    operation: &'static str,
    plane: ControlPlane,
}

impl Target {
    pub(crate) fn id(&self) -> &SandboxId {
        &self.sandbox.id
    }

    /// Classifies a provider's failure of this operation (publishing `operation.failed` and
    /// `provider.failed` when the backend is at fault).
    pub(crate) fn failure(&self, err: ProviderError) -> Error {
        self.plane.provider_failure(
            Some(&self.sandbox.id),
            self.provider.name(),
            self.operation,
            err,
        )
    }

    /// Runs `call` on this target, classifying what fails.
    pub(crate) async fn call<I, T>(
        &self,
        input: I,
        call: impl AsyncFnOnce(&Target, I) -> Result<T, Failure>,
    ) -> Result<T, Error> {
        call(self, input).await.map_err(|failure| match failure {
            Failure::Provider(err) => self.failure(err),
            Failure::Service(err) => err,
        })
    }
}

impl ControlPlane {
    /// The door to a running sandbox: authorizes `operation`, then checks `input` (parsed by
    /// the caller, so that a forbidden caller learns nothing about it), then finds the running
    /// sandbox and its capable provider.
    pub(crate) async fn enter<I>(
        &self,
        principal: &Principal,
        id: &SandboxId,
        operation: Operation,
        input: Result<I, Error>,
    ) -> Result<(Target, I), Error> {
        self.authorize(principal, operation.action)?;
        let input = input?;
        let sandbox = self.running_sandbox(principal, id).await?;
        Ok((self.target(sandbox, operation)?, input))
    }

    /// [`ControlPlane::enter`], then `call` with its failure classified: the whole of most
    /// operations.
    pub(crate) async fn on_running<I, T>(
        &self,
        principal: &Principal,
        id: &SandboxId,
        operation: Operation,
        input: Result<I, Error>,
        call: impl AsyncFnOnce(&Target, I) -> Result<T, Failure>,
    ) -> Result<T, Error> {
        let (target, input) = self.enter(principal, id, operation, input).await?;
        target.call(input, call).await
    }

    /// The first steps of the door for an operation that accepts more states than `running`
    /// (pause and resume): authorizes it and finds the sandbox as the caller may see it.
    pub(crate) async fn visible(
        &self,
        principal: &Principal,
        id: &SandboxId,
        operation: Operation,
    ) -> Result<Sandbox, Error> {
        self.authorize(principal, operation.action)?;
        self.find_sandbox(principal, id).await
    }

    /// The last steps of the door for a sandbox the caller found in a state its operation
    /// accepts: no other worker holds its lease, and its provider is enabled and capable.
    pub(crate) async fn open(
        &self,
        sandbox: Sandbox,
        operation: Operation,
    ) -> Result<Target, Error> {
        self.check_not_fenced(&sandbox).await?;
        self.target(sandbox, operation)
    }

    /// The last step of the door: the sandbox's provider, enabled and capable.
    fn target(&self, sandbox: Sandbox, operation: Operation) -> Result<Target, Error> {
        let provider = self.capable_provider(&sandbox.provider, operation.capability)?;
        Ok(Target {
            sandbox,
            provider,
            operation: operation.name,
            plane: self.clone(),
        })
    }

    /// The provider of a sandbox, enabled on this server.
    pub(crate) fn enabled_provider(&self, name: &str) -> Result<Arc<dyn Provider>, Error> {
        self.providers()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::ProviderUnavailable {
                provider: name.to_owned(),
                message: "provider is not enabled on this server".to_owned(),
            })
    }

    /// The provider of a sandbox, checked for a capability.
    pub(crate) fn capable_provider(
        &self,
        name: &str,
        capability: Capability,
    ) -> Result<Arc<dyn Provider>, Error> {
        let provider = self.enabled_provider(name)?;
        if !provider.capabilities().contains(&capability) {
            return Err(Error::Unsupported {
                provider: name.to_owned(),
                operation: capability.as_str().to_owned(),
            });
        }
        Ok(provider)
    }
}
