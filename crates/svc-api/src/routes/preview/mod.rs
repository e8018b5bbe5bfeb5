//! Previews (decisions §18): `POST /sandboxes/{id}/preview-tokens`, and the proxy to a port
//! inside a sandbox, by path (`/api/v1/sandboxes/{id}/proxy/{port}/...`) or by host name
//! (`<port>-<id>.<server.preview_domain>`). Requests and responses stream both ways (hyper's
//! HTTP/1 client over connections the provider opens, kept for reuse: `upstream.rs`); a
//! WebSocket upgrade becomes a byte pipe once both sides agreed. The proxy authenticates for itself: credentials as any route,
//! or a preview token (`?svc_preview_token=`, then a cookie scoped to the preview).

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hyper_util::rt::TokioIo;
use svc_control::preview::{check_port, PreviewAccess, PreviewToken, PreviewTokenRequest};
use svc_control::ControlPlane;
use svc_core::{Error, SandboxId};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::extract::{ApiJson, Caller};
use crate::{ApiError, ErrorBody};

mod upstream;

/// What the proxy handlers share: the control plane and the pooled upstream client.
#[derive(Clone)]
pub(crate) struct Previews {
    plane: ControlPlane,
    upstream: upstream::Upstream,
}

impl Previews {
    pub(crate) fn new(plane: ControlPlane) -> Self {
        Previews {
            upstream: upstream::client(plane.clone()),
            plane,
        }
    }
}

/// The query parameter and cookie carrying a preview token.
pub(crate) const TOKEN_PARAM: &str = "svc_preview_token";

/// Headers that belong to one hop (RFC 9110 §7.6.1); an upgrade keeps `Connection` and
/// `Upgrade`, which carry it.
const HOP_BY_HOP: [&str; 7] = [
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// Issues a token that opens one port of one sandbox until it expires.
#[utoipa::path(post, path = "/sandboxes/{id}/preview-tokens", tag = "previews",
    params(("id" = String, Path, description = "Sandbox ID")),
    request_body = PreviewTokenRequest,
    responses((status = 200, description = "The token", body = PreviewToken),
        (status = 400, description = "Invalid port or ttl", body = ErrorBody),
        (status = 404, description = "No such sandbox", body = ErrorBody),
        (status = 409, description = "The sandbox has ended", body = ErrorBody)))]
async fn issue_token(
    State(plane): State<ControlPlane>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<PreviewTokenRequest>,
) -> Result<Json<PreviewToken>, ApiError> {
    let id = SandboxId::named(&id)?;
    Ok(Json(
        plane.issue_preview_token(&principal, &id, request).await?,
    ))
}

pub(crate) fn routes() -> OpenApiRouter<ControlPlane> {
    OpenApiRouter::new().routes(routes!(issue_token))
}

/// Marks a response that came from the sandbox: svc's JSON error wrapping leaves it alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Proxied;

/// Where a proxied request goes and how it was addressed.
struct Target {
    sandbox: String,
    port: u16,
    /// The path and query to send upstream.
    upstream: String,
    /// The path a token cookie is scoped to.
    cookie_path: String,
}

/// The proxy by path: `/api/v1/sandboxes/{id}/proxy/{port}[/{rest}]`. `None` for other paths.
pub(crate) fn path_target(uri: &Uri) -> Option<Result<(String, u32, String), Error>> {
    let rest = uri.path().strip_prefix("/api/v1/sandboxes/")?;
    let (id, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("proxy/")?;
    let (port, path) = match rest.split_once('/') {
        Some((port, path)) => (port, format!("/{path}")),
        None => (rest, "/".to_owned()),
    };
    let Ok(port) = port.parse::<u32>() else {
        let message = format!("{} is not a port", svc_core::error::echo(port));
        return Some(Err(Error::invalid("port", message)));
    };
    Some(Ok((id.to_owned(), port, path)))
}

/// `<port>-<id>.<preview_domain>[:port]`: the preview a Host header names, if any.
fn host_target(headers: &HeaderMap, preview_domain: &str) -> Option<(u32, String)> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let host = host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            name
        } else {
            host
        }
    });
    let label = host
        .to_ascii_lowercase()
        .strip_suffix(&format!(".{}", preview_domain.to_ascii_lowercase()))?
        .to_owned();
    let (port, id) = label.split_once('-')?;
    Some((port.parse().ok()?, id.to_owned()))
}

/// The outermost layer: a request whose Host names a preview goes to the proxy, whatever its
/// path; anything else goes on to the API.
pub(crate) async fn by_host(
    State(previews): State<Previews>,
    request: Request,
    next: Next,
) -> Response {
    let domain = &previews.plane.config().server.preview_domain;
    let Some((port, sandbox)) = (!domain.is_empty())
        .then(|| host_target(request.headers(), domain))
        .flatten()
    else {
        return next.run(request).await;
    };
    let port = match check_port(port) {
        Ok(port) => port,
        Err(err) => return ApiError(err).into_response(),
    };
    let upstream = request
        .uri()
        .path_and_query()
        .map_or("/".to_owned(), |p| p.as_str().to_owned());
    let target = Target {
        sandbox,
        port,
        upstream,
        cookie_path: "/".to_owned(),
    };
    proxy(&previews, target, request).await
}

