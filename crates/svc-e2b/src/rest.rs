//! E2B's control-plane routes on svc's lifecycle. An E2B template is an svc template of the
//! same name; any other name (E2B's `base` included) spawns the default image. E2B's
//! `timeout` (seconds) is the sandbox's TTL; `set_timeout` and `connect` move `expires_at`;
//! pause and resume are svc's. Ended sandboxes are not found here, as on E2B.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use svc_control::{ListSandboxes, PageRequest, Principal, MAX_PAGE};
use svc_core::egress::{Egress, EgressMode};
use svc_core::error::Resource;
use svc_core::sandbox::{ExtendRequest, Metadata, Sandbox, SandboxState, SpawnRequest};
use svc_core::template::TemplateSpawnRequest;
use svc_core::{Error, GoDuration, SandboxId};

use crate::caller::{ApiCaller, E2b};
use crate::error::{E2bError, E2bJson, E2bQuery};

/// The metadata key that keeps the E2B template name a sandbox was asked for.
const TEMPLATE_KEY: &str = "e2b.template";
/// E2B's default lifetime when a create names none.
const DEFAULT_TIMEOUT_SECS: u64 = 300;

/// `POST /v2/sandboxes` (and the legacy `POST /sandboxes`) body.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    timeout: Option<u64>,
    metadata: Option<Metadata>,
    env_vars: Option<std::collections::BTreeMap<String, String>>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
}

/// `{"timeout": seconds}` of set-timeout, connect and resume.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TimeoutBody {
    timeout: Option<u64>,
    duration: Option<u64>,
}

/// `GET /v2/sandboxes` query.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ListQuery {
    metadata: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
    next_token: Option<String>,
}

fn template_name(sandbox: &Sandbox) -> String {
    sandbox
        .metadata
        .get(TEMPLATE_KEY)
        .cloned()
        .or_else(|| sandbox.template.clone())
        .unwrap_or_else(|| "base".to_owned())
}

fn user_metadata(sandbox: &Sandbox) -> Metadata {
    let mut metadata = sandbox.metadata.clone();
    metadata.remove(TEMPLATE_KEY);
    metadata
}

/// E2B's `Sandbox` (create and connect answers).
async fn created(e2b: &E2b, sandbox: &Sandbox) -> Result<Value, Error> {
    let mut body = json!({
        "templateID": template_name(sandbox),
        "sandboxID": sandbox.id.as_str(),
        "clientID": "svc",
        "envdVersion": crate::ENVD_VERSION,
        "domain": null,
    });
    if e2b.plane.auth_enabled() {
        body["envdAccessToken"] = json!(e2b.plane.sandbox_access_token(&sandbox.id).await?);
    }
    Ok(body)
}

/// E2B's `ListedSandbox` / `SandboxDetail`.
fn detail(sandbox: &Sandbox) -> Value {
    let state = if sandbox.state == SandboxState::Paused {
        "paused"
    } else {
        "running"
    };
    json!({
        "templateID": template_name(sandbox),
        "sandboxID": sandbox.id.as_str(),
        "clientID": "svc",
        "startedAt": sandbox.created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "endAt": sandbox.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "cpuCount": sandbox.vcpus,
        "memoryMB": sandbox.memory_mb,
        "diskSizeMB": 0,
        "state": state,
        "envdVersion": crate::ENVD_VERSION,
        "metadata": user_metadata(sandbox),
    })
}

/// A sandbox E2B would still know: not ended (destroyed or failed ones are not found).
async fn live(e2b: &E2b, principal: &Principal, id: &str) -> Result<Sandbox, E2bError> {
    let sandbox = e2b
        .plane
        .get_sandbox(principal, &SandboxId::named(id)?)
        .await?;
    match sandbox.state {
        SandboxState::Running | SandboxState::Paused | SandboxState::Creating => Ok(sandbox),
        SandboxState::Error | SandboxState::Destroyed => {
            Err(Error::not_found(Resource::Sandbox, id).into())
        }
    }
}

fn ttl(seconds: u64) -> GoDuration {
    GoDuration::from_secs(seconds)
}

