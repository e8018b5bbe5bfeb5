//! Templates: named spawn presets. Omitted fields are filled from the server defaults when
//! saved, so a template always renders complete.
//!
//! Templates belong to a tenant or, with no tenant, are global (decisions §30). Every read of a
//! template for a caller goes through [`ControlPlane::visible_template`] (another tenant's is
//! 404, exactly like a missing one) and every change through
//! [`ControlPlane::writable_template`] (a global one is 403 to a tenant-scoped caller); the
//! store's update and delete match the tenant too, so a template deleted and made again by
//! another tenant between the read and the write is not touched. Names are unique across
//! tenants.

use crate::paging::{Page, PageRequest, MAX_PAGE};
use crate::{ControlPlane, Principal};
use svc_core::access::Action;
use svc_core::admission::check_ttl;
use svc_core::error::{echo, Resource};
use svc_core::sandbox::{check_image, check_ttl_positive, size_or_default};
use svc_core::template::{validate_template_name, Template, TemplateSpec};
use svc_core::{Capability, Error};

impl ControlPlane {
    fn build_template(
        &self,
        name: String,
        tenant_id: Option<String>,
        spec: TemplateSpec,
        now: svc_core::Timestamp,
    ) -> Result<Template, Error> {
        validate_template_name(&name).map_err(|message| Error::invalid("name", message))?;
        let defaults = &self.config().defaults;
        let provider = spec
            .provider
            .unwrap_or_else(|| self.providers().default_name().to_owned());
        let spawns_on = self.spawn_provider(Some(&provider))?;
        let image = spec.image.unwrap_or_else(|| defaults.image.clone());
        let kind = check_image(&image)?;
        crate::spawn::check_image_for(&image, kind, spawns_on.as_ref())?;
        let memory_mb = size_or_default(
            "memory_mb",
            spec.memory_mb,
            u32::try_from(defaults.memory_mb).unwrap_or(u32::MAX),
        )?;
        let vcpus = size_or_default("vcpus", spec.vcpus, defaults.vcpus)?;
        crate::spawn::check_sizes(defaults, memory_mb, vcpus, Some(spawns_on.as_ref()))?;
        let ttl = spec.ttl.unwrap_or(defaults.ttl);
        check_ttl_positive(ttl)?;
        check_ttl(defaults.max_ttl, ttl.as_std())?;
        let warm_pool = spec.warm_pool.unwrap_or(0);
        if warm_pool > 0 {
            self.check_warm_pool(spawns_on.as_ref())?;
        }
        let egress = spec.egress.unwrap_or_default();
        egress.check()?;
        crate::spawn::check_egress_for(&egress, spawns_on.as_ref())?;
        if warm_pool > 0 && egress != svc_core::egress::Egress::default() {
            return Err(Error::invalid(
                "warm_pool",
                "warm runtimes start with egress all; a template with another egress keeps none (use 0)",
            ));
        }
        Ok(Template {
            name,
            tenant_id,
            image,
            memory_mb,
            vcpus,
            ttl,
            provider,
            metadata: spec.metadata.unwrap_or_default(),
            egress,
            warm_pool,
            warm_ready: 0,
            created_at: now,
            updated_at: now,
        })
    }

    /// `POST /templates`.
    pub async fn create_template(
        &self,
        principal: &Principal,
        spec: TemplateSpec,
    ) -> Result<Template, Error> {
        self.authorize(principal, Action::WriteTemplates)?;
        let name = spec
            .name
            .clone()
            .ok_or_else(|| Error::invalid("name", "is required"))?;
        let tenant_id = self
            .new_template_tenant(principal, spec.tenant_id.as_deref())
            .await?;
        let template = self.build_template(name, tenant_id, spec, self.clock().now())?;
        // A taken name comes back from the store as a conflict (409).
        self.store().insert_template(&template).await?;
        self.inner.warm.templates_changed();
        Ok(template)
    }

    /// The tenant a new template belongs to (decisions §30): an OIDC caller's own (naming
    /// another in `tenant_id` is 403); for API-key and admin callers the existing tenant the
    /// body names (else 400), or none: a global template.
    async fn new_template_tenant(
        &self,
        principal: &Principal,
        named: Option<&str>,
    ) -> Result<Option<String>, Error> {
        if principal.tenant_scoped {
            if let Some(named) = named.filter(|named| *named != principal.tenant_id) {
                return Err(Error::Denied {
                    message: format!(
                        "tenant_id names another tenant ({}): a caller of tenant {} makes templates of its own tenant only",
                        echo(named),
                        principal.tenant_id
                    ),
                });
            }
            return Ok(Some(principal.tenant_id.clone().into_owned()));
        }
        match named {
            Some(named) => Ok(Some(self.named_tenant("tenant_id", named).await?)),
            None => Ok(None),
        }
    }

    /// Template `name` as `principal` sees it: `None` when there is none, and when another
    /// tenant owns it (decisions §30: a tenant-scoped caller sees the global templates and its
    /// tenant's). What spawning from a template by name reads.
    pub(crate) async fn find_visible_template(
        &self,
        principal: &Principal,
        name: &str,
    ) -> Result<Option<Template>, Error> {
        let template = self.store().get_template(name).await?;
        Ok(template.filter(|template| {
            template
                .tenant_id
                .as_deref()
                .is_none_or(|tenant| principal.can_see_tenant(tenant))
        }))
    }

