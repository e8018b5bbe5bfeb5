"""OpenAPI drift check: every route, query parameter, request body and response model the SDK
uses must exist in the server's own document (``$SVC_BIN openapi``), so a renamed route or field
fails here rather than in users' hands."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from typing import Any, get_type_hints

import pytest

from svc_sdk._routes import API_PREFIX, ROUTES
from svc_sdk.models import MODEL_SCHEMAS, REQUEST_SCHEMAS

from .conftest import svc_bin

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def openapi() -> Doc:
    proc = subprocess.run([svc_bin(), "openapi"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc: Doc = json.loads(proc.stdout)
    return doc


def _schema(doc: Doc, name: str) -> Doc:
    schemas = doc.get("components", {}).get("schemas", {})
    if name not in schemas:
        raise AssertionError(f"schema {name} is not in the document")
    schema: Doc = schemas[name]
    variants = schema.get("oneOf", [])
    if "properties" not in schema and variants and all("properties" in v for v in variants):
        # a tagged union (``BuildLogLine``): one model holds every variant's properties; a
        # property is required when every variant requires it
        return {
            "properties": {k: p for v in variants for k, p in v["properties"].items()},
            "required": sorted(set.intersection(*(set(v.get("required", [])) for v in variants))),
        }
    return schema


def _request_schema_name(op: Doc) -> str | None:
    content = op.get("requestBody", {}).get("content", {})
    schema = content.get("application/json", {}).get("schema", {})
    refs = [schema.get("$ref")] + [alt.get("$ref") for alt in schema.get("oneOf", [])]
    ref = next((r for r in refs if r), None)  # an optional body is oneOf [null, $ref]
    return str(ref).rsplit("/", 1)[-1] if ref else None


def drift(doc: Doc) -> list[str]:
    """Every mismatch between the SDK and ``doc`` (empty when they agree)."""
    problems: list[str] = []
    paths = doc.get("paths", {})
    for name, route in ROUTES.items():
        full = API_PREFIX + route.path
        op = paths.get(full, {}).get(route.method.lower())
        if op is None:
            problems.append(f"route {name}: {route.method} {full} is not in the document")
            continue
        params = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
        for q in route.query:
            if q not in params:
                problems.append(f"route {name}: query parameter {q!r} is not in {route.method} {full}")
        placeholders = {p["name"] for p in op.get("parameters", []) if p.get("in") == "path"}
        mine = {seg[1:-1] for seg in route.path.split("/") if seg.startswith("{")}
        if mine != placeholders:
            problems.append(f"route {name}: path parameters {sorted(mine)} != {sorted(placeholders)}")
        if route.body is not None and _request_schema_name(op) != route.body:
            problems.append(f"route {name}: request body is {_request_schema_name(op)}, SDK sends {route.body}")
    for model, schema_name in MODEL_SCHEMAS.items():
        try:
            schema = _schema(doc, schema_name)
        except AssertionError as exc:
            problems.append(str(exc))
            continue
        props = set(schema.get("properties", {}))
        required = set(schema.get("required", []))
        fields = dataclasses.fields(model)
        names = {f.name for f in fields}
        model_required = {
            f.name for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        for f in sorted(names - props):
            problems.append(f"model {model.__name__}: field {f!r} is not in schema {schema_name}")
        for f in sorted(required - names):
            problems.append(f"model {model.__name__}: required field {f!r} of {schema_name} is missing")
        for f in sorted(model_required - required):
            problems.append(f"model {model.__name__}: field {f!r} is required by the SDK, optional in {schema_name}")
    for body, schema_name in REQUEST_SCHEMAS.items():
        try:
            schema = _schema(doc, schema_name)
        except AssertionError as exc:
            problems.append(str(exc))
            continue
        props = set(schema.get("properties", {}))
        for f in sorted(set(get_type_hints(body)) - props):
            problems.append(f"request {body.__name__}: field {f!r} is not in schema {schema_name}")
        for f in sorted(set(schema.get("required", [])) - set(get_type_hints(body))):
            problems.append(f"request {body.__name__}: required field {f!r} of {schema_name} is missing")
    return problems


def test_sdk_matches_the_servers_openapi(openapi: Doc) -> None:
    assert drift(openapi) == []


def test_every_route_is_used_by_the_sdk() -> None:
    import inspect

    from svc_sdk._async import client as async_client

    source = inspect.getsource(async_client)
    unused = [name for name in ROUTES if f'"{name}"' not in source]
    assert unused == []


def test_drift_is_detected(openapi: Doc) -> None:
    renamed_route = copy.deepcopy(openapi)
    paths = renamed_route["paths"]
    paths["/api/v1/sandboxes/{id}/commands"] = paths.pop("/api/v1/sandboxes/{id}/exec")
    assert any("POST /api/v1/sandboxes/{id}/exec" in p for p in drift(renamed_route))

    renamed_field = copy.deepcopy(openapi)
    props = renamed_field["components"]["schemas"]["Sandbox"]["properties"]
    props["sandbox_state"] = props.pop("state")
    renamed_field["components"]["schemas"]["Sandbox"]["required"].remove("state")
    assert any("'state'" in p and "Sandbox" in p for p in drift(renamed_field))

    new_required = copy.deepcopy(openapi)
    schema = new_required["components"]["schemas"]["ExecResult"]
    schema["properties"]["signal"] = {"type": "string"}
    schema["required"].append("signal")
    assert any("'signal'" in p for p in drift(new_required))

    renamed_query = copy.deepcopy(openapi)
    op = renamed_query["paths"]["/api/v1/sandboxes/{id}/execs/{exec_id}/output"]["get"]
    for p in op["parameters"]:
        if p["name"] == "stdout_offset":
            p["name"] = "out_offset"
    assert any("stdout_offset" in p for p in drift(renamed_query))

    renamed_body_field = copy.deepcopy(openapi)
    props = renamed_body_field["components"]["schemas"]["ExecRequest"]["properties"]
    props["cwd"] = props.pop("workdir")
    assert any("'workdir'" in p for p in drift(renamed_body_field))