/// `POST /v2/sandboxes`: 201 with the new sandbox.
pub(crate) async fn create(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    E2bJson(body): E2bJson<NewSandbox>,
) -> Result<Response, E2bError> {
    let name = body.template_id.unwrap_or_else(|| "base".to_owned());
    let mut metadata = body.metadata.unwrap_or_default();
    metadata.insert(TEMPLATE_KEY.to_owned(), name.clone());
    let timeout = Some(ttl(body.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS)));
    let plane = &e2b.plane;
    let sandbox = match plane.get_template(&principal, &name).await {
        Ok(_) => {
            let request = TemplateSpawnRequest {
                ttl: timeout,
                env: body.env_vars,
                metadata: Some(metadata),
                ..TemplateSpawnRequest::default()
            };
            plane
                .spawn_from_template(&principal, &name, request)
                .await?
        }
        Err(Error::NotFound { .. }) => {
            let egress = (body.allow_internet_access == Some(false)).then(|| Egress {
                mode: EgressMode::None,
                allow: Vec::new(),
            });
            let request = SpawnRequest {
                ttl: timeout,
                env: body.env_vars,
                metadata: Some(metadata),
                egress,
                ..SpawnRequest::default()
            };
            plane.spawn_sandbox(&principal, request).await?
        }
        Err(err) => return Err(err.into()),
    };
    let body = created(&e2b, &sandbox).await?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Whether `sandbox` matches E2B's `metadata` filter (`k=v&...`, each part percent-encoded).
fn matches_metadata(sandbox: &Sandbox, filter: Option<&str>) -> bool {
    let Some(filter) = filter.filter(|f| !f.is_empty()) else {
        return true;
    };
    filter
        .split('&')
        .filter(|pair| !pair.is_empty())
        .all(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            sandbox.metadata.get(&percent_decode(key)) == Some(&percent_decode(value))
        })
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    out.push(high * 16 + low);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether E2B lists `sandbox` under `states` (`running`, `paused`) and the metadata filter.
fn listed(sandbox: &Sandbox, states: &[&str], metadata: Option<&str>) -> bool {
    let state = match sandbox.state {
        SandboxState::Running => "running",
        SandboxState::Paused => "paused",
        _ => return false,
    };
    states.contains(&state) && matches_metadata(sandbox, metadata)
}

/// `GET /v2/sandboxes`: running and paused sandboxes, `limit` at a time (`x-next-token`).
///
/// The token is svc's own list cursor, so paging neither skips nor repeats a sandbox while
/// others come and go, and each page reads only what it needs: svc pages of the number still
/// missing, each consumed whole, until the page is full or the list ends (the metadata and
/// two-state filters are applied here, so one svc page may not fill an E2B page).
pub(crate) async fn list(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    E2bQuery(query): E2bQuery<ListQuery>,
) -> Result<Response, E2bError> {
    let states: Vec<&str> = match query.state.as_deref() {
        Some(list) if !list.is_empty() => list.split(',').map(str::trim).collect(),
        _ => vec!["running", "paused"],
    };
    // One asked-for state is svc's own filter; otherwise every active sandbox, filtered here.
    let state = match states.as_slice() {
        [only] if matches!(*only, "running" | "paused") => Some((*only).to_owned()),
        _ => None,
    };
    let limit = query.limit.unwrap_or(100).clamp(1, MAX_PAGE as usize);
    let mut cursor = query.next_token.filter(|token| !token.is_empty());
    let mut page = Vec::with_capacity(limit);
    loop {
        let missing = u32::try_from(limit - page.len()).unwrap_or(MAX_PAGE);
        let request = ListSandboxes {
            state: state.clone(),
            page: PageRequest {
                limit: Some(missing),
                cursor: cursor.take(),
            },
            ..ListSandboxes::default()
        };
        let found = e2b
            .plane
            .list_sandboxes_page(&principal, request)
            .await
            .map_err(|err| match err {
                Error::InvalidInput { field, .. } if field == "cursor" => E2bError::new(
                    StatusCode::BAD_REQUEST,
                    "nextToken: is not a token of this list",
                ),
                other => other.into(),
            })?;
        page.extend(
            found
                .items
                .iter()
                .filter(|s| listed(s, &states, query.metadata.as_deref()))
                .map(detail),
        );
        cursor = found.next_cursor;
        if cursor.is_none() || page.len() >= limit {
            break;
        }
    }
    let mut response = Json(page).into_response();
    if let Some(token) = cursor.and_then(|token| HeaderValue::from_str(&token).ok()) {
        response.headers_mut().insert("x-next-token", token);
    }
    Ok(response)
}

/// Legacy `GET /sandboxes`: the running sandboxes, unpaginated.
pub(crate) async fn list_v1(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    E2bQuery(query): E2bQuery<ListQuery>,
) -> Result<Json<Vec<Value>>, E2bError> {
    let request = ListSandboxes {
        state: Some("running".to_owned()),
        ..ListSandboxes::default()
    };
    let sandboxes = e2b.plane.list_sandboxes(&principal, request).await?;
    Ok(Json(
        sandboxes
            .iter()
            .filter(|s| listed(s, &["running"], query.metadata.as_deref()))
            .map(detail)
            .collect(),
    ))
}

/// `GET /sandboxes/{id}`.
pub(crate) async fn info(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
) -> Result<Json<Value>, E2bError> {
    Ok(Json(detail(&live(&e2b, &principal, &id).await?)))
}

