"""Response models (frozen dataclasses) and request bodies (TypedDicts).

Field names are exactly the server's JSON names. Every model is listed in :data:`MODEL_SCHEMAS`
with the OpenAPI schema it mirrors; ``tests/test_openapi.py`` checks both directions (every model
field is a schema property; every required schema property is a model field). Timestamps are RFC
3339 strings as the server sends them; durations are Go duration strings (``"1.5s"``).
Unknown fields a newer server adds are ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar

__all__ = [
    "SandboxInfo",
    "CommandResult",
    "CommandInfo",
    "OutputChunk",
    "FileInfo",
    "WriteInfo",
    "ArchiveInfo",
    "TemplateInfo",
    "TemplateBuild",
    "BuildAccepted",
    "BuildLogLine",
    "Quota",
    "QuotaUsage",
    "QuotaSummary",
    "Event",
    "ProviderInfo",
    "HealthInfo",
    "AdmissionDecision",
    "SandboxStats",
    "PreviewInfo",
    "Egress",
    "SpawnRequest",
    "ExecRequest",
    "ExtendRequest",
    "StdinBody",
    "SignalBody",
    "MoveFile",
    "ChmodFile",
    "TemplateSpec",
    "TemplateSpawnRequest",
    "BuildRequest",
    "QuotaRequest",
    "PreviewTokenRequest",
    "MODEL_SCHEMAS",
    "REQUEST_SCHEMAS",
]

_M = TypeVar("_M")


def _build(cls: type[_M], data: Any) -> _M:
    """Instantiates a model dataclass from a JSON object, ignoring fields it does not know."""
    if not isinstance(data, dict):
        from .errors import ProtocolError

        raise ProtocolError(f"expected a JSON object for {cls.__name__}, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox record (schema ``Sandbox``)."""

    id: str
    state: str
    provider: str
    image: str
    memory_mb: int
    vcpus: int
    created_at: str
    expires_at: str
    metadata: dict[str, str]
    preview_domain: str
    tenant_id: str
    owner_id: str
    worker_id: str | None = None
    template: str | None = None
    network: str | None = None
    state_reason: str | None = None
    state_message: str | None = None
    destroyed_at: str | None = None
    paused_at: str | None = None
    #: what the sandbox may connect to: ``{"mode": "all"|"none"|"allowlist", "allow": [...]}``
    egress: Egress | None = None

    @classmethod
    def from_dict(cls, data: Any) -> SandboxInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class CommandResult:
    """The result of a finished command (schema ``ExecResult``)."""

    exec_id: str
    exit_code: int
    stdout: str
    stderr: str
    duration: str
    timed_out: bool = False

    @classmethod
    def from_dict(cls, data: Any) -> CommandResult:
        return _build(cls, data)

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class CommandInfo:
    """An exec record (schema ``ExecRecord``); ``status`` is running|exited|timed_out|killed|failed."""

    exec_id: str
    sandbox_id: str
    command: str
    background: bool
    status: str
    started_at: str
    stdout_bytes: int
    stderr_bytes: int
    args: list[str] | None = None
    exit_code: int | None = None
    ended_at: str | None = None
    detail: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> CommandInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class OutputChunk:
    """One piece of command output: ``stream`` is ``stdout`` or ``stderr``.

    ``offset`` is the byte offset of the chunk in its stream (replayed output and background
    commands; ``None`` for plain streamed execs). ``lost`` is non-zero on a marker saying that
    many bytes were dropped by the server's buffer before the next chunk.
    """

    stream: Literal["stdout", "stderr"]
    data: str
    offset: int | None = None
    lost: int = 0


@dataclass(frozen=True)
class FileInfo:
    """One file or directory (schema ``FileInfo``); ``mode`` is 4-digit octal text."""

    name: str
    path: str
    size: int
    is_dir: bool
    mod_time: str
    mode: str

    @classmethod
    def from_dict(cls, data: Any) -> FileInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class WriteInfo:
    """Answer of a streamed upload (schema ``Written``)."""

    status: str
    size: int

    @classmethod
    def from_dict(cls, data: Any) -> WriteInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class ArchiveInfo:
    """Answer of a directory upload (schema ``Extracted``): entries written."""

    status: str
    entries: int

    @classmethod
    def from_dict(cls, data: Any) -> ArchiveInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class TemplateInfo:
    """A stored template (schema ``Template``)."""

    name: str
    image: str
    memory_mb: int
    vcpus: int
    ttl: str
    provider: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    warm_pool: int = 0
    warm_ready: int = 0
    egress: Egress | None = None
    #: the owning tenant; ``None`` for a global template (decisions §30)
    tenant_id: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> TemplateInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class TemplateBuild:
    """One build of a template (schema ``TemplateBuild``); ``status`` is
    running|succeeded|failed|cancelled. ``image`` is set once it succeeded, ``error`` (the
    failed step and its output) once it failed."""

    build_id: str
    template: str
    status: str
    started_at: str
    image: str | None = None
    ended_at: str | None = None
    error: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> TemplateBuild:
        return _build(cls, data)


