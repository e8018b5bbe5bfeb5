//! The audit log (decisions §6): entries are written by the HTTP layer for every mutating admin
//! request and quota change, and by the control plane for policy denials; read back filtered,
//! as JSON or CSV.

use svc_core::access::Action;
use svc_core::audit::{
    AuditEntry, AuditFilter, AuditOutcome, AuditPosition, DEFAULT_AUDIT_LIMIT, MAX_AUDIT_LIMIT,
};
use svc_core::tenant::check_tenant_id;
use svc_core::{Error, Timestamp};

use crate::paging::{self, filter_key, Page, PageRequest};
use crate::{ControlPlane, Principal};

/// What happened, by whom: one entry before it gets its ID and time.
pub struct AuditRecord<'a> {
    /// Who.
    pub principal: &'a Principal,
    /// The tenant concerned.
    pub tenant_id: &'a str,
    /// What (`tenant.create`, `policy.denied`, ...).
    pub action: &'a str,
    /// The object.
    pub resource: String,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// More.
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// The query of `GET /admin/audit`, unchecked.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Exact tenant.
    pub tenant_id: Option<String>,
    /// Exact actor (an OIDC subject, `api-key`, `admin-api-key`, `anonymous`).
    pub actor: Option<String>,
    /// Exact action.
    pub action: Option<String>,
    /// RFC 3339; entries at or after.
    pub since: Option<String>,
    /// RFC 3339; entries at or before.
    pub until: Option<String>,
    /// 1..=1000, default 100.
    pub limit: Option<String>,
    /// The next page: the `X-Next-Cursor` of the previous answer (with the same filters).
    pub cursor: Option<String>,
    /// `json` (default) or `csv`.
    pub format: Option<String>,
}

fn time_param(field: &str, value: Option<&str>) -> Result<Option<Timestamp>, Error> {
    value
        .map(|text| {
            chrono::DateTime::parse_from_rfc3339(text)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|_| {
                    Error::invalid(
                        field,
                        format!("{} is not an RFC 3339 time", svc_core::error::echo(text)),
                    )
                })
        })
        .transpose()
}

impl AuditQuery {
    /// The filter it asks for, or 400 naming the parameter at fault.
    pub fn filter(&self) -> Result<AuditFilter, Error> {
        let limit = match self.limit.as_deref() {
            None => DEFAULT_AUDIT_LIMIT,
            Some(text) => text
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_AUDIT_LIMIT).contains(n))
                .ok_or_else(|| {
                    Error::invalid(
                        "limit",
                        format!("must be an integer from 1 to {MAX_AUDIT_LIMIT}"),
                    )
                })?,
        };
        if let Some(tenant) = &self.tenant_id {
            check_tenant_id(tenant).map_err(|m| Error::invalid("tenant_id", m))?;
        }
        Ok(AuditFilter {
            tenant_id: self.tenant_id.clone(),
            actor: self.actor.clone(),
            action: self.action.clone(),
            since: time_param("since", self.since.as_deref())?,
            until: time_param("until", self.until.as_deref())?,
            limit,
            after: None,
        })
    }

    /// The filters as a cursor holds them (`format` is not one: a page may be asked in either).
    fn filter_key(&self, tenant_id: Option<&str>) -> String {
        filter_key(&[
            tenant_id,
            self.actor.as_deref(),
            self.action.as_deref(),
            self.since.as_deref(),
            self.until.as_deref(),
        ])
    }

    /// Whether CSV was asked for; anything but `json`/`csv` is 400.
    pub fn wants_csv(&self) -> Result<bool, Error> {
        match self.format.as_deref() {
            None | Some("json") => Ok(false),
            Some("csv") => Ok(true),
            Some(other) => Err(Error::invalid(
                "format",
                format!(
                    "{} is not a format (json, csv)",
                    svc_core::error::echo(other)
                ),
            )),
        }
    }
}

impl ControlPlane {
    /// Writes an audit entry. The action already happened: a store failure is logged, never
    /// turned into the request's error.
    pub async fn record_audit(&self, record: AuditRecord<'_>) {
        let entry = AuditEntry {
            id: AuditEntry::new_id(),
            timestamp: svc_core::clock::truncate_to_micros(self.clock().now()),
            actor: record.principal.actor().to_owned(),
            role: record.principal.role.as_str().to_owned(),
            tenant_id: record.tenant_id.to_owned(),
            action: record.action.to_owned(),
            resource: record.resource,
            outcome: record.outcome,
            details: record.details,
        };
        if let Err(err) = self.store().insert_audit(&entry).await {
            tracing::error!(action = %entry.action, error = %err, "cannot write an audit entry");
        }
    }

    /// `GET /admin/audit`: a page, newest first.
    pub async fn list_audit(
        &self,
        principal: &Principal,
        query: &AuditQuery,
    ) -> Result<Page<AuditEntry>, Error> {
        self.authorize(principal, Action::ReadAudit)?;
        let filter = query.filter()?;
        let key = query.filter_key(query.tenant_id.as_deref());
        self.audit_page("/admin/audit", key, query.cursor.clone(), filter)
            .await
    }

    /// `GET /admin/tenants/{tenantID}/audit`: the same, fixed to one tenant.
    pub async fn list_tenant_audit(
        &self,
        principal: &Principal,
        tenant_id: &str,
        query: &AuditQuery,
    ) -> Result<Page<AuditEntry>, Error> {
        self.authorize_tenant(principal, tenant_id)?;
        let mut filter = query.filter()?;
        filter.tenant_id = Some(tenant_id.to_owned());
        let key = query.filter_key(Some(tenant_id));
        self.audit_page(
            "/admin/tenants/{tenantID}/audit",
            key,
            query.cursor.clone(),
            filter,
        )
        .await
    }

    async fn audit_page(
        &self,
        route: &'static str,
        key: String,
        cursor: Option<String>,
        mut filter: AuditFilter,
    ) -> Result<Page<AuditEntry>, Error> {
        let page = PageRequest {
            limit: Some(filter.limit),
            cursor,
        };
        let paging = page.open::<(i64, String)>(route, key, DEFAULT_AUDIT_LIMIT)?;
        if let Some((micros, id)) = &paging.after {
            filter.after = Some(AuditPosition {
                timestamp: paging::timestamp(*micros)?,
                id: id.clone(),
            });
        }
        filter.limit = paging.fetch();
        let entries = self.store().list_audit(&filter).await?;
        Ok(paging.finish(entries, |entry: &AuditEntry| {
            (entry.timestamp.timestamp_micros(), entry.id.clone())
        }))
    }
}

/// The entries as CSV: a header row in decisions §6's field order, `details` as JSON text.
pub fn audit_csv(entries: &[AuditEntry]) -> Result<Vec<u8>, Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let failed = |e: csv::Error| Error::internal("writing the audit CSV", e);
    writer
        .write_record(svc_core::audit::AUDIT_FIELDS)
        .map_err(failed)?;
    for entry in entries {
        let timestamp = entry
            .timestamp
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
        let details = serde_json::Value::Object(entry.details.clone()).to_string();
        writer
            .write_record([
                entry.id.as_str(),
                &timestamp,
                &entry.actor,
                &entry.role,
                &entry.tenant_id,
                &entry.action,
                &entry.resource,
                entry.outcome.as_str(),
                &details,
            ])
            .map_err(failed)?;
    }
    writer
        .into_inner()
        .map_err(|e| Error::internal("writing the audit CSV", e.into_error()))
}