/// `DELETE /sandboxes/{id}`: 204; 404 for one already gone.
pub(crate) async fn kill(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    let sandbox = live(&e2b, &principal, &id).await?;
    e2b.plane.destroy_sandbox(&principal, &sandbox.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/timeout` `{timeout}`: the sandbox ends `timeout` seconds from now.
pub(crate) async fn set_timeout(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
    E2bJson(body): E2bJson<TimeoutBody>,
) -> Result<StatusCode, E2bError> {
    let seconds = body
        .timeout
        .ok_or_else(|| E2bError::bad_request("timeout: is required"))?;
    end_in(&e2b, &principal, &id, seconds).await
}

/// Sandbox `id` (a live one) ends `seconds` from now: 204.
async fn end_in(
    e2b: &E2b,
    principal: &Principal,
    id: &str,
    seconds: u64,
) -> Result<StatusCode, E2bError> {
    let sandbox = live(e2b, principal, id).await?;
    e2b.plane
        .extend_sandbox(principal, &sandbox.id, ExtendRequest { ttl: ttl(seconds) })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Legacy `POST /sandboxes/{id}/refreshes` `{duration}`: as set-timeout (default 60 s).
pub(crate) async fn refresh(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
    E2bJson(body): E2bJson<TimeoutBody>,
) -> Result<StatusCode, E2bError> {
    end_in(&e2b, &principal, &id, body.duration.unwrap_or(60)).await
}

/// `POST /sandboxes/{id}/pause`: 204; 409 when it is paused already.
pub(crate) async fn pause(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    let sandbox = live(&e2b, &principal, &id).await?;
    if sandbox.state == SandboxState::Paused {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already paused"),
        ));
    }
    e2b.plane.pause_sandbox(&principal, &sandbox.id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v2/sandboxes/{id}/connect` (and the legacy `/sandboxes/{id}/connect`): resumes a
/// paused sandbox (201) or answers a running one (200); a `timeout` only ever lengthens its
/// life.
pub(crate) async fn connect(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
    E2bJson(body): E2bJson<TimeoutBody>,
) -> Result<Response, E2bError> {
    let mut sandbox = live(&e2b, &principal, &id).await?;
    let resumed = sandbox.state == SandboxState::Paused;
    if resumed {
        sandbox = e2b.plane.resume_sandbox(&principal, &sandbox.id).await?;
    }
    if let Some(seconds) = body.timeout {
        // A timeout beyond what a time can hold is the caller's mistake (400), never a panic.
        let wanted = i64::try_from(seconds)
            .ok()
            .and_then(chrono::Duration::try_seconds)
            .and_then(|timeout| e2b.plane.clock().now().checked_add_signed(timeout))
            .ok_or_else(|| {
                E2bError::bad_request(format!("timeout: {seconds} seconds is out of range"))
            })?;
        if wanted > sandbox.expires_at {
            sandbox = e2b
                .plane
                .extend_sandbox(&principal, &sandbox.id, ExtendRequest { ttl: ttl(seconds) })
                .await?;
        }
    }
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(created(&e2b, &sandbox).await?)).into_response())
}

/// `GET /sandboxes/{id}/metrics`: one sample, now (svc keeps no history of them); disk figures
/// are not measured and read 0.
pub(crate) async fn metrics(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
) -> Result<Json<Vec<Value>>, E2bError> {
    let sandbox = live(&e2b, &principal, &id).await?;
    let stats = e2b.plane.sandbox_stats(&principal, &sandbox.id).await?;
    Ok(Json(vec![json!({
        "timestamp": stats.sampled_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "timestampUnix": stats.sampled_at.timestamp(),
        "cpuCount": sandbox.vcpus,
        "cpuUsedPct": stats.cpu_percent,
        "memUsed": stats.memory_bytes,
        "memTotal": stats.memory_limit_bytes,
        "memCache": 0,
        "diskUsed": 0,
        "diskTotal": 0,
    })]))
}

/// Legacy `POST /sandboxes/{id}/resume`: 201; 409 for a running sandbox.
pub(crate) async fn resume(
    State(e2b): State<E2b>,
    ApiCaller(principal): ApiCaller,
    Path(id): Path<String>,
    E2bJson(body): E2bJson<TimeoutBody>,
) -> Result<Response, E2bError> {
    let sandbox = live(&e2b, &principal, &id).await?;
    if sandbox.state != SandboxState::Paused {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is not paused"),
        ));
    }
    connect(State(e2b), ApiCaller(principal), Path(id), E2bJson(body)).await
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn metadata_filters_are_percent_decoded() {
        assert_eq!(percent_decode("x%20y"), "x y");
        assert_eq!(percent_decode("a%3Db"), "a=b");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
