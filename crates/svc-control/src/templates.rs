//! Templates: named spawn presets. Omitted fields are filled from the server defaults when
//! saved, so a template always renders complete.

use crate::paging::{Page, PageRequest, MAX_PAGE};
use crate::{ControlPlane, Principal};
use svc_core::access::Action;
use svc_core::admission::check_ttl;
use svc_core::error::Resource;
use svc_core::sandbox::{check_image, check_ttl_positive, size_or_default};
use svc_core::template::{validate_template_name, Template, TemplateSpec};
use svc_core::{Capability, Error};

impl ControlPlane {
    fn build_template(
        &self,
        name: String,
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
        let template = self.build_template(name, spec, self.clock().now())?;
        // A taken name comes back from the store as a conflict (409).
        self.store().insert_template(&template).await?;
        self.inner.warm.templates_changed();
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
        let templates = self.store().list_templates(&paging.key_page()).await?;
        let templates = templates
            .into_iter()
            .map(|t| self.with_warm_ready(t))
            .collect();
        Ok(paging.finish(templates, |t: &Template| t.name.clone()))
    }

    /// `GET /templates/{name}`.
    pub async fn get_template(&self, principal: &Principal, name: &str) -> Result<Template, Error> {
        self.authorize(principal, Action::ReadTemplates)?;
        let template = self.template_by_name(name).await?;
        Ok(self.with_warm_ready(template))
    }

    /// A template by name, or 404.
    pub(crate) async fn template_by_name(&self, name: &str) -> Result<Template, Error> {
        self.store()
            .get_template(name)
            .await?
            .ok_or_else(|| Error::not_found(Resource::Template, name))
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
        let existing = self.template_by_name(name).await?;
        let template = self.build_template(existing.name, spec, self.clock().now())?;
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
        let image = self.store().get_template(name).await?.map(|t| t.image);
        if self.store().delete_template(name).await? {
            self.inner.warm.templates_changed();
            if let Some(image) = image {
                self.built_image_released(&image);
            }
            Ok(())
        } else {
            Err(Error::not_found(Resource::Template, name))
        }
    }
}