    /// Template `name` as `principal` sees it, or 404: another tenant's is answered exactly
    /// like a missing one.
    pub(crate) async fn visible_template(
        &self,
        principal: &Principal,
        name: &str,
    ) -> Result<Template, Error> {
        self.find_visible_template(principal, name)
            .await?
            .ok_or_else(|| Error::not_found(Resource::Template, name))
    }

    /// Template `name` for a change by `principal` (replace, delete, build): visible (else
    /// 404), and, for a tenant-scoped caller, its tenant's: a global template is 403.
    pub(crate) async fn writable_template(
        &self,
        principal: &Principal,
        name: &str,
    ) -> Result<Template, Error> {
        let template = self.visible_template(principal, name).await?;
        if principal.tenant_scoped && template.tenant_id.is_none() {
            return Err(Error::Denied {
                message: format!(
                    "template {} is global: a caller of tenant {} may change only its tenant's templates",
                    echo(name),
                    principal.tenant_id
                ),
            });
        }
        Ok(template)
    }

    /// A template may keep warm runtimes when its provider can hand them over, outside pool
    /// mode (whose sandboxes are workspaces in shared pool VMs).
    fn check_warm_pool(&self, provider: &dyn svc_provider::Provider) -> Result<(), Error> {
        if self.providers().pool().is_some() {
            return Err(Error::invalid(
                "warm_pool",
                "pool mode (pool.enabled) keeps no warm runtimes; use 0",
            ));
        }
        if !provider.capabilities().contains(&Capability::WarmPool) {
            return Err(Error::invalid(
                "warm_pool",
                format!(
                    "provider {} cannot keep warm runtimes (no capability warm_pool); use 0",
                    provider.name()
                ),
            ));
        }
        Ok(())
    }

    /// `template` with how many warm runtimes it has ready here.
    fn with_warm_ready(&self, mut template: Template) -> Template {
        template.warm_ready = self.inner.warm.ready(&template.name);
        template
    }

    /// `GET /templates`: a page, by name.
    pub async fn list_templates(
        &self,
        principal: &Principal,
        page: PageRequest,
    ) -> Result<Page<Template>, Error> {
        self.authorize(principal, Action::ReadTemplates)?;
        let paging = page.open::<String>("/templates", String::new(), MAX_PAGE)?;
        let templates = self
            .store()
            .list_templates(&paging.key_page(), principal.visible_tenant())
            .await?;
        let templates = templates
            .into_iter()
            .map(|t| self.with_warm_ready(t))
            .collect();
        Ok(paging.finish(templates, |t: &Template| t.name.clone()))
    }

    /// `GET /templates/{name}`.
    pub async fn get_template(&self, principal: &Principal, name: &str) -> Result<Template, Error> {
        self.authorize(principal, Action::ReadTemplates)?;
        let template = self.visible_template(principal, name).await?;
        Ok(self.with_warm_ready(template))
    }

    /// `PUT /templates/{name}`: replaces every field (omitted ones take the defaults).
    pub async fn update_template(
        &self,
        principal: &Principal,
        name: &str,
        spec: TemplateSpec,
    ) -> Result<Template, Error> {
        self.authorize(principal, Action::WriteTemplates)?;
        if spec.name.as_deref().is_some_and(|n| n != name) {
            return Err(Error::invalid(
                "name",
                "cannot be changed; it is taken from the path",
            ));
        }
        let existing = self.writable_template(principal, name).await?;
        // The tenant is chosen once, at creation; a replace keeps it.
        if let Some(named) = spec.tenant_id.as_deref() {
            if existing.tenant_id.as_deref() != Some(named) {
                let owner = existing.tenant_id.as_deref().map_or_else(
                    || "is global".to_owned(),
                    |tenant| format!("belongs to tenant {tenant}"),
                );
                return Err(Error::invalid(
                    "tenant_id",
                    format!("cannot be changed: template {} {owner}", echo(name)),
                ));
            }
        }
        let template =
            self.build_template(existing.name, existing.tenant_id, spec, self.clock().now())?;
        let updated = self
            .store()
            .update_template(&template)
            .await?
            .ok_or_else(|| Error::not_found(Resource::Template, name))?;
        self.inner.warm.templates_changed();
        if existing.image != updated.image {
            self.built_image_released(&existing.image);
        }
        Ok(self.with_warm_ready(updated))
    }

    /// `DELETE /templates/{name}`.
    pub async fn delete_template(&self, principal: &Principal, name: &str) -> Result<(), Error> {
        self.authorize(principal, Action::WriteTemplates)?;
        let template = self.writable_template(principal, name).await?;
        if !self
            .store()
            .delete_template(name, template.tenant_id.as_deref())
            .await?
        {
            return Err(Error::not_found(Resource::Template, name));
        }
        self.inner.warm.templates_changed();
        self.built_image_released(&template.image);
        Ok(())
    }
}
