"""Typed exceptions mirroring svc's error codes (decisions §4, docs/api.md "Errors").

Every error response of svc is ``{"code": "...", "message": "..."}``. :func:`error_from_response`
turns one into the subclass registered for its ``code`` (falling back on the HTTP status, then on
:class:`SvcError` itself), so callers can ``except NotFoundError`` or inspect ``err.code``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from .models import TemplateBuild

__all__ = [
    "SvcError",
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "PolicyDeniedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ConflictError",
    "LeaseConflictError",
    "PayloadTooLargeError",
    "RangeNotSatisfiableError",
    "ResourceLimitError",
    "ProviderError",
    "InternalError",
    "BadGatewayError",
    "UnavailableError",
    "SvcConnectionError",
    "SvcTimeoutError",
    "ProtocolError",
    "BuildError",
    "ERROR_CLASSES",
    "error_from_response",
]


class SvcError(Exception):
    """Base class of every error the SDK raises.

    ``code`` is the server's machine-readable code (``not_found``, ``conflict``, ...), ``status``
    the HTTP status (``0`` for client-side errors), ``message`` the server's explanation.
    ``request_id`` is the server's ``X-Request-ID`` when known.
    """

    code: str
    status: int
    message: str
    request_id: str | None
    retry_after: int | None

    default_code: ClassVar[str] = "error"
    default_status: ClassVar[int] = 0

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else self.default_code
        self.status = status if status is not None else self.default_status
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        if self.status:
            return f"{self.status} {self.code}: {self.message}"
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"


class BadRequestError(SvcError):
    """400 ``bad_request``: invalid field, path, query or JSON; unsupported operation."""

    default_code = "bad_request"
    default_status = 400


class UnauthorizedError(SvcError):
    """401 ``unauthorized``: authentication is on and no valid API key or token was sent."""

    default_code = "unauthorized"
    default_status = 401


class ForbiddenError(SvcError):
    """403 ``forbidden``: authenticated, but the role does not allow the route."""

    default_code = "forbidden"
    default_status = 403


class PolicyDeniedError(ForbiddenError):
    """403 ``policy_denied``: a tenant policy denies the spawn."""

    default_code = "policy_denied"
    default_status = 403


class NotFoundError(SvcError):
    """404 ``not_found``: sandbox, exec, file, template, provider, ... does not exist."""

    default_code = "not_found"
    default_status = 404


class MethodNotAllowedError(SvcError):
    """405 ``method_not_allowed``."""

    default_code = "method_not_allowed"
    default_status = 405


class ConflictError(SvcError):
    """409 ``conflict``: name exists; sandbox not running (destroyed, creating); exec ended."""

    default_code = "conflict"
    default_status = 409


class LeaseConflictError(ConflictError):
    """409 ``lease_conflict``: another worker holds the sandbox lease."""

    default_code = "lease_conflict"
    default_status = 409


class PayloadTooLargeError(SvcError):
    """413 ``payload_too_large``: body over ``server.max_body_bytes`` / ``max_upload_bytes``."""

    default_code = "payload_too_large"
    default_status = 413


class RangeNotSatisfiableError(SvcError):
    """416 ``range_not_satisfiable``: no byte of the file lies in the requested range."""

    default_code = "range_not_satisfiable"
    default_status = 416


class ResourceLimitError(SvcError):
    """429 ``resource_limit``: quota, capacity, TTL, exec timeout or API rate limit.

    ``retry_after`` carries the ``Retry-After`` header (seconds) when the rate limit refused.
    """

    default_code = "resource_limit"
    default_status = 429


class ProviderError(SvcError):
    """500 ``provider_error``: the provider failed; its reason is in the message."""

    default_code = "provider_error"
    default_status = 500


class InternalError(SvcError):
    """500 ``internal``: anything else (logged server-side with the request ID)."""

    default_code = "internal"
    default_status = 500


class BadGatewayError(SvcError):
    """502 ``bad_gateway``: a preview port with nothing listening."""

    default_code = "bad_gateway"
    default_status = 502


class UnavailableError(SvcError):
    """503 ``unavailable``: provider unhealthy, pool full, store unavailable."""

    default_code = "unavailable"
    default_status = 503


class SvcConnectionError(SvcError):
    """Client side: the server could not be reached or the connection broke."""

    default_code = "connection_error"


class SvcTimeoutError(SvcError, TimeoutError):
    """Client side: a wait with a deadline (command, PTY, events) ran out."""

    default_code = "timeout"


class ProtocolError(SvcError):
    """Client side: the server sent something the SDK does not understand."""

    default_code = "protocol_error"


class BuildError(SvcError):
    """Client side: a template build ended ``failed`` (code ``build_failed``) or ``cancelled``
    (``build_cancelled``). ``build`` is its record; the message carries the server's ``error``
    (the failed step and its output)."""

    default_code = "build_failed"

    def __init__(self, build: TemplateBuild) -> None:
        super().__init__(
            f"build {build.build_id} of template {build.template!r} {build.status}: "
            f"{build.error or 'no reason given'}",
            code=f"build_{build.status}",
        )
        self.build = build


ERROR_CLASSES: dict[str, type[SvcError]] = {
    cls.default_code: cls
    for cls in (
        BadRequestError,
        UnauthorizedError,
        ForbiddenError,
        PolicyDeniedError,
        NotFoundError,
        MethodNotAllowedError,
        ConflictError,
        LeaseConflictError,
        PayloadTooLargeError,
        RangeNotSatisfiableError,
        ResourceLimitError,
        ProviderError,
        InternalError,
        BadGatewayError,
        UnavailableError,
    )
}

_BY_STATUS: dict[int, type[SvcError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    413: PayloadTooLargeError,
    416: RangeNotSatisfiableError,
    429: ResourceLimitError,
    500: InternalError,
    502: BadGatewayError,
    503: UnavailableError,
}


def error_from_response(
    status: int,
    body: bytes,
    *,
    request_id: str | None = None,
    retry_after: str | None = None,
) -> SvcError:
    """Builds the typed exception for an error response (status and raw body)."""
    code: str | None = None
    message = ""
    try:
        parsed = json.loads(body.decode("utf-8", "replace")) if body else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        raw_code = parsed.get("code")
        if isinstance(raw_code, str):
            code = raw_code
        raw_message = parsed.get("message")
        if isinstance(raw_message, str):
            message = raw_message
    if not message:
        message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    cls = ERROR_CLASSES.get(code or "") or _BY_STATUS.get(status) or SvcError
    retry: int | None = None
    if retry_after is not None:
        try:
            retry = int(retry_after)
        except ValueError:
            retry = None
    return cls(message, code=code or cls.default_code, status=status, request_id=request_id, retry_after=retry)


def error_from_code(code: str, message: str) -> SvcError:
    """The typed exception for an error a WebSocket message names by its ``code``."""
    cls = ERROR_CLASSES.get(code, SvcError)
    status = next((s for s, known in _BY_STATUS.items() if issubclass(cls, known)), 0)
    return cls(message, code=code, status=status)
