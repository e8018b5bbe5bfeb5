"""Every HTTP route the SDK calls, in one table.

The OpenAPI drift test (``tests/test_openapi.py``) checks each entry (method, path template and
query parameters) against the server's own document, so a renamed route or parameter fails the
tests instead of failing users. Code in the SDK never spells a path anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

API_PREFIX = "/api/v1"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    query: tuple[str, ...] = ()
    #: the operation's request body schema (``#/components/schemas/<name>``), when it takes JSON
    body: str | None = None

    def format(self, **params: str) -> str:
        """The path under the API prefix with its ``{placeholders}`` filled (percent-encoded)."""
        from urllib.parse import quote

        return API_PREFIX + self.path.format(**{k: quote(v, safe="") for k, v in params.items()})


ROUTES: dict[str, Route] = {
    # system
    "health": Route("GET", "/health"),
    "providers_list": Route("GET", "/providers"),
    "provider_get": Route("GET", "/providers/{name}"),
    "events": Route("GET", "/events", query=("types", "sandbox_id", "last_event_id")),
    # sandboxes
    "sandbox_create": Route("POST", "/sandboxes", body="SpawnRequest"),
    "sandbox_admission": Route("POST", "/sandboxes/admission", body="SpawnRequest"),
    "sandbox_list": Route("GET", "/sandboxes", query=("state", "owner_id", "provider", "limit", "cursor")),
    "sandbox_prune": Route("DELETE", "/sandboxes"),
    "sandbox_get": Route("GET", "/sandboxes/{id}"),
    "sandbox_destroy": Route("DELETE", "/sandboxes/{id}"),
    "sandbox_extend": Route("POST", "/sandboxes/{id}/extend", body="ExtendRequest"),
    "sandbox_pause": Route("POST", "/sandboxes/{id}/pause"),
    "sandbox_resume": Route("POST", "/sandboxes/{id}/resume"),
    "sandbox_logs": Route("GET", "/sandboxes/{id}/logs", query=("lines",)),
    "sandbox_stats": Route("GET", "/sandboxes/{id}/stats"),
    "preview_token_create": Route("POST", "/sandboxes/{id}/preview-tokens", body="PreviewTokenRequest"),
    # exec
    "exec": Route("POST", "/sandboxes/{id}/exec", body="ExecRequest"),
    "exec_ws": Route("GET", "/sandboxes/{id}/exec/ws"),
    "exec_list": Route("GET", "/sandboxes/{id}/execs"),
    "exec_get": Route("GET", "/sandboxes/{id}/execs/{exec_id}"),
    "exec_kill": Route("DELETE", "/sandboxes/{id}/execs/{exec_id}"),
    "exec_output": Route(
        "GET",
        "/sandboxes/{id}/execs/{exec_id}/output",
        query=("stdout_offset", "stderr_offset", "follow"),
    ),
    "exec_stdin": Route("POST", "/sandboxes/{id}/execs/{exec_id}/stdin", body="StdinBody"),
    "exec_signal": Route("POST", "/sandboxes/{id}/execs/{exec_id}/signal", body="SignalBody"),
    # files
    "file_read": Route("GET", "/sandboxes/{id}/files", query=("path",)),
    "file_upload": Route("PUT", "/sandboxes/{id}/files", query=("path", "mode")),
    "file_delete": Route("DELETE", "/sandboxes/{id}/files", query=("path", "recursive")),
    "file_list": Route("GET", "/sandboxes/{id}/files/list", query=("path",)),
    "file_stat": Route("GET", "/sandboxes/{id}/files/stat", query=("path",)),
    "file_glob": Route("GET", "/sandboxes/{id}/files/glob", query=("pattern",)),
    "file_move": Route("POST", "/sandboxes/{id}/files/move", body="MoveFile"),
    "file_chmod": Route("POST", "/sandboxes/{id}/files/chmod", body="ChmodFile"),
    "archive_read": Route("GET", "/sandboxes/{id}/files/archive", query=("path",)),
    "archive_write": Route("PUT", "/sandboxes/{id}/files/archive", query=("path",)),
    # templates
    "template_create": Route("POST", "/templates", body="TemplateSpec"),
    "template_list": Route("GET", "/templates"),
    "template_get": Route("GET", "/templates/{name}"),
    "template_update": Route("PUT", "/templates/{name}", body="TemplateSpec"),
    "template_delete": Route("DELETE", "/templates/{name}"),
    "template_spawn": Route("POST", "/templates/{name}/spawn", body="TemplateSpawnRequest"),
    "template_build": Route("POST", "/templates/{name}/build", body="BuildRequest"),
    "template_build_list": Route("GET", "/templates/{name}/builds"),
    "template_build_get": Route("GET", "/templates/{name}/builds/{build_id}"),
    "template_build_cancel": Route("DELETE", "/templates/{name}/builds/{build_id}"),
    "template_build_logs": Route("GET", "/templates/{name}/builds/{build_id}/logs", query=("follow",)),
    # quotas
    "quota_list": Route("GET", "/quotas"),
    "quota_summary": Route("GET", "/quotas/summary"),
    "quota_get": Route("GET", "/quotas/{ownerID}"),
    "quota_set": Route("PUT", "/quotas/{ownerID}", body="QuotaRequest"),
    "quota_delete": Route("DELETE", "/quotas/{ownerID}"),
    "quota_usage": Route("GET", "/quotas/{ownerID}/usage"),
}
