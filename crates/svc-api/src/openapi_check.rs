//! A test seam: every JSON response the API sends is checked against the OpenAPI document the
//! router serves, when a test asks for it ([`check_responses`]) before starting servers. A
//! response that does not match becomes a 500 naming the difference, so the test that received
//! it fails whatever it asserted. Production never turns it on: the router then has no such
//! layer.

use std::sync::OnceLock;

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

static ON: OnceLock<()> = OnceLock::new();

/// The header on every JSON answer found to match the document.
pub const CHECKED_HEADER: &str = "x-openapi-checked";

/// Checks every JSON response of the routers built from now on (tests only).
pub fn check_responses() {
    let _ = ON.set(());
}

pub(crate) fn enabled() -> bool {
    ON.get().is_some()
}

fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        serde_json::from_str(&crate::openapi_document(crate::OpenApiFormat::Json))
            .unwrap_or(Value::Null)
    })
}

/// The middleware (outside authentication, which puts the matched route into the response).
pub(crate) async fn check(request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_ascii_lowercase();
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    let proxied = response
        .extensions()
        .get::<crate::routes::preview::Proxied>()
        .is_some();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let Some(template) = matched.or_else(|| response.extensions().get::<MatchedPath>().cloned())
    else {
        return response;
    };
    // What the sandbox answered through the proxy, and the document itself, are not API answers.
    if !json || proxied || template.as_str().starts_with("/api/v1/openapi.") {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let checked = serde_json::from_slice::<Value>(&bytes)
        .map_err(|e| format!("not JSON: {e}"))
        .and_then(|value| conforms(&method, template.as_str(), parts.status, &value));
    match checked {
        Ok(()) => {
            let mut response = Response::from_parts(parts, Body::from(bytes));
            // Lets a test suite prove its answers are checked (the harness's own test).
            response
                .headers_mut()
                .insert(CHECKED_HEADER, HeaderValue::from_static("1"));
            response
        }
        Err(problem) => {
            let message = format!(
                "the {} answer of {} {} does not match the OpenAPI document: {problem}",
                parts.status.as_u16(),
                method.to_ascii_uppercase(),
                template.as_str()
            );
            let mut response = (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(serde_json::json!({"code": "internal", "message": message})),
            )
                .into_response();
            response
                .headers_mut()
                .insert("x-openapi-mismatch", HeaderValue::from_static("1"));
            response
        }
    }
}

/// Whether `body`, answered with `status` by `method template`, is what the document says: the
/// schema the operation declares for the status, else, for an error, `ErrorBody`.
pub(crate) fn conforms(
    method: &str,
    template: &str,
    status: StatusCode,
    body: &Value,
) -> Result<(), String> {
    let doc = document();
    let operation = &doc["paths"][template][method];
    let declared = &operation["responses"][status.as_str()];
    let schema = &declared["content"]["application/json"]["schema"];
    if !schema.is_null() {
        return matches(doc, schema, body, "$");
    }
    // svc's own errors, on any route (the preview proxy's included), are the one error body.
    if status.is_client_error() || status.is_server_error() {
        let error = serde_json::json!({"$ref": "#/components/schemas/ErrorBody"});
        return matches(doc, &error, body, "$");
    }
    if operation.is_null() {
        return Err(format!("{method} {template} is not in the document"));
    }
    if declared.is_null() {
        return Err(format!("status {} is not documented", status.as_u16()));
    }
    Err("the document declares no JSON body".into())
}

/// Whether `value` matches component schema `name` of the OpenAPI document (for tests that
/// check one object of an answer).
pub fn conforms_to(name: &str, value: &Value) -> Result<(), String> {
    let doc = document();
    let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
    matches(doc, &schema, value, name)
}

/// Checks `value` against `schema`.
fn matches(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolved(doc, schema)?;
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let mut reasons = Vec::new();
            for option in options {
                match matches(doc, option, value, at) {
                    Ok(()) => return Ok(()),
                    Err(reason) => reasons.push(reason),
                }
            }
            return Err(format!(
                "{at}: matches none of {key}: {}",
                reasons.join("; ")
            ));
        }
    }
    // allOf: one object made of its parts (utoipa's `#[serde(flatten)]`).
    let parts: Vec<&Value> = match schema.get("allOf").and_then(Value::as_array) {
        Some(all) => all
            .iter()
            .map(|part| resolved(doc, part))
            .collect::<Result<_, _>>()?,
        None => vec![schema],
    };
    for part in &parts {
        if let Some(types) = types(part) {
            let actual = type_of(value);
            let ok = types.contains(&actual) || (actual == "integer" && types.contains(&"number"));
            if !ok {
                return Err(format!("{at}: {actual} where the document says {types:?}"));
            }
        }
        if let Some(allowed) = part.get("enum").and_then(Value::as_array) {
            if !value.is_null() && !allowed.contains(value) {
                return Err(format!("{at}: {value} is not one of {allowed:?}"));
            }
        }
        if parts.len() > 1 && (part.get("oneOf").is_some() || part.get("anyOf").is_some()) {
            matches(doc, part, value, at)?;
        }
    }
    match value {
        Value::Object(object) => {
            let mut properties = serde_json::Map::new();
            let mut open = false;
            let mut described = false;
            for part in &parts {
                for required in part
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = required.as_str().unwrap_or_default();
                    if !object.contains_key(name) {
                        return Err(format!("{at}: required {name} is missing"));
                    }
                }
                if let Some(declared) = part.get("properties").and_then(Value::as_object) {
                    described = true;
                    properties.extend(declared.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                match part.get("additionalProperties") {
                    Some(Value::Bool(false)) | None => {}
                    Some(Value::Object(extra)) if extra.is_empty() => open = true,
                    Some(Value::Object(_)) => {
                        described = true;
                    }
                    Some(_) => open = true,
                }
            }
            let extra = parts
                .iter()
                .find_map(|part| part.get("additionalProperties").filter(|e| e.is_object()));
            for (key, field) in object {
                let path = format!("{at}.{key}");
                match (properties.get(key), extra) {
                    (Some(declared), _) => matches(doc, declared, field, &path)?,
                    (None, Some(extra)) => matches(doc, extra, field, &path)?,
                    (None, None) if open || !described => {}
                    (None, None) => return Err(format!("{path} is not in the document")),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = parts.iter().find_map(|part| part.get("items")) {
                for (i, element) in items.iter().enumerate() {
                    matches(doc, item, element, &format!("{at}[{i}]"))?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// `schema`, or what its `$ref` names.
fn resolved<'a>(doc: &'a Value, schema: &'a Value) -> Result<&'a Value, String> {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => resolved(doc, resolve(doc, reference)?),
        None => Ok(schema),
    }
}

fn resolve<'a>(doc: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let pointer = reference
        .strip_prefix('#')
        .ok_or_else(|| format!("{reference} is not a local reference"))?;
    doc.pointer(pointer)
        .ok_or_else(|| format!("{reference} is not in the document"))
}

fn types(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_unlike_the_document_are_named() {
        let route = "/api/v1/sandboxes/{id}";
        let error = json!({"code": "not_found", "message": "sandbox x not found"});
        assert_eq!(
            conforms("get", route, StatusCode::NOT_FOUND, &error),
            Ok(())
        );
        let extra = json!({"code": "not_found", "message": "m", "hint": "x"});
        let problem = conforms("get", route, StatusCode::NOT_FOUND, &extra).unwrap_err();
        assert!(
            problem.contains("$.hint is not in the document"),
            "{problem}"
        );
        let missing = json!({"code": "not_found"});
        let problem = conforms("get", route, StatusCode::NOT_FOUND, &missing).unwrap_err();
        assert!(problem.contains("required message"), "{problem}");
        let wrong = json!({"code": 404, "message": "m"});
        assert!(conforms("get", route, StatusCode::NOT_FOUND, &wrong).is_err());
        let problem = conforms("get", "/api/v1/nowhere", StatusCode::OK, &json!({})).unwrap_err();
        assert!(problem.contains("not in the document"), "{problem}");
        let problem = conforms("get", route, StatusCode::OK, &json!({"id": 7})).unwrap_err();
        assert!(problem.contains("required"), "{problem}");
    }
}