@dataclass(frozen=True)
class BuildAccepted:
    """Answer of ``POST /templates/{name}/build`` (schema ``BuildAccepted``): the build runs."""

    build_id: str
    status: str

    @classmethod
    def from_dict(cls, data: Any) -> BuildAccepted:
        return _build(cls, data)


@dataclass(frozen=True)
class BuildLogLine:
    """One line of a build's log (schema ``BuildLogLine``), by ``type``:

    - ``step``: an instruction starts (``step``, 1-based, and ``instruction``, ``RUN make``);
    - ``output``: ``data``, output of the current step;
    - ``progress``: ``current_bytes`` of ``total_bytes`` pulled for a base image;
    - ``result``: the last line, ``status`` (succeeded|failed|cancelled) with ``image`` or
      ``error``.
    """

    type: str
    step: int | None = None
    instruction: str | None = None
    data: str | None = None
    current_bytes: int | None = None
    total_bytes: int | None = None
    status: str | None = None
    image: str | None = None
    error: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> BuildLogLine:
        return _build(cls, data)


@dataclass(frozen=True)
class Quota:
    """A stored owner quota (schema ``OwnerQuota``)."""

    owner_id: str
    max_sandboxes: int
    max_ttl: str
    max_exec_timeout: str
    created_at: str
    updated_at: str

    @classmethod
    def from_dict(cls, data: Any) -> Quota:
        return _build(cls, data)


@dataclass(frozen=True)
class QuotaUsage:
    """What an owner holds and the limits in force (schema ``OwnerUsage``)."""

    owner_id: str
    active_sandboxes: int
    max_sandboxes: int
    max_ttl: str
    max_exec_timeout: str
    quota_configured: bool

    @classmethod
    def from_dict(cls, data: Any) -> QuotaUsage:
        return _build(cls, data)


@dataclass(frozen=True)
class QuotaSummary:
    """Counts of stored quotas (schema ``QuotaSummary``)."""

    total: int
    with_max_sandboxes: int
    with_max_ttl: int
    with_max_exec_timeout: int

    @classmethod
    def from_dict(cls, data: Any) -> QuotaSummary:
        return _build(cls, data)


@dataclass(frozen=True)
class Event:
    """A lifecycle event (schema ``Event``); ``sandbox_id`` is ``""`` for non-sandbox events."""

    id: str
    type: str
    sandbox_id: str
    timestamp: str
    data: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Event:
        return _build(cls, data)


@dataclass(frozen=True)
class ProviderInfo:
    """A provider summary (schema ``ProviderSummary``)."""

    name: str
    healthy: bool
    default: bool
    latency_ms: int
    last_checked: str
    capabilities: list[str] = field(default_factory=list)
    error: str | None = None
    runtime_count: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> ProviderInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class HealthInfo:
    """``/health`` answer (schema ``HealthBody``)."""

    status: str
    version: str
    uptime: str

    @classmethod
    def from_dict(cls, data: Any) -> HealthInfo:
        return _build(cls, data)


@dataclass(frozen=True)
class AdmissionDecision:
    """Whether a spawn would be admitted now (schema ``Admission``)."""

    allowed: bool
    queueable: bool
    active_sandboxes: int
    max_sandboxes: int
    active_owner_sandboxes: int
    max_owner_sandboxes: int
    max_ttl: str
    reason: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> AdmissionDecision:
        return _build(cls, data)


@dataclass(frozen=True)
class SandboxStats:
    """Resource usage sampled now (schema ``SandboxStats``)."""

    cpu_percent: float
    memory_bytes: int
    memory_limit_bytes: int
    pids: int
    net_rx_bytes: int
    net_tx_bytes: int
    sampled_at: str

    @classmethod
    def from_dict(cls, data: Any) -> SandboxStats:
        return _build(cls, data)


