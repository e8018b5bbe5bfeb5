//! Step "resolve": a spawn request becomes a [`SpawnPlan`], every default applied and every
//! field checked, in the order a caller learns of its mistakes: the request's own fields, the
//! template, the sizes and lifetime, pool mode, the placement and what its provider accepts,
//! then the tenant's policies and the egress rules. Writes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use svc_core::egress::Egress;
use svc_core::error::echo;
use svc_core::sandbox::{
    check_env, check_image, check_ttl_positive, size_or_default, SpawnRequest,
};
use svc_core::template::Template;
use svc_core::tenant::PolicyResource;
use svc_core::{Error, GoDuration, OwnerId};

use super::checks::{check_egress_for, check_image_for, check_network, check_sizes, resolve_owner};
use super::placement::Placement;
use crate::{ControlPlane, Principal};

/// A spawn with every default applied and every field validated.
pub(crate) struct SpawnPlan {
    pub(crate) placement: Placement,
    pub(super) provider_name: String,
    pub(super) image: String,
    pub(super) memory_mb: u32,
    pub(super) vcpus: u32,
    pub(crate) ttl: Duration,
    pub(super) metadata: BTreeMap<String, String>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) network: Option<String>,
    pub(crate) owner: Option<OwnerId>,
    pub(super) tenant: String,
    pub(super) template: Option<String>,
    pub(super) egress: Egress,
}

/// Who spawns, where, with what environment: the request's own fields, checked without I/O
/// beyond the tenant.
struct Caller {
    owner: Option<OwnerId>,
    tenant: String,
    env: BTreeMap<String, String>,
}

/// What the sandbox is: its image, sizes, lifetime and provider, from the request, else the
/// template, else the defaults.
struct Shape {
    image: String,
    memory_mb: u32,
    vcpus: u32,
    ttl: GoDuration,
    provider: Option<String>,
}

impl ControlPlane {
    /// Step "resolve" (see the module).
    pub(crate) async fn resolve(
        &self,
        principal: &Principal,
        request: SpawnRequest,
        template: Option<Template>,
    ) -> Result<SpawnPlan, Error> {
        let caller = self.caller(principal, &request).await?;
        let template = self
            .template_of(principal, template, request.template.as_deref())
            .await?;
        let shape = self.shape(&request, template.as_ref())?;
        let shape = self.pooled(shape, request.image.as_deref())?;
        let placement = self.placed(&shape, request.network.as_deref()).await?;
        let local = match &placement {
            Placement::Local(provider) => Some(provider.as_ref()),
            Placement::Remote { .. } | Placement::Elsewhere { .. } => None,
        };
        let network = request
            .network
            .clone()
            .or_else(|| local.map(|provider| provider.default_network()));
        let egress = request
            .egress
            .or_else(|| template.as_ref().map(|t| t.egress.clone()))
            .unwrap_or_default();
        egress.check()?;
        self.check_spawn_policies(
            principal,
            &caller.tenant,
            &shape,
            &placement,
            network.as_deref(),
            &egress,
        )
        .await?;
        if let Some(provider) = local {
            check_egress_for(&egress, provider)?;
        }
        crate::egress_reach::check_allowlist(
            &egress,
            self.config().providers.docker.egress_allow_host,
        )
        .await?;
        let mut metadata = template
            .as_ref()
            .map(|t| t.metadata.clone())
            .unwrap_or_default();
        metadata.extend(request.metadata.unwrap_or_default());
        Ok(SpawnPlan {
            provider_name: placement.provider_name().to_owned(),
            placement,
            image: shape.image,
            memory_mb: shape.memory_mb,
            vcpus: shape.vcpus,
            ttl: shape.ttl.as_std(),
            metadata,
            env: caller.env,
            network: request.network,
            owner: caller.owner,
            tenant: caller.tenant,
            template: template.map(|t| t.name),
            egress,
        })
    }

    /// The request's own fields first: no I/O but the tenant's is needed to refuse them.
    async fn caller(&self, principal: &Principal, request: &SpawnRequest) -> Result<Caller, Error> {
        let owner = resolve_owner(principal, request.owner_id.as_deref())?;
        let tenant = self
            .spawn_tenant(principal, request.tenant_id.as_deref())
            .await?;
        if let Some(image) = &request.image {
            check_image(image)?;
        }
        let env = request.env.clone().unwrap_or_default();
        check_env(&env)?;
        if let Some(ttl) = request.ttl {
            check_ttl_positive(ttl)?;
        }
        Ok(Caller { owner, tenant, env })
    }