/// The route handler for the path form (any method).
pub(crate) async fn by_path(State(previews): State<Previews>, request: Request) -> Response {
    let Some(parsed) = path_target(request.uri()) else {
        return ApiError(Error::not_found(
            svc_core::error::Resource::Route,
            request.uri().path(),
        ))
        .into_response();
    };
    let (sandbox, port, path) = match parsed.and_then(|(s, p, path)| Ok((s, check_port(p)?, path)))
    {
        Ok(parts) => parts,
        Err(err) => return ApiError(err).into_response(),
    };
    let upstream = match request.uri().query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let cookie_path = format!("/api/v1/sandboxes/{sandbox}/proxy/{port}/");
    let target = Target {
        sandbox,
        port,
        upstream,
        cookie_path,
    };
    proxy(&previews, target, request).await
}

/// The token a request carries: the query parameter first, then the cookie.
fn presented_token(uri: &Uri, headers: &HeaderMap) -> (Option<String>, bool) {
    let from_query = uri.query().and_then(|query| {
        query.split('&').find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            (name == TOKEN_PARAM).then(|| value.to_owned())
        })
    });
    if from_query.is_some() {
        return (from_query, true);
    }
    let from_cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == TOKEN_PARAM).then(|| value.to_owned())
        });
    (from_cookie, false)
}

/// `query` without the token parameter.
fn without_token(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.split('=').next() != Some(TOKEN_PARAM))
        .collect();
    if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Drops hop-by-hop headers (and, unless the exchange is an upgrade, `Connection`/`Upgrade`)
/// and svc's own credentials and token cookie, which are for svc, not the sandbox.
fn forwardable(headers: &mut HeaderMap, upgrade: bool, for_upstream: bool) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    if !upgrade {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
    if for_upstream {
        headers.remove(header::AUTHORIZATION);
        headers.remove(&svc_control::identity::API_KEY_HEADER);
        headers.remove(&svc_control::identity::ADMIN_API_KEY_HEADER);
        let cookies: Vec<String> = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .map(str::trim)
            .filter(|pair| !pair.is_empty() && !pair.starts_with(&format!("{TOKEN_PARAM}=")))
            .map(str::to_owned)
            .collect();
        headers.remove(header::COOKIE);
        if let Ok(value) = HeaderValue::from_str(&cookies.join("; ")) {
            if !cookies.is_empty() {
                headers.insert(header::COOKIE, value);
            }
        }
    }
}

async fn proxy(previews: &Previews, target: Target, mut request: Request) -> Response {
    let plane = &previews.plane;
    let (token, token_in_query) = presented_token(request.uri(), request.headers());
    let principal;
    let access = match &token {
        Some(token) => PreviewAccess::Token(token),
        None => match crate::auth::principal_of(plane, request.headers()).await {
            // The route table's action for the proxy, as the middleware checks it for others.
            Ok(caller) => match plane.authorize(&caller, crate::permissions::PREVIEW_ACTION) {
                Ok(()) => {
                    principal = caller;
                    PreviewAccess::Caller(&principal)
                }
                Err(err) => return ApiError(err).into_response(),
            },
            Err(err) => return ApiError(err).into_response(),
        },
    };
    // Named by the caller: a malformed ID is not found, once the caller is known.
    let sandbox = match SandboxId::named(&target.sandbox) {
        Ok(sandbox) => sandbox,
        Err(err) => return ApiError(err).into_response(),
    };
    if let Err(err) = plane.authorize_preview(access, &sandbox, target.port).await {
        return ApiError(err).into_response();
    }
    let upgrade = is_upgrade(request.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    forwardable(&mut parts.headers, upgrade, true);
    let path_and_query = without_token(&target.upstream);
    parts.uri = match upstream::uri(&sandbox, target.port, &path_and_query) {
        Some(uri) => uri,
        None => {
            return ApiError(Error::invalid("path", "is not a valid request target"))
                .into_response()
        }
    };
    if let Ok(host) = HeaderValue::from_str(&format!("localhost:{}", target.port)) {
        parts.headers.insert(header::HOST, host);
    }
    parts.version = axum::http::Version::HTTP_11;
    let upstream_request = Request::from_parts(parts, body);
    let mut response = match previews.upstream.request(upstream_request).await {
        Ok(response) => response,
        Err(err) => return bad_gateway(target.port, &err),
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_upgrade) = client_upgrade {
            let upstream_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                let (Ok(client), Ok(upstream)) = tokio::join!(client_upgrade, upstream_upgrade)
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(
                    &mut TokioIo::new(client),
                    &mut TokioIo::new(upstream),
                )
                .await;
            });
        }
    }
    let (mut parts, body) = response.into_parts();
    forwardable(
        &mut parts.headers,
        parts.status == StatusCode::SWITCHING_PROTOCOLS,
        false,
    );
    if let (Some(token), true) = (&token, token_in_query) {
        let cookie = format!(
            "{TOKEN_PARAM}={token}; Path={}; HttpOnly; SameSite=Lax",
            target.cookie_path
        );
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            parts.headers.append(header::SET_COOKIE, value);
        }
    }
    parts.extensions.insert(Proxied);
    Response::from_parts(parts, Body::new(body))
}

/// The answer to a failed upstream request: the service's own error when a new connection could
/// not be opened (409 for a sandbox that stopped meanwhile, 502 when nothing listens), else 502.
fn bad_gateway(port: u16, err: &hyper_util::client::legacy::Error) -> Response {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(failed) = cause.downcast_ref::<upstream::ConnectFailed>() {
            if let Some(err) = failed.take() {
                return ApiError(err).into_response();
            }
        }
        source = cause.source();
    }
    let cause = std::iter::successors(std::error::Error::source(err), |e| e.source())
        .last()
        .map_or_else(|| err.to_string(), ToString::to_string);
    ApiError(Error::BadGateway {
        message: format!("the server on port {port} in the sandbox did not answer: {cause}"),
    })
    .into_response()
}
