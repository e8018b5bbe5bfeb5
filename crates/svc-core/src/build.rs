//! Template builds (decisions §17, "Template builds"): a Dockerfile and its context become an
//! image the template then uses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::id::BuildId;

/// Where a build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuildStatus {
    /// Waiting for a build slot or building.
    Running,
    /// Built; the template uses its image.
    Succeeded,
    /// A step failed, the context was unusable, or svc restarted during it.
    Failed,
    /// Cancelled with `DELETE`.
    Cancelled,
}

impl BuildStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            BuildStatus::Running => "running",
            BuildStatus::Succeeded => "succeeded",
            BuildStatus::Failed => "failed",
            BuildStatus::Cancelled => "cancelled",
        }
    }

    /// Parses the wire name.
    pub fn parse(value: &str) -> Option<Self> {
        [
            BuildStatus::Running,
            BuildStatus::Succeeded,
            BuildStatus::Failed,
            BuildStatus::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == value)
    }
}

/// One build of a template (`GET /templates/{name}/builds/{build_id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TemplateBuild {
    /// `bd-` and 16 hex characters.
    #[schema(value_type = String, example = "bd-0123456789abcdef")]
    pub build_id: BuildId,
    /// The template it builds.
    pub template: String,
    /// Where it is.
    pub status: BuildStatus,
    /// The image it made (`svc-templates/<name>:<build_id>`), once it succeeded.
    pub image: Option<String>,
    /// When it was accepted.
    #[schema(value_type = String, format = DateTime)]
    pub started_at: Timestamp,
    /// When it ended.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ended_at: Option<Timestamp>,
    /// Why it failed: the step and its output.
    pub error: Option<String>,
}

/// `POST /templates/{name}/build` as JSON: the Dockerfile and the rest of the context.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildRequest {
    /// The Dockerfile's text.
    pub dockerfile: String,
    /// Context files: path (relative to the context) → content.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// How every content in `files` is written: `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Option<String>,
}

/// `202` answer of `POST /templates/{name}/build`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BuildAccepted {
    /// The new build.
    #[schema(value_type = String, example = "bd-0123456789abcdef")]
    pub build_id: BuildId,
    /// Always `running`.
    pub status: BuildStatus,
}

/// One NDJSON line of `GET .../builds/{build_id}/logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BuildLogLine {
    /// A Dockerfile instruction starts (1-based).
    Step {
        /// Its number.
        step: u32,
        /// The instruction as the engine prints it (`RUN make`).
        instruction: String,
    },
    /// Output of the current step (a `RUN` command's, the engine's own messages).
    Output {
        /// Text, usually ending in a newline.
        data: String,
    },
    /// Bytes pulled so far for a base image.
    Progress {
        /// Pulled.
        current_bytes: u64,
        /// Known total.
        total_bytes: u64,
    },
    /// The last line: how the build ended.
    Result {
        /// `succeeded`, `failed` or `cancelled`.
        status: BuildStatus,
        /// The image, on success.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        image: Option<String>,
        /// Why not, otherwise.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        error: Option<String>,
    },
}

/// The start of every built image's name.
pub const BUILT_IMAGE_PREFIX: &str = "svc-templates/";

/// The repository svc tags template `name`'s builds with: `svc-templates/` and the name
/// lowercased, with what a Docker repository name cannot hold replaced by `-` (runs of
/// separators other than `.`, `_`, `__` or dashes; separators at either end are dropped).
pub fn build_repository(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let mut out = String::with_capacity(lower.len());
    let mut separators = String::new();
    for c in lower.chars() {
        if c.is_ascii_alphanumeric() {
            if !separators.is_empty() {
                let allowed = matches!(separators.as_str(), "." | "_" | "__")
                    || separators.chars().all(|s| s == '-');
                out.push_str(if allowed { &separators } else { "-" });
                separators.clear();
            }
            out.push(c);
        } else if out.is_empty() {
            // Nothing may come before the first letter or digit.
        } else {
            separators.push(if matches!(c, '.' | '_' | '-') { c } else { '-' });
        }
    }
    if out.is_empty() {
        out.push_str("template");
    }
    format!("{BUILT_IMAGE_PREFIX}{out}")
}

/// The image a build of template `name` makes.
pub fn build_image(name: &str, build_id: &BuildId) -> String {
    format!("{}:{build_id}", build_repository(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_hold_only_what_docker_accepts() {
        for (name, repository) in [
            ("python-3.12_slim", "svc-templates/python-3.12_slim"),
            ("My.App", "svc-templates/my.app"),
            ("a..b", "svc-templates/a-b"),
            ("a__b", "svc-templates/a__b"),
            ("a___b", "svc-templates/a-b"),
            ("a_-b", "svc-templates/a-b"),
            ("a---b", "svc-templates/a---b"),
            ("trailing.", "svc-templates/trailing"),
        ] {
            assert_eq!(build_repository(name), repository, "{name}");
        }
        let id = BuildId::parse("bd-0123456789abcdef").unwrap();
        assert_eq!(
            build_image("Web", &id),
            "svc-templates/web:bd-0123456789abcdef"
        );
    }

    #[test]
    fn log_lines_are_tagged_by_type() {
        let line = BuildLogLine::Step {
            step: 2,
            instruction: "RUN make".into(),
        };
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"type":"step","step":2,"instruction":"RUN make"}"#
        );
        let result = BuildLogLine::Result {
            status: BuildStatus::Succeeded,
            image: Some("svc-templates/a:bd-0123456789abcdef".into()),
            error: None,
        };
        assert_eq!(
            serde_json::to_string(&result).unwrap(),
            r#"{"type":"result","status":"succeeded","image":"svc-templates/a:bd-0123456789abcdef"}"#
        );
    }
}