    /// The template of the path, else the one the body names (which must exist, as the caller
    /// may see it).
    async fn template_of(
        &self,
        principal: &Principal,
        given: Option<Template>,
        named: Option<&str>,
    ) -> Result<Option<Template>, Error> {
        match (given, named) {
            (Some(template), _) => Ok(Some(template)),
            (None, Some(name)) => Ok(Some(
                self.find_visible_template(principal, name)
                    .await?
                    .ok_or_else(|| {
                        Error::invalid(
                            "template",
                            format!("template {} does not exist", echo(name)),
                        )
                    })?,
            )),
            (None, None) => Ok(None),
        }
    }

    /// The image, sizes, lifetime and provider: the request's, else the template's, else the
    /// defaults.
    fn shape(&self, request: &SpawnRequest, template: Option<&Template>) -> Result<Shape, Error> {
        let defaults = &self.config().defaults;
        let image = request
            .image
            .clone()
            .or_else(|| template.map(|t| t.image.clone()))
            .unwrap_or_else(|| defaults.image.clone());
        check_image(&image)?;
        let default_memory = template
            .map_or(u32::try_from(defaults.memory_mb).unwrap_or(u32::MAX), |t| {
                t.memory_mb
            });
        let memory_mb = size_or_default("memory_mb", request.memory_mb, default_memory)?;
        let default_vcpus = template.map_or(defaults.vcpus, |t| t.vcpus);
        let vcpus = size_or_default("vcpus", request.vcpus, default_vcpus)?;
        let ttl = request
            .ttl
            .or_else(|| template.map(|t| t.ttl))
            .unwrap_or(defaults.ttl);
        check_ttl_positive(ttl)?;
        let provider = request
            .provider
            .clone()
            .or_else(|| template.map(|t| t.provider.clone()));
        Ok(Shape {
            image,
            memory_mb,
            vcpus,
            ttl,
            provider,
        })
    }

    /// Pool mode: every sandbox is a workspace in a pool VM, of the pool's provider and image;
    /// a request naming another is 400.
    fn pooled(&self, shape: Shape, request_image: Option<&str>) -> Result<Shape, Error> {
        let Some(pool) = self.providers().pool() else {
            return Ok(shape);
        };
        if let Some(named) = shape.provider.as_deref().filter(|p| !p.is_empty()) {
            if named != pool.provider_name() {
                return Err(Error::invalid(
                    "provider",
                    format!(
                        "pool mode spawns every sandbox on provider {} (pool.provider), not {}",
                        pool.provider_name(),
                        echo(named)
                    ),
                ));
            }
        }
        if request_image.is_some_and(|i| i != pool.image()) {
            return Err(Error::invalid(
                "image",
                format!(
                    "pool mode runs every sandbox in the pool VMs' image {} (pool.image)",
                    echo(pool.image())
                ),
            ));
        }
        Ok(Shape {
            provider: Some(pool.provider_name().to_owned()),
            image: pool.image().to_owned(),
            ..shape
        })
    }

    /// The placement, and what its provider accepts: the kind of image, the sizes and the
    /// network (only the operator's limits when the provider runs elsewhere).
    async fn placed(&self, shape: &Shape, network: Option<&str>) -> Result<Placement, Error> {
        let image_kind = check_image(&shape.image)?;
        let placement = self.place(shape.provider.as_deref()).await?;
        let local = match &placement {
            Placement::Local(provider) => {
                check_image_for(&shape.image, image_kind, provider.as_ref())?;
                Some(provider.as_ref())
            }
            Placement::Remote { .. } | Placement::Elsewhere { .. } => None,
        };
        check_sizes(&self.config().defaults, shape.memory_mb, shape.vcpus, local)?;
        check_network(self.config(), network, local)?;
        Ok(placement)
    }

    /// The tenant's policies on every value the spawn names: the image, the provider, the
    /// network, the egress mode and each allowed destination as written (decisions §18).
    async fn check_spawn_policies(
        &self,
        principal: &Principal,
        tenant: &str,
        shape: &Shape,
        placement: &Placement,
        network: Option<&str>,
        egress: &Egress,
    ) -> Result<(), Error> {
        let mut values = vec![
            (PolicyResource::Image, Some(shape.image.as_str())),
            (PolicyResource::Provider, Some(placement.provider_name())),
            (PolicyResource::Network, network),
            (PolicyResource::Network, Some(egress.mode.as_str())),
        ];
        values.extend(
            egress
                .allow
                .iter()
                .map(|entry| (PolicyResource::Network, Some(entry.as_str()))),
        );
        self.check_policies(principal, tenant, &values, placement.provider_name())
            .await
    }
}