@dataclass(frozen=True)
class PreviewInfo:
    """A preview of one port (schema ``PreviewToken``): open ``url`` with ``token`` as
    ``?svc_preview_token=`` (the server then keeps it as a cookie)."""

    url: str
    token: str
    expires_at: str

    @property
    def url_with_token(self) -> str:
        """``url`` with the token in its query: a link that works in a browser as it is."""
        from urllib.parse import quote

        sep = "&" if "?" in self.url else "?"
        return f"{self.url}{sep}svc_preview_token={quote(self.token, safe='')}"

    @classmethod
    def from_dict(cls, data: Any) -> PreviewInfo:
        return _build(cls, data)


# ---------------------------------------------------------------------------------------------
# Request bodies. ``total=False``: the SDK sends only what the caller gave.


class Egress(TypedDict, total=False):
    """``mode`` ``all`` (default), ``none`` (loopback only) or ``allowlist``; ``allow`` entries
    are ``host``, ``*.domain``, an IP or a CIDR, each with an optional ``:port``."""

    mode: Literal["all", "none", "allowlist"]
    allow: list[str]


class SpawnRequest(TypedDict, total=False):
    image: str
    provider: str
    memory_mb: int
    vcpus: int
    ttl: str
    metadata: dict[str, str]
    owner_id: str
    template: str
    network: str
    env: dict[str, str]
    tenant_id: str
    egress: Egress


class ExecRequest(TypedDict, total=False):
    command: str
    args: list[str]
    env: dict[str, str]
    workdir: str
    timeout: str
    stream: bool
    background: bool
    on_disconnect: str


class ExtendRequest(TypedDict):
    ttl: str


class StdinBody(TypedDict, total=False):
    data: str
    eof: bool


class SignalBody(TypedDict):
    signal: str


class MoveFile(TypedDict):
    old_path: str
    new_path: str


class ChmodFile(TypedDict):
    path: str
    mode: str


class TemplateSpec(TypedDict, total=False):
    name: str
    tenant_id: str
    image: str
    memory_mb: int
    vcpus: int
    ttl: str
    provider: str
    metadata: dict[str, str]
    warm_pool: int
    egress: Egress


class TemplateSpawnRequest(TypedDict, total=False):
    ttl: str
    provider: str
    env: dict[str, str]
    metadata: dict[str, str]


class BuildRequest(TypedDict, total=False):
    """``dockerfile`` is required; ``encoding`` (``utf8``, ``base64``) applies to every file."""

    dockerfile: str
    files: dict[str, str]
    encoding: str


class QuotaRequest(TypedDict, total=False):
    max_sandboxes: int
    max_ttl: str
    max_exec_timeout: str


class PreviewTokenRequest(TypedDict, total=False):
    port: int
    ttl: str


#: response model -> the OpenAPI schema it mirrors
MODEL_SCHEMAS: dict[type, str] = {
    SandboxInfo: "Sandbox",
    CommandResult: "ExecResult",
    CommandInfo: "ExecRecord",
    FileInfo: "FileInfo",
    WriteInfo: "Written",
    ArchiveInfo: "Extracted",
    TemplateInfo: "Template",
    TemplateBuild: "TemplateBuild",
    BuildAccepted: "BuildAccepted",
    BuildLogLine: "BuildLogLine",
    Quota: "OwnerQuota",
    QuotaUsage: "OwnerUsage",
    QuotaSummary: "QuotaSummary",
    Event: "Event",
    ProviderInfo: "ProviderSummary",
    HealthInfo: "HealthBody",
    AdmissionDecision: "Admission",
    SandboxStats: "SandboxStats",
    PreviewInfo: "PreviewToken",
}

#: request body TypedDict -> the OpenAPI schema it mirrors
REQUEST_SCHEMAS: dict[type, str] = {
    SpawnRequest: "SpawnRequest",
    ExecRequest: "ExecRequest",
    ExtendRequest: "ExtendRequest",
    StdinBody: "StdinBody",
    SignalBody: "SignalBody",
    MoveFile: "MoveFile",
    ChmodFile: "ChmodFile",
    TemplateSpec: "TemplateSpec",
    TemplateSpawnRequest: "TemplateSpawnRequest",
    BuildRequest: "BuildRequest",
    QuotaRequest: "QuotaRequest",
    PreviewTokenRequest: "PreviewTokenRequest",
    Egress: "Egress",
}
