"""Error mapping: every code of decisions §4 has its own exception class."""

from __future__ import annotations

import json

import httpx
import pytest

from svc_sdk import (
    BadRequestError,
    MethodNotAllowedError,
    Sandbox,
    SvcClient,
    SvcConnectionError,
    SvcError,
    UnauthorizedError,
    errors,
)

# decisions.md §4 and docs/api.md "Errors": (status, code) -> class
EXPECTED = {
    (400, "bad_request"): errors.BadRequestError,
    (401, "unauthorized"): errors.UnauthorizedError,
    (403, "forbidden"): errors.ForbiddenError,
    (403, "policy_denied"): errors.PolicyDeniedError,
    (404, "not_found"): errors.NotFoundError,
    (405, "method_not_allowed"): errors.MethodNotAllowedError,
    (409, "conflict"): errors.ConflictError,
    (409, "lease_conflict"): errors.LeaseConflictError,
    (413, "payload_too_large"): errors.PayloadTooLargeError,
    (416, "range_not_satisfiable"): errors.RangeNotSatisfiableError,
    (429, "resource_limit"): errors.ResourceLimitError,
    (500, "provider_error"): errors.ProviderError,
    (500, "internal"): errors.InternalError,
    (502, "bad_gateway"): errors.BadGatewayError,
    (503, "unavailable"): errors.UnavailableError,
}


@pytest.mark.parametrize(("status", "code"), sorted(EXPECTED))
def test_each_code_maps_to_its_class(status: int, code: str) -> None:
    body = json.dumps({"code": code, "message": f"about {code}"}).encode()
    err = errors.error_from_response(status, body, request_id="rid", retry_after="3")
    assert type(err) is EXPECTED[(status, code)]
    assert isinstance(err, SvcError)
    assert (err.code, err.status, err.message, err.request_id) == (code, status, f"about {code}", "rid")
    assert err.retry_after == 3
    assert code in str(err)


def test_policy_and_lease_are_subclasses() -> None:
    assert issubclass(errors.PolicyDeniedError, errors.ForbiddenError)
    assert issubclass(errors.LeaseConflictError, errors.ConflictError)
    assert issubclass(errors.SvcTimeoutError, TimeoutError)


def test_unknown_code_and_non_json_fall_back() -> None:
    err = errors.error_from_response(418, b'{"code":"teapot","message":"short and stout"}')
    assert type(err) is SvcError and err.code == "teapot" and err.status == 418
    err = errors.error_from_response(503, b"<html>gateway</html>")
    assert type(err) is errors.UnavailableError and err.message == "<html>gateway</html>"


def test_live_errors(client: SvcClient, provider: str) -> None:
    with pytest.raises(BadRequestError) as err:
        Sandbox.create(client=client, provider="no-such-provider")
    assert err.value.code == "bad_request" and "mock" in err.value.message
    assert err.value.request_id
    with pytest.raises(BadRequestError):
        Sandbox.create(client=client, provider=provider, ttl="-5s")
    from svc_sdk import ResourceLimitError

    with pytest.raises(ResourceLimitError):
        Sandbox.create(client=client, provider=provider, ttl="1000h")


def test_method_not_allowed_is_typed(client: SvcClient) -> None:
    request = client._http.build_request("PATCH", client.url + "/api/v1/sandboxes")
    with pytest.raises(MethodNotAllowedError) as err:
        client._send(request)
    assert err.value.code == "method_not_allowed" and err.value.status == 405


def test_credentials_are_sent(server: object, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(401, json={"code": "unauthorized", "message": "bad key"})

    monkeypatch.setenv("SVC_API_KEY", "k-from-env")
    with SvcClient("http://svc.invalid", http_client=httpx.Client(transport=httpx.MockTransport(handler))) as c:
        with pytest.raises(UnauthorizedError):
            c.health()
    assert seen[0].headers["X-API-Key"] == "k-from-env"
    monkeypatch.delenv("SVC_API_KEY")
    monkeypatch.setenv("SVC_TOKEN", "tok")
    with SvcClient(
        "http://svc.invalid", user_id="u1", http_client=httpx.Client(transport=httpx.MockTransport(handler))
    ) as c:
        with pytest.raises(UnauthorizedError):
            c.health()
    assert seen[1].headers["Authorization"] == "Bearer tok" and seen[1].headers["X-User-ID"] == "u1"


def test_connection_refused_is_typed() -> None:
    with SvcClient("http://127.0.0.1:9") as c:
        with pytest.raises(SvcConnectionError) as err:
            c.health()
    assert err.value.code == "connection_error" and err.value.status == 0
