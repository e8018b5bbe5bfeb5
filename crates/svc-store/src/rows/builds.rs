//! Template builds (decisions §17) as both backends store them.

use svc_core::build::{BuildStatus, TemplateBuild};
use svc_core::BuildId;

use super::{micros, stored_row, timestamp};
use crate::{StoreError, StoreResult};

pub(crate) const BUILD_COLUMNS: &str = BuildRow::COLUMNS;

stored_row! {
    /// A build row as stored.
    struct BuildRow {
        pub(crate) build_id: String,
        template: String,
        worker_id: String,
        status: String,
        image: Option<String>,
        started_at: i64,
        ended_at: Option<i64>,
        error: Option<String>,
    }
}

impl BuildRow {
    pub(crate) fn from_domain(build: &TemplateBuild, worker_id: &str) -> Self {
        BuildRow {
            build_id: build.build_id.to_string(),
            template: build.template.clone(),
            worker_id: worker_id.to_owned(),
            status: build.status.as_str().to_owned(),
            image: build.image.clone(),
            started_at: micros(build.started_at),
            ended_at: build.ended_at.map(micros),
            error: build.error.clone(),
        }
    }

    pub(crate) fn into_domain(self) -> StoreResult<TemplateBuild> {
        const E: &str = "template build";
        let corrupt = |message: String| StoreError::Corrupt {
            entity: E,
            key: self.build_id.clone(),
            message,
        };
        let build_id = BuildId::parse(&self.build_id).map_err(|e| corrupt(e.to_string()))?;
        let status = BuildStatus::parse(&self.status)
            .ok_or_else(|| corrupt(format!("unknown status {:?}", self.status)))?;
        Ok(TemplateBuild {
            started_at: timestamp(E, &self.build_id, self.started_at)?,
            ended_at: self
                .ended_at
                .map(|at| timestamp(E, &self.build_id, at))
                .transpose()?,
            build_id,
            template: self.template,
            status,
            image: self.image,
            error: self.error,
        })
    }
}
