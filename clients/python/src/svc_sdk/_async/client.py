"""The asyncio client. ``svc_sdk/_sync/client.py`` is generated from this file by
``scripts/unasync.py`` (edit this one, then run the script; a test checks they agree)."""

from __future__ import annotations

import base64
import builtins
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import IO, Any, Literal, Union, overload

import httpx
import websockets.exceptions

from .. import _async_compat as compat
from .._common import (
    Duration,
    as_bytes,
    ExitLine,
    SSEParser,
    StreamCursor,
    auth_headers,
    duration_seconds,
    empty_tar,
    extract_tar,
    format_duration,
    json_line,
    octal_mode,
    parse_output_line,
    resolve_url,
    tar_directory,
    to_text,
    ws_url,
)
from .._routes import ROUTES
from ..errors import (
    BuildError,
    ConflictError,
    NotFoundError,
    ProtocolError,
    SvcConnectionError,
    SvcError,
    SvcTimeoutError,
    error_from_code,
    error_from_response,
)
from ..models import (
    AdmissionDecision,
    ArchiveInfo,
    BuildAccepted,
    BuildLogLine,
    BuildRequest,
    ChmodFile,
    CommandInfo,
    CommandResult,
    Egress,
    Event,
    ExecRequest,
    FileInfo,
    HealthInfo,
    MoveFile,
    OutputChunk,
    PreviewInfo,
    PreviewTokenRequest,
    ProviderInfo,
    Quota,
    QuotaRequest,
    QuotaSummary,
    QuotaUsage,
    SandboxInfo,
    SandboxStats,
    SpawnRequest,
    TemplateBuild,
    TemplateInfo,
    TemplateSpawnRequest,
    TemplateSpec,
    WriteInfo,
)

OutputCallback = Callable[[str], object]
BuildLogCallback = Callable[[BuildLogLine], object]

_DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
#: slack added to a command's own deadline before the HTTP read gives up
_EXEC_SLACK = 30.0
_SPOOL = 16 * 1024 * 1024
#: times a build's log stream may break before :meth:`AsyncTemplates.build` gives up
_BUILD_RECONNECTS = 5


def _stream_timeout(read: float | None) -> httpx.Timeout:
    return httpx.Timeout(connect=10.0, read=read, write=60.0, pool=30.0)


def _spawn_body(
    *,
    template: str | None,
    image: str | None,
    provider: str | None,
    memory_mb: int | None,
    vcpus: int | None,
    ttl: Duration | None,
    metadata: dict[str, str] | None,
    env: dict[str, str] | None,
    owner_id: str | None,
    network: str | None,
    egress: EgressArg | None = None,
) -> SpawnRequest:
    body: SpawnRequest = {}
    if template is not None:
        body["template"] = template
    if image is not None:
        body["image"] = image
    if provider is not None:
        body["provider"] = provider
    if memory_mb is not None:
        body["memory_mb"] = memory_mb
    if vcpus is not None:
        body["vcpus"] = vcpus
    if ttl is not None:
        body["ttl"] = format_duration(ttl)
    if metadata is not None:
        body["metadata"] = metadata
    if env is not None:
        body["env"] = env
    if owner_id is not None:
        body["owner_id"] = owner_id
    if network is not None:
        body["network"] = network
    if egress is not None:
        body["egress"] = _egress(egress)
    return body


#: ``egress`` as the SDK takes it: the server's object, a bare mode (``"none"``), or a list of
#: allowed destinations (an allowlist)
EgressArg = Union[Egress, str, Sequence[str]]


def _egress(egress: EgressArg) -> Egress:
    if isinstance(egress, str):
        return {"mode": egress}  # type: ignore[typeddict-item]
    if isinstance(egress, dict):
        return egress
    return {"mode": "allowlist", "allow": list(egress)}


class AsyncSvcClient:
    """A connection to one svc server: sandboxes by ID, templates, quotas, events.

    ``url`` defaults to ``$SVC_URL`` (else ``http://127.0.0.1:7423``), ``api_key`` to
    ``$SVC_API_KEY`` (sent as ``X-API-Key``), ``token`` to ``$SVC_TOKEN`` (a bearer token).
    ``user_id`` is sent as ``X-User-ID`` (the owner for quotas). Use it as a context manager
    or call :meth:`close`.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        token: str | None = None,
        user_id: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.headers = auth_headers(api_key, token, user_id)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            timeout=timeout if timeout is not None else _DEFAULT_TIMEOUT
        )
        self.templates = AsyncTemplates(self)
        self.quotas = AsyncQuotas(self)

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncSvcClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- plumbing ---------------------------------------------------------------------------

    def _build(
        self,
        route: str,
        path_params: dict[str, str] | None = None,
        *,
        query: dict[str, Any] | None = None,
        json_body: Any = None,
        content: Any = None,
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Request:
        r = ROUTES[route]
        params: dict[str, str] = {}
        for key, value in (query or {}).items():
            if key not in r.query:
                raise ValueError(f"route {route} takes no query parameter {key!r}")
            if value is None:
                continue
            params[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        hdrs = dict(self.headers)
        if headers:
            hdrs.update(headers)
        kwargs: dict[str, Any] = {"params": params, "headers": hdrs}
        if json_body is not None:
            kwargs["json"] = json_body
        if content is not None:
            kwargs["content"] = content
        if timeout is not None:
            kwargs["timeout"] = timeout
        return self._http.build_request(r.method, self.url + r.format(**(path_params or {})), **kwargs)

    async def _send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        try:
            response = await self._http.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            raise SvcTimeoutError(f"{request.method} {request.url.path}: {exc}") from exc
        except httpx.TransportError as exc:
            raise SvcConnectionError(f"{request.method} {request.url} failed: {exc}") from exc
        if response.status_code >= 400:
            try:
                body = await response.aread()
            finally:
                await response.aclose()
            raise error_from_response(
                response.status_code,
                body,
                request_id=response.headers.get("x-request-id"),
                retry_after=response.headers.get("retry-after"),
            )
        return response

    async def _call(
        self,
        route: str,
        path_params: dict[str, str] | None = None,
        *,
        query: dict[str, Any] | None = None,
        json_body: Any = None,
        content: Any = None,
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> Any:
        """One request; returns the decoded JSON body (or raises the typed error)."""
        request = self._build(
            route, path_params, query=query, json_body=json_body, content=content, headers=headers,
            timeout=timeout,
        )
        response = await self._send(request)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ProtocolError(f"{route}: response is not JSON: {response.text[:200]!r}") from exc

    async def _list_all(
        self,
        route: str,
        path_params: dict[str, str] | None = None,
        *,
        query: dict[str, Any] | None = None,
    ) -> builtins.list[Any]:
        """Every item of a list route: each page, following ``X-Next-Cursor`` until an answer
        has none."""
        query = dict(query or {})
        items: builtins.list[Any] = []
        while True:
            response = await self._send(self._build(route, path_params, query=query))
            items.extend(response.json())
            cursor = response.headers.get("x-next-cursor")
            if not cursor:
                return items
            query["cursor"] = cursor

    async def _open(
        self,
        route: str,
        path_params: dict[str, str] | None = None,
        *,
        query: dict[str, Any] | None = None,
        json_body: Any = None,
        content: Any = None,
        headers: dict[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """Sends a request and returns the open (streaming) response; the caller closes it."""
        request = self._build(
            route, path_params, query=query, json_body=json_body, content=content, headers=headers,
            timeout=timeout,
        )
        return await self._send(request, stream=True)

    # --- system -----------------------------------------------------------------------------

    async def health(self) -> HealthInfo:
        return HealthInfo.from_dict(await self._call("health"))

    async def providers(self) -> builtins.list[ProviderInfo]:
        return [ProviderInfo.from_dict(p) for p in await self._call("providers_list")]

    async def provider(self, name: str) -> dict[str, Any]:
        """A provider's detail (``name``, ``healthy``, ``default``, ``sandbox_count``, ``health``,
        ``config``) as the server sends it; :class:`NotFoundError` when unknown."""
        data = await self._call("provider_get", {"name": name})
        if not isinstance(data, dict):
            raise ProtocolError("provider detail is not an object")
        return data

    # --- sandboxes --------------------------------------------------------------------------

    async def create_sandbox(
        self,
        template: str | None = None,
        *,
        image: str | None = None,
        provider: str | None = None,
        memory_mb: int | None = None,
        vcpus: int | None = None,
        ttl: Duration | None = None,
        metadata: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        owner_id: str | None = None,
        network: str | None = None,
        egress: EgressArg | None = None,
        timeout: float | None = None,
    ) -> SandboxInfo:
        """``POST /sandboxes``; ``timeout`` bounds the wait (image pulls can be slow).

        ``egress`` limits what the sandbox may connect to: ``"none"``, a list of allowed
        destinations (``["pypi.org:443", "*.github.com", "10.0.0.0/8"]``) or the server's
        object ``{"mode": ..., "allow": [...]}``."""
        body = _spawn_body(
            template=template, image=image, provider=provider, memory_mb=memory_mb, vcpus=vcpus,
            ttl=ttl, metadata=metadata, env=env, owner_id=owner_id, network=network, egress=egress,
        )
        data = await self._call("sandbox_create", json_body=body, timeout=_stream_timeout(timeout))
        return SandboxInfo.from_dict(data)

    async def admission(
        self,
        *,
        image: str | None = None,
        provider: str | None = None,
        ttl: Duration | None = None,
        owner_id: str | None = None,
        template: str | None = None,
        egress: EgressArg | None = None,
    ) -> AdmissionDecision:
        """``POST /sandboxes/admission``: would a spawn be admitted now? Creates nothing."""
        body = _spawn_body(
            template=template, image=image, provider=provider, memory_mb=None, vcpus=None, ttl=ttl,
            metadata=None, env=None, owner_id=owner_id, network=None, egress=egress,
        )
        return AdmissionDecision.from_dict(await self._call("sandbox_admission", json_body=body))

    async def get_sandbox(self, sandbox_id: str) -> SandboxInfo:
        return SandboxInfo.from_dict(await self._call("sandbox_get", {"id": sandbox_id}))

    async def list_sandboxes(
        self,
        *,
        state: str | None = None,
        owner_id: str | None = None,
        provider: str | None = None,
    ) -> builtins.list[SandboxInfo]:
        """Newest first; ``state`` ``running``/``destroyed``/``all``/..., default not destroyed.
        Every page: the server answers at most 1000 at a time and names the next page in
        ``X-Next-Cursor``, which this follows."""
        query: dict[str, Any] = {"state": state, "owner_id": owner_id, "provider": provider}
        return [SandboxInfo.from_dict(s) for s in await self._list_all("sandbox_list", query=query)]

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        """Idempotent: destroying a destroyed sandbox succeeds again."""
        await self._call("sandbox_destroy", {"id": sandbox_id})

    async def extend_sandbox(self, sandbox_id: str, ttl: Duration) -> SandboxInfo:
        """``expires_at`` becomes now + ``ttl``."""
        data = await self._call(
            "sandbox_extend", {"id": sandbox_id}, json_body={"ttl": format_duration(ttl)}
        )
        return SandboxInfo.from_dict(data)

    async def pause_sandbox(self, sandbox_id: str) -> SandboxInfo:
        """Freezes the sandbox (idempotent); it does not expire while paused."""
        return SandboxInfo.from_dict(await self._call("sandbox_pause", {"id": sandbox_id}))

    async def resume_sandbox(self, sandbox_id: str) -> SandboxInfo:
        """Thaws a paused sandbox (idempotent); ``expires_at`` moves by the time paused."""
        return SandboxInfo.from_dict(await self._call("sandbox_resume", {"id": sandbox_id}))

    async def preview(self, sandbox_id: str, port: int, *, ttl: Duration | None = None) -> PreviewInfo:
        """``POST /sandboxes/{id}/preview-tokens``: a URL and token for ``port`` inside the
        sandbox, valid for ``ttl`` (default: the server's) and only for that sandbox and port."""
        body: PreviewTokenRequest = {"port": port}
        if ttl is not None:
            body["ttl"] = format_duration(ttl)
        data = await self._call("preview_token_create", {"id": sandbox_id}, json_body=body)
        return PreviewInfo.from_dict(data)

    async def prune(self) -> int:
        """Destroys every expired sandbox now; returns how many."""
        return int((await self._call("sandbox_prune"))["pruned"])

    def events(
        self,
        *,
        types: Iterable[str] | None = None,
        sandbox_id: str | None = None,
        last_event_id: str | None = None,
    ) -> AsyncEventStream:
        """The event stream (SSE). Enter it (``async with``) to subscribe before acting: every
        event after the subscription reaches the iterator."""
        return AsyncEventStream(self, types=types, sandbox_id=sandbox_id, last_event_id=last_event_id)


class AsyncEventStream:
    """Iterates :class:`Event` objects from ``GET /events``.

    Resumes by itself (with ``Last-Event-ID``) when the server drops a subscriber that fell
    behind (``event: overflow``) or the connection breaks; ends when the server closes the
    stream normally (shutdown) or on :meth:`close`.
    """

    def __init__(
        self,
        client: AsyncSvcClient,
        *,
        types: Iterable[str] | None,
        sandbox_id: str | None,
        last_event_id: str | None,
        max_reconnects: int = 5,
    ) -> None:
        self._client = client
        self._types = ",".join(types) if types is not None else None
        self._sandbox_id = sandbox_id
        self.last_event_id = last_event_id
        self._response: httpx.Response | None = None
        self._closed = False
        self._max_reconnects = max_reconnects
        self._timed = compat.TimedIterator(self._events())

    async def open(self) -> None:
        """Subscribes now (done by ``async with`` and by the first iteration)."""
        if self._response is None:
            self._response = await self._client._open(
                "events",
                query={
                    "types": self._types,
                    "sandbox_id": self._sandbox_id,
                    "last_event_id": self.last_event_id,
                },
                timeout=_stream_timeout(None),
            )

    async def close(self) -> None:
        self._closed = True
        await self._timed.close()
        if self._response is not None:
            await self._response.aclose()
            self._response = None

    async def __aenter__(self) -> AsyncEventStream:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> Event:
        return await self._timed.next(None)

    async def next(self, timeout: float | None = None) -> Event:
        """The next event; :class:`SvcTimeoutError` after ``timeout`` seconds (nothing is
        lost: a later call still gets the event that was on its way)."""
        try:
            return await self._timed.next(timeout)
        except TimeoutError as exc:
            raise SvcTimeoutError(f"no event within {timeout}s") from exc
        except StopAsyncIteration as exc:
            raise SvcConnectionError("the event stream ended") from exc

    async def wait_for(
        self, predicate: Callable[[Event], bool], timeout: float | None = None
    ) -> Event:
        """Reads events until one satisfies ``predicate``; :class:`SvcTimeoutError` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            event = await self.next(remaining)
            if predicate(event):
                return event

    async def _events(self) -> AsyncIterator[Event]:
        failures = 0
        while not self._closed:
            await self.open()
            response = self._response
            assert response is not None
            parser = SSEParser()
            resume = False
            try:
                async for line in response.aiter_lines():
                    got = parser.feed(line)
                    if got is None:
                        continue
                    name, event = got
                    if name == "overflow":
                        resume = True
                        break
                    if event is not None:
                        failures = 0
                        self.last_event_id = event.id
                        yield event
            except httpx.TransportError as exc:
                if self._closed:
                    return
                failures += 1
                if failures > self._max_reconnects:
                    raise SvcConnectionError(f"event stream broke: {exc}") from exc
                resume = True
            finally:
                if self._response is response:
                    await response.aclose()
                    self._response = None
            if not resume:
                return


class AsyncSandbox:
    """One sandbox. Create with :meth:`create`, attach with :meth:`connect`.

    ``async with await AsyncSandbox.create(...) as sandbox:`` destroys it on exit.
    """

    def __init__(self, info: SandboxInfo, client: AsyncSvcClient, *, owns_client: bool = False) -> None:
        self.info = info
        self.client = client
        self._owns_client = owns_client
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)
        self.pty = AsyncPty(self)

    @property
    def sandbox_id(self) -> str:
        return self.info.id

    @property
    def id(self) -> str:
        return self.info.id

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.info.id!r}, provider={self.info.provider!r})"

    @staticmethod
    def _client_for(
        client: AsyncSvcClient | None, url: str | None, api_key: str | None, token: str | None
    ) -> tuple[AsyncSvcClient, bool]:
        if client is not None:
            return client, False
        return AsyncSvcClient(url, api_key, token=token), True

    @classmethod
    async def create(
        cls,
        template: str | None = None,
        *,
        image: str | None = None,
        provider: str | None = None,
        memory_mb: int | None = None,
        vcpus: int | None = None,
        ttl: Duration | None = None,
        metadata: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        owner_id: str | None = None,
        network: str | None = None,
        egress: EgressArg | None = None,
        url: str | None = None,
        api_key: str | None = None,
        token: str | None = None,
        client: AsyncSvcClient | None = None,
        timeout: float | None = None,
    ) -> AsyncSandbox:
        """Spawns a sandbox (``POST /sandboxes``), optionally from a template."""
        c, owned = cls._client_for(client, url, api_key, token)
        try:
            info = await c.create_sandbox(
                template, image=image, provider=provider, memory_mb=memory_mb, vcpus=vcpus,
                ttl=ttl, metadata=metadata, env=env, owner_id=owner_id, network=network,
                egress=egress, timeout=timeout,
            )
        except BaseException:
            if owned:
                await c.close()
            raise
        return cls(info, c, owns_client=owned)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        url: str | None = None,
        api_key: str | None = None,
        token: str | None = None,
        client: AsyncSvcClient | None = None,
    ) -> AsyncSandbox:
        """Attaches to an existing sandbox (:class:`NotFoundError` when unknown)."""
        c, owned = cls._client_for(client, url, api_key, token)
        try:
            info = await c.get_sandbox(sandbox_id)
        except BaseException:
            if owned:
                await c.close()
            raise
        return cls(info, c, owns_client=owned)

    @classmethod
    async def get(
        cls,
        sandbox_id: str,
        *,
        url: str | None = None,
        api_key: str | None = None,
        token: str | None = None,
        client: AsyncSvcClient | None = None,
    ) -> SandboxInfo:
        """The record of a sandbox by ID (destroyed ones too, while retained)."""
        c, owned = cls._client_for(client, url, api_key, token)
        try:
            return await c.get_sandbox(sandbox_id)
        finally:
            if owned:
                await c.close()

    @classmethod
    async def list(
        cls,
        *,
        state: str | None = None,
        owner_id: str | None = None,
        provider: str | None = None,
        url: str | None = None,
        api_key: str | None = None,
        token: str | None = None,
        client: AsyncSvcClient | None = None,
    ) -> builtins.list[SandboxInfo]:
        """Sandboxes, newest first (default: every sandbox not destroyed)."""
        c, owned = cls._client_for(client, url, api_key, token)
        try:
            return await c.list_sandboxes(state=state, owner_id=owner_id, provider=provider)
        finally:
            if owned:
                await c.close()

    async def get_info(self) -> SandboxInfo:
        """Fetches the current record (also stored in :attr:`info`)."""
        self.info = await self.client.get_sandbox(self.id)
        return self.info

    async def is_running(self) -> bool:
        return (await self.get_info()).state == "running"

    async def destroy(self) -> None:
        """Destroys the sandbox (idempotent) and closes a client this object created."""
        try:
            await self.client.destroy_sandbox(self.id)
        finally:
            await self.close()

    async def extend(self, ttl: Duration) -> SandboxInfo:
        """Sets ``expires_at`` to now + ``ttl``."""
        self.info = await self.client.extend_sandbox(self.id, ttl)
        return self.info

    async def pause(self) -> SandboxInfo:
        """Freezes the sandbox's processes; commands and files answer ``ConflictError``
        until :meth:`resume`."""
        self.info = await self.client.pause_sandbox(self.id)
        return self.info

    async def resume(self) -> SandboxInfo:
        """Thaws a paused sandbox."""
        self.info = await self.client.resume_sandbox(self.id)
        return self.info

    async def preview(self, port: int, *, ttl: Duration | None = None) -> PreviewInfo:
        """A link to ``port`` inside this sandbox (e.g. a web server it runs): ``url`` with
        ``token``, or ``url_with_token`` for a browser. Only this sandbox and port, until
        ``expires_at``."""
        return await self.client.preview(self.id, port, ttl=ttl)

    def get_host(self, port: int) -> str:
        """``<port>-<id>.<preview_domain>``: the host name svc proxies to ``port`` (needs
        wildcard DNS for the preview domain; without it use :meth:`preview`'s path form)."""
        # the record's preview_domain is ``<id>.<server's preview domain>``
        domain = self.info.preview_domain.removeprefix(f"{self.id}.")
        return f"{port}-{self.id}.{domain}"

    async def logs(self, lines: int | None = None) -> builtins.list[str]:
        data = await self.client._call("sandbox_logs", {"id": self.id}, query={"lines": lines})
        return [str(line) for line in data]

    async def stats(self) -> SandboxStats:
        return SandboxStats.from_dict(await self.client._call("sandbox_stats", {"id": self.id}))

    def events(self, *, types: Iterable[str] | None = None, last_event_id: str | None = None) -> AsyncEventStream:
        """This sandbox's events (see :meth:`AsyncSvcClient.events`)."""
        return self.client.events(types=types, sandbox_id=self.id, last_event_id=last_event_id)

    async def close(self) -> None:
        """Closes the HTTP client this object created (the sandbox keeps running)."""
        if self._owns_client:
            self._owns_client = False
            await self.client.close()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.destroy()


# --- commands ----------------------------------------------------------------------------------


class AsyncCommands:
    """``sandbox.commands``: run commands, buffered, streamed or in the background."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    @property
    def _client(self) -> AsyncSvcClient:
        return self._sandbox.client

    @overload
    async def run(
        self,
        cmd: str,
        *,
        args: builtins.list[str] | None = ...,
        env: dict[str, str] | None = ...,
        cwd: str | None = ...,
        timeout: Duration | None = ...,
        background: Literal[False] = ...,
        on_stdout: OutputCallback | None = ...,
        on_stderr: OutputCallback | None = ...,
        stream: bool | None = ...,
        on_disconnect: Literal["kill", "continue"] | None = ...,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        cmd: str,
        *,
        args: builtins.list[str] | None = ...,
        env: dict[str, str] | None = ...,
        cwd: str | None = ...,
        timeout: Duration | None = ...,
        background: Literal[True],
        on_stdout: OutputCallback | None = ...,
        on_stderr: OutputCallback | None = ...,
        stream: bool | None = ...,
        on_disconnect: Literal["kill", "continue"] | None = ...,
    ) -> AsyncCommandHandle: ...

    async def run(
        self,
        cmd: str,
        *,
        args: builtins.list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: Duration | None = None,
        background: bool = False,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        stream: bool | None = None,
        on_disconnect: Literal["kill", "continue"] | None = None,
    ) -> CommandResult | AsyncCommandHandle:
        """Runs ``cmd`` (through ``/bin/sh -c``, or as the program when ``args`` is given).

        - Default: waits and returns a :class:`CommandResult` (``stdout``, ``stderr``,
          ``exit_code``); a non-zero exit code is not an exception.
        - With ``on_stdout``/``on_stderr`` (or ``stream=True``) output is streamed (NDJSON) and
          each chunk is passed to the callbacks as it arrives.
        - ``background=True`` returns an :class:`AsyncCommandHandle` at once (no default
          deadline); its output can be followed, replayed and reattached to.

        ``timeout`` is the command's deadline (seconds or a Go duration); on it the command is
        killed and the result has ``exit_code`` 124 and ``timed_out`` True.
        """
        body: ExecRequest = {"command": cmd}
        if args is not None:
            body["args"] = list(args)
        if env is not None:
            body["env"] = env
        if cwd is not None:
            body["workdir"] = cwd
        if timeout is not None:
            body["timeout"] = format_duration(timeout)
        read_timeout = None if timeout is None else duration_seconds(timeout) + _EXEC_SLACK
        sid = {"id": self._sandbox.id}
        if background:
            body["background"] = True
            data = await self._client._call("exec", sid, json_body=body)
            return AsyncCommandHandle(self._sandbox, str(data["exec_id"]), command=cmd)
        streamed = stream if stream is not None else (on_stdout is not None or on_stderr is not None)
        if not streamed:
            data = await self._client._call(
                "exec", sid, json_body=body, timeout=_stream_timeout(read_timeout)
            )
            return CommandResult.from_dict(data)
        body["stream"] = True
        if on_disconnect is not None:
            body["on_disconnect"] = on_disconnect
        response = await self._client._open(
            "exec", sid, json_body=body, timeout=_stream_timeout(read_timeout)
        )
        exec_id = response.headers.get("x-exec-id", "")
        out: builtins.list[str] = []
        err: builtins.list[str] = []
        exit_line: ExitLine | None = None
        try:
            async for line in response.aiter_lines():
                if not line:
                    continue
                item = parse_output_line(json_line(line))
                if isinstance(item, ExitLine):
                    exit_line = item
                    break
                if item.stream == "stdout":
                    out.append(item.data)
                    if on_stdout is not None:
                        on_stdout(item.data)
                else:
                    err.append(item.data)
                    if on_stderr is not None:
                        on_stderr(item.data)
        except httpx.TransportError as exc:
            raise SvcConnectionError(f"output stream of {exec_id or 'exec'} broke: {exc}") from exc
        finally:
            await response.aclose()
        if exit_line is None:
            raise ProtocolError(f"exec {exec_id}: the stream ended without an exit line")
        timed_out = False
        if exit_line.exit_code == 124 and exec_id:
            try:
                timed_out = (await self.get(exec_id)).status == "timed_out"
            except SvcError:
                timed_out = False
        return CommandResult(
            exec_id=exec_id,
            exit_code=exit_line.exit_code,
            stdout="".join(out),
            stderr="".join(err),
            duration=exit_line.duration,
            timed_out=timed_out,
        )

    async def list(self) -> builtins.list[CommandInfo]:
        """Exec records of this sandbox, newest first (running ones and the last ended ones)."""
        data = await self._client._list_all("exec_list", {"id": self._sandbox.id})
        return [CommandInfo.from_dict(d) for d in data]

    async def get(self, exec_id: str) -> CommandInfo:
        data = await self._client._call("exec_get", {"id": self._sandbox.id, "exec_id": exec_id})
        return CommandInfo.from_dict(data)

    def connect(self, exec_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0) -> AsyncCommandHandle:
        """A handle on an existing exec (e.g. from another process), reading its output from
        the given byte offsets (default: from the start, as far as the server still keeps it)."""
        return AsyncCommandHandle(
            self._sandbox, exec_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset
        )

    async def kill(self, exec_id: str) -> bool:
        """Kills an exec; False when it had already ended."""
        return await self.connect(exec_id).kill()

    async def send_stdin(self, exec_id: str, data: str | bytes, *, eof: bool = False) -> None:
        await self.connect(exec_id).send_stdin(data, eof=eof)


class AsyncCommandHandle:
    """A running (background) command.

    Output is read through the exec's replay route from byte offsets the handle keeps, so
    :meth:`iter_output` and :meth:`wait` can stop and resume (or reconnect after a broken
    connection) without losing or repeating output. ``stdout``/``stderr`` hold what this
    handle has received so far.
    """

    def __init__(
        self,
        sandbox: AsyncSandbox,
        exec_id: str,
        *,
        command: str | None = None,
        stdout_offset: int = 0,
        stderr_offset: int = 0,
        max_reconnects: int = 5,
    ) -> None:
        self._sandbox = sandbox
        self.exec_id = exec_id
        self.command = command
        self._cursor = StreamCursor(stdout_offset, stderr_offset)
        self._out: builtins.list[str] = []
        self._err: builtins.list[str] = []
        self.exit_code: int | None = None
        self.duration: str | None = None
        self.max_reconnects = max_reconnects

    def __repr__(self) -> str:
        return f"AsyncCommandHandle(exec_id={self.exec_id!r}, exit_code={self.exit_code!r})"

    @property
    def _client(self) -> AsyncSvcClient:
        return self._sandbox.client

    @property
    def _ids(self) -> dict[str, str]:
        return {"id": self._sandbox.id, "exec_id": self.exec_id}

    @property
    def stdout(self) -> str:
        return "".join(self._out)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    @property
    def stdout_offset(self) -> int:
        """The next stdout byte this handle will ask for."""
        return self._cursor.offsets["stdout"]

    @property
    def stderr_offset(self) -> int:
        return self._cursor.offsets["stderr"]

    @property
    def lost_bytes(self) -> int:
        """Bytes the server no longer had when they were asked for (buffer overflow)."""
        return self._cursor.lost

    async def iter_output(
        self, *, follow: bool = True, timeout: float | None = None
    ) -> AsyncIterator[OutputChunk]:
        """Yields output from where this handle left off. With ``follow`` it continues live
        until the command exits (then :attr:`exit_code` is set); without, it stops at the end
        of what has been produced so far. Breaking out early is fine: the next call resumes at
        the first byte not yet yielded, as does a reconnect after a broken connection.
        ``timeout`` (seconds) raises :class:`SvcTimeoutError`; the command keeps running."""
        if self.exit_code is not None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        failures = 0
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise SvcTimeoutError(f"exec {self.exec_id} still running after {timeout}s")
            try:
                response = await self._client._open(
                    "exec_output",
                    self._ids,
                    query={
                        "stdout_offset": self.stdout_offset,
                        "stderr_offset": self.stderr_offset,
                        "follow": follow,
                    },
                    timeout=_stream_timeout(remaining),
                )
            except (SvcConnectionError, SvcTimeoutError):
                failures += 1
                if failures > self.max_reconnects:
                    raise
                await compat.sleep(min(2.0, 0.1 * 2**failures))
                continue
            try:
                async for line in response.aiter_lines():
                    if not line:
                        continue
                    item = parse_output_line(json_line(line))
                    if isinstance(item, ExitLine):
                        self.exit_code = item.exit_code
                        self.duration = item.duration
                        return
                    fresh = self._cursor.accept(item)
                    failures = 0
                    if fresh.data:
                        (self._out if fresh.stream == "stdout" else self._err).append(fresh.data)
                    yield fresh
            except httpx.ReadTimeout:
                continue  # the deadline check above decides
            except httpx.TransportError as exc:
                failures += 1
                if failures > self.max_reconnects:
                    raise SvcConnectionError(f"output of {self.exec_id} broke: {exc}") from exc
                await compat.sleep(min(2.0, 0.1 * 2**failures))
                continue
            finally:
                await response.aclose()
            if not follow:
                return
            # the server ended a follow stream without an exit line: reconnect from the offsets
            failures += 1
            if failures > self.max_reconnects:
                raise ProtocolError(f"output of {self.exec_id} ended without an exit line")

    async def wait(
        self,
        *,
        timeout: float | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        """Follows the output until the command exits and returns its result. After
        ``timeout`` seconds :class:`SvcTimeoutError`; the command keeps running and a later
        ``wait`` resumes where this one stopped."""
        async for chunk in self.iter_output(follow=True, timeout=timeout):
            if chunk.stream == "stdout" and on_stdout is not None and chunk.data:
                on_stdout(chunk.data)
            elif chunk.stream == "stderr" and on_stderr is not None and chunk.data:
                on_stderr(chunk.data)
        assert self.exit_code is not None
        timed_out = False
        if self.exit_code == 124:
            timed_out = (await self.info()).status == "timed_out"
        return CommandResult(
            exec_id=self.exec_id,
            exit_code=self.exit_code,
            stdout=self.stdout,
            stderr=self.stderr,
            duration=self.duration or "",
            timed_out=timed_out,
        )

    async def info(self) -> CommandInfo:
        """The exec record (status, exit code, bytes written)."""
        return CommandInfo.from_dict(await self._client._call("exec_get", self._ids))

    async def send_stdin(self, data: str | bytes, *, eof: bool = False) -> None:
        """Writes to the command's stdin (UTF-8 text); ``eof`` closes it afterwards."""
        await self._client._call("exec_stdin", self._ids, json_body={"data": to_text(data), "eof": eof})

    async def close_stdin(self) -> None:
        await self._client._call("exec_stdin", self._ids, json_body={"data": "", "eof": True})

    async def signal(self, signal: str) -> None:
        """Sends ``SIGINT``, ``SIGTERM``, ``SIGKILL`` or ``SIGHUP`` (prefix optional)."""
        await self._client._call("exec_signal", self._ids, json_body={"signal": signal})

    async def kill(self) -> bool:
        """Kills the command; False when it had already ended."""
        try:
            await self._client._call("exec_kill", self._ids)
        except ConflictError:
            return False
        return True


# --- PTY / interactive (WebSocket) ---------------------------------------------------------------


class AsyncPty:
    """``sandbox.pty``: interactive sessions over ``GET /exec/ws``."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def create(
        self,
        cmd: str = "/bin/sh",
        *,
        args: builtins.list[str] | None = None,
        cols: int = 80,
        rows: int = 24,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: Duration | None = None,
        tty: bool = True,
        open_timeout: float | None = 30.0,
    ) -> AsyncPtySession:
        """Starts ``cmd`` under a pseudo-terminal (``tty=False``: plain pipes, stderr apart)."""
        client = self._sandbox.client
        url = ws_url(client.url) + ROUTES["exec_ws"].format(id=self._sandbox.id)
        try:
            ws = await compat.ws_connect(url, client.headers, open_timeout)
        except websockets.exceptions.InvalidStatus as exc:
            resp = exc.response
            raise error_from_response(
                resp.status_code, bytes(resp.body or b""), request_id=resp.headers.get("x-request-id")
            ) from exc
        except (OSError, websockets.exceptions.WebSocketException) as exc:
            raise SvcConnectionError(f"WebSocket {url}: {exc}") from exc
        start: dict[str, Any] = {"type": "start", "command": cmd, "tty": tty}
        if tty:
            start["cols"] = cols
            start["rows"] = rows
        if args is not None:
            start["args"] = list(args)
        if env is not None:
            start["env"] = env
        if cwd is not None:
            start["workdir"] = cwd
        if timeout is not None:
            start["timeout"] = format_duration(timeout)
        session = AsyncPtySession(ws, exec_id=ws.response.headers.get("x-exec-id") if ws.response else None)
        await session._send(start)
        return session


class AsyncPtySession:
    """An interactive command. Output arrives as :class:`OutputChunk` objects; ``output`` holds
    everything received. Closing the session kills the command."""

    def __init__(self, ws: compat.WebSocket, *, exec_id: str | None) -> None:
        self._ws = ws
        self.exec_id = exec_id
        self.exit_code: int | None = None
        self._out: builtins.list[str] = []
        self._err: builtins.list[str] = []

    @property
    def output(self) -> str:
        """Everything received on stdout (with a TTY: the terminal's whole output)."""
        return "".join(self._out)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    async def _send(self, message: dict[str, Any]) -> None:
        try:
            await self._ws.send(json.dumps(message))
        except websockets.exceptions.ConnectionClosed as exc:
            raise SvcConnectionError(f"the session is closed: {exc}") from exc

    async def send_stdin(self, data: str | bytes, *, eof: bool = False) -> None:
        message: dict[str, Any] = {"type": "stdin", "data": to_text(data)}
        if eof:
            message["eof"] = True
        await self._send(message)

    async def resize(self, cols: int, rows: int) -> None:
        await self._send({"type": "resize", "cols": cols, "rows": rows})

    async def signal(self, signal: str) -> None:
        await self._send({"type": "signal", "signal": signal})

    async def recv(self, timeout: float | None = None) -> OutputChunk | None:
        """The next output chunk; ``None`` once the command has exited
        (:attr:`exit_code` set). :class:`SvcTimeoutError` after ``timeout`` seconds."""
        if self.exit_code is not None:
            return None
        while True:
            try:
                raw = await compat.ws_recv(self._ws, timeout)
            except TimeoutError as exc:
                raise SvcTimeoutError(f"no output within {timeout}s") from exc
            except websockets.exceptions.ConnectionClosed as exc:
                raise SvcConnectionError(f"the session closed before the command exited: {exc}") from exc
            msg = json_line(raw)
            kind = msg.get("type")
            if kind in ("stdout", "stderr"):
                data = str(msg.get("data", ""))
                (self._out if kind == "stdout" else self._err).append(data)
                return OutputChunk(stream=kind, data=data)
            if kind == "exit":
                self.exit_code = int(msg.get("exit_code", -1))
                await self._ws.close()
                return None
            if kind == "error":
                message = str(msg.get("message", "protocol error"))
                code = msg.get("code")
                if isinstance(code, str):
                    raise error_from_code(code, message)
                raise ProtocolError(message)

    async def iter_output(self, timeout: float | None = None) -> AsyncIterator[OutputChunk]:
        """Yields output until the command exits (``timeout`` applies to each chunk)."""
        while True:
            chunk = await self.recv(timeout)
            if chunk is None:
                return
            yield chunk

    async def read_until(self, text: str, timeout: float = 10.0) -> str:
        """Reads until ``output`` contains ``text`` (returns ``output``)."""
        deadline = time.monotonic() + timeout
        while text not in self.output:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SvcTimeoutError(f"{text!r} did not appear within {timeout}s; got {self.output[-200:]!r}")
            if await self.recv(remaining) is None:
                raise SvcConnectionError(f"the command exited before {text!r} appeared")
        return self.output

    async def wait(self, timeout: float | None = None) -> int:
        """Reads until the command exits; returns its exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.exit_code is None:
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            await self.recv(remaining)
        return self.exit_code

    async def close(self) -> None:
        """Closes the socket (the server kills a command still running)."""
        await self._ws.close()

    async def __aenter__(self) -> AsyncPtySession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# --- files -------------------------------------------------------------------------------------------


class AsyncFiles:
    """``sandbox.files``: paths are absolute inside the sandbox."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    @property
    def _client(self) -> AsyncSvcClient:
        return self._sandbox.client

    @property
    def _sid(self) -> dict[str, str]:
        return {"id": self._sandbox.id}

    async def read(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        """The file's bytes (``offset``/``length`` read a byte range)."""
        headers = _range_header(offset, length)
        response = await self._client._open(
            "file_read", self._sid, query={"path": path}, headers=headers, timeout=_stream_timeout(None)
        )
        try:
            return await response.aread()
        finally:
            await response.aclose()

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def read_to(self, path: str, fileobj: IO[bytes], *, offset: int = 0) -> int:
        """Streams the file (from byte ``offset``, to resume a broken download) into
        ``fileobj`` without holding it in memory; returns the bytes written."""
        response = await self._client._open(
            "file_read", self._sid, query={"path": path}, headers=_range_header(offset, None),
            timeout=_stream_timeout(None),
        )
        written = 0
        try:
            async for chunk in response.aiter_bytes():
                await compat.write_to(fileobj, chunk)
                written += len(chunk)
        except httpx.TransportError as exc:
            raise SvcConnectionError(f"download of {path} broke after {written} bytes: {exc}") from exc
        finally:
            await response.aclose()
        return written

    async def write(
        self,
        path: str,
        data: str | bytes | IO[bytes] | Iterable[bytes],
        *,
        mode: int | str | None = None,
    ) -> WriteInfo:
        """Writes a file from text, bytes, a binary file object or an iterable of chunks,
        streamed (``PUT /files``); parents are created; ``mode`` like ``0o755`` or ``"0755"``."""
        query: dict[str, Any] = {"path": path, "mode": octal_mode(mode)}
        data_out = await self._client._call(
            "file_upload", self._sid, query=query, content=compat.body_stream(data),
            headers={"Content-Type": "application/octet-stream"}, timeout=_stream_timeout(None),
        )
        return WriteInfo.from_dict(data_out)

    async def write_text(self, path: str, text: str, *, mode: int | str | None = None) -> WriteInfo:
        return await self.write(path, text.encode("utf-8"), mode=mode)

    async def list(self, path: str = "/") -> builtins.list[FileInfo]:
        """Entries of a directory, sorted by name."""
        data = await self._client._call("file_list", self._sid, query={"path": path})
        return [FileInfo.from_dict(d) for d in data]

    async def stat(self, path: str) -> FileInfo:
        return FileInfo.from_dict(await self._client._call("file_stat", self._sid, query={"path": path}))

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except NotFoundError:
            return False
        return True

    async def glob(self, pattern: str) -> builtins.list[str]:
        """Absolute paths matching ``pattern`` (``*``, ``?``, ``[...]``, ``**``), sorted."""
        data = await self._client._call("file_glob", self._sid, query={"pattern": pattern})
        return [str(p) for p in data]

    async def move(self, old_path: str, new_path: str) -> None:
        """Moves/renames; an existing destination file is replaced."""
        body: MoveFile = {"old_path": old_path, "new_path": new_path}
        await self._client._call("file_move", self._sid, json_body=body)

    rename = move

    async def chmod(self, path: str, mode: int | str) -> None:
        body: ChmodFile = {"path": path, "mode": octal_mode(mode) or ""}
        await self._client._call("file_chmod", self._sid, json_body=body)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Deletes a file or directory (a non-empty one needs ``recursive=True``)."""
        await self._client._call(
            "file_delete", self._sid, query={"path": path, "recursive": recursive or None}
        )

    async def make_dir(self, path: str) -> None:
        """Creates a directory (and its parents)."""
        await self.write_archive(path, empty_tar())

    async def write_archive(self, path: str, tar: bytes | IO[bytes] | Iterable[bytes]) -> ArchiveInfo:
        """Extracts a tar stream into directory ``path`` (created when missing)."""
        data = await self._client._call(
            "archive_write", self._sid, query={"path": path}, content=compat.body_stream(tar),
            headers={"Content-Type": "application/x-tar"}, timeout=_stream_timeout(None),
        )
        return ArchiveInfo.from_dict(data)

    async def read_archive(self, path: str, fileobj: IO[bytes]) -> int:
        """Streams directory ``path`` as a tar archive into ``fileobj``; returns its size."""
        response = await self._client._open(
            "archive_read", self._sid, query={"path": path}, timeout=_stream_timeout(None)
        )
        written = 0
        try:
            async for chunk in response.aiter_bytes():
                await compat.write_to(fileobj, chunk)
                written += len(chunk)
        except httpx.TransportError as exc:
            raise SvcConnectionError(f"archive of {path} broke after {written} bytes: {exc}") from exc
        finally:
            await response.aclose()
        return written

    async def upload_dir(self, local_dir: str | os.PathLike[str], remote_dir: str) -> ArchiveInfo:
        """Copies a local directory's contents into ``remote_dir`` (as a tar stream)."""
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            await compat.run_sync(tar_directory, local_dir, spool)
            return await self.write_archive(remote_dir, spool)

    async def download_dir(self, remote_dir: str, local_dir: str | os.PathLike[str]) -> int:
        """Copies ``remote_dir``'s contents into ``local_dir`` (created); returns the entries
        extracted. Entries that would leave ``local_dir`` are refused."""
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            await self.read_archive(remote_dir, spool)
            spool.seek(0)
            return await compat.run_sync(extract_tar, spool, local_dir)


def _range_header(offset: int, length: int | None) -> dict[str, str] | None:
    if offset < 0 or (length is not None and length < 0):
        raise ValueError("offset and length must not be negative")
    if offset == 0 and length is None:
        return None
    if length is None:
        return {"Range": f"bytes={offset}-"}
    if length == 0:
        raise ValueError("length must be positive")
    return {"Range": f"bytes={offset}-{offset + length - 1}"}


# --- templates and quotas ----------------------------------------------------------------------------


class AsyncTemplates:
    """``client.templates``: stored sandbox templates."""

    def __init__(self, client: AsyncSvcClient) -> None:
        self._client = client

    @staticmethod
    def _spec(
        name: str | None,
        image: str | None,
        memory_mb: int | None,
        vcpus: int | None,
        ttl: Duration | None,
        provider: str | None,
        metadata: dict[str, str] | None,
        warm_pool: int | None,
        egress: EgressArg | None,
    ) -> TemplateSpec:
        spec: TemplateSpec = {}
        if name is not None:
            spec["name"] = name
        if image is not None:
            spec["image"] = image
        if memory_mb is not None:
            spec["memory_mb"] = memory_mb
        if vcpus is not None:
            spec["vcpus"] = vcpus
        if ttl is not None:
            spec["ttl"] = format_duration(ttl)
        if provider is not None:
            spec["provider"] = provider
        if metadata is not None:
            spec["metadata"] = metadata
        if warm_pool is not None:
            spec["warm_pool"] = warm_pool
        if egress is not None:
            spec["egress"] = _egress(egress)
        return spec

    async def create(
        self,
        name: str,
        *,
        image: str | None = None,
        memory_mb: int | None = None,
        vcpus: int | None = None,
        ttl: Duration | None = None,
        provider: str | None = None,
        metadata: dict[str, str] | None = None,
        warm_pool: int | None = None,
        egress: EgressArg | None = None,
        tenant_id: str | None = None,
    ) -> TemplateInfo:
        """Creates a template (:class:`ConflictError` when the name exists); ``warm_pool``
        runtimes are then kept started for its spawns. An OIDC caller's template belongs to its
        tenant; an API-key or admin caller's is global unless ``tenant_id`` names a tenant."""
        spec = self._spec(name, image, memory_mb, vcpus, ttl, provider, metadata, warm_pool, egress)
        if tenant_id is not None:
            spec["tenant_id"] = tenant_id
        return TemplateInfo.from_dict(await self._client._call("template_create", json_body=spec))

    async def list(self) -> builtins.list[TemplateInfo]:
        return [TemplateInfo.from_dict(t) for t in await self._client._list_all("template_list")]

    async def get(self, name: str) -> TemplateInfo:
        return TemplateInfo.from_dict(await self._client._call("template_get", {"name": name}))

    async def update(
        self,
        name: str,
        *,
        image: str | None = None,
        memory_mb: int | None = None,
        vcpus: int | None = None,
        ttl: Duration | None = None,
        provider: str | None = None,
        metadata: dict[str, str] | None = None,
        warm_pool: int | None = None,
        egress: EgressArg | None = None,
    ) -> TemplateInfo:
        """Replaces every field (omitted ones take the server defaults); the tenant stays."""
        spec = self._spec(None, image, memory_mb, vcpus, ttl, provider, metadata, warm_pool, egress)
        data = await self._client._call("template_update", {"name": name}, json_body=spec)
        return TemplateInfo.from_dict(data)

    async def delete(self, name: str) -> None:
        await self._client._call("template_delete", {"name": name})

    async def spawn(
        self,
        name: str,
        *,
        ttl: Duration | None = None,
        provider: str | None = None,
        env: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> AsyncSandbox:
        """Spawns a sandbox from the template (``POST /templates/{name}/spawn``), from its
        warm pool when one is ready."""
        body: TemplateSpawnRequest = {}
        if ttl is not None:
            body["ttl"] = format_duration(ttl)
        if provider is not None:
            body["provider"] = provider
        if env is not None:
            body["env"] = env
        if metadata is not None:
            body["metadata"] = metadata
        data = await self._client._call(
            "template_spawn", {"name": name}, json_body=body, timeout=_stream_timeout(None)
        )
        return AsyncSandbox(SandboxInfo.from_dict(data), self._client)

    # --- builds -------------------------------------------------------------------------------

    async def build(
        self,
        name: str,
        dockerfile: str | None = None,
        *,
        files: Mapping[str, str | bytes] | None = None,
        context_dir: str | os.PathLike[str] | None = None,
        on_log: BuildLogCallback | None = None,
        timeout: float | None = None,
    ) -> TemplateBuild:
        """Builds the template's image from a Dockerfile and waits for the build: starts it
        (:meth:`start_build`, same arguments), passes each log line to ``on_log``, and returns
        the ended build, whose ``image`` the template now uses. A build that failed or was
        cancelled raises :class:`BuildError` (its ``build`` says why). After ``timeout``
        seconds the build is cancelled and :class:`SvcTimeoutError` raised."""
        accepted = await self.start_build(name, dockerfile, files=files, context_dir=context_dir)
        build_id = accepted.build_id
        ids = {"name": name, "build_id": build_id}
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = 0  # lines passed on: a reconnect replays the log from its start
        failures = 0
        ended = False
        while not ended:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                try:
                    await self.cancel_build(name, build_id)
                except ConflictError:
                    pass  # it ended meanwhile
                raise SvcTimeoutError(f"build {build_id} of {name!r} still running after {timeout}s")
            response = await self._client._open(
                "template_build_logs", ids, query={"follow": True}, timeout=_stream_timeout(remaining)
            )
            index = 0
            broke: Exception | None = None
            try:
                async for raw in response.aiter_lines():
                    if not raw:
                        continue
                    index += 1
                    if index <= seen:
                        continue
                    seen = index
                    line = BuildLogLine.from_dict(json_line(raw))
                    if on_log is not None:
                        on_log(line)
                    if line.type == "result":
                        ended = True
                        break
                    if deadline is not None and time.monotonic() >= deadline:
                        break  # the check above cancels
            except httpx.ReadTimeout:
                continue  # the deadline check above decides
            except httpx.TransportError as exc:
                broke = exc
            finally:
                await response.aclose()
            if ended or (deadline is not None and time.monotonic() >= deadline):
                continue
            # the stream broke, or ended without the result line: follow it again
            failures += 1
            if failures > _BUILD_RECONNECTS:
                raise SvcConnectionError(f"log of build {build_id} ended without its result: {broke}")
            await compat.sleep(min(2.0, 0.1 * 2**failures))
        record = await self.get_build(name, build_id)
        if record.status != "succeeded":
            raise BuildError(record)
        return record

    async def start_build(
        self,
        name: str,
        dockerfile: str | None = None,
        *,
        files: Mapping[str, str | bytes] | None = None,
        context_dir: str | os.PathLike[str] | None = None,
    ) -> BuildAccepted:
        """Starts a build (``POST /templates/{name}/build``) and returns at once. The context is
        ``dockerfile`` (its text) with ``files`` (path -> text or bytes) sent as JSON, or with
        ``context_dir`` a local directory sent as tar: its ``Dockerfile`` unless ``dockerfile``
        is given, plus ``files``. :class:`BadRequestError` for a bad context (absolute names,
        ``..``), :class:`UnavailableError` when the server has no Docker engine."""
        path = {"name": name}
        if context_dir is not None:
            extra = {k: as_bytes(v) for k, v in (files or {}).items()}
            if dockerfile is not None:
                extra["Dockerfile"] = dockerfile.encode("utf-8")
            with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
                await compat.run_sync(tar_directory, context_dir, spool, extra)
                data = await self._client._call(
                    "template_build", path, content=compat.body_stream(spool),
                    headers={"Content-Type": "application/x-tar"}, timeout=_stream_timeout(None),
                )
            return BuildAccepted.from_dict(data)
        if dockerfile is None:
            raise ValueError("a build needs a dockerfile or a context_dir")
        body: BuildRequest = {"dockerfile": dockerfile}
        if files:
            if any(isinstance(v, bytes) for v in files.values()):
                body["files"] = {k: base64.b64encode(as_bytes(v)).decode("ascii") for k, v in files.items()}
                body["encoding"] = "base64"
            else:
                body["files"] = {k: str(v) for k, v in files.items()}
        return BuildAccepted.from_dict(await self._client._call("template_build", path, json_body=body))

    async def list_builds(self, name: str) -> builtins.list[TemplateBuild]:
        """The template's builds, newest first."""
        data = await self._client._call("template_build_list", {"name": name})
        return [TemplateBuild.from_dict(b) for b in data]

    async def get_build(self, name: str, build_id: str) -> TemplateBuild:
        data = await self._client._call("template_build_get", {"name": name, "build_id": build_id})
        return TemplateBuild.from_dict(data)

    async def cancel_build(self, name: str, build_id: str) -> TemplateBuild:
        """Cancels a running build (the template keeps its image); :class:`ConflictError` when
        it has already ended."""
        data = await self._client._call("template_build_cancel", {"name": name, "build_id": build_id})
        return TemplateBuild.from_dict(data)

    async def build_logs(
        self, name: str, build_id: str, *, follow: bool = True
    ) -> AsyncIterator[BuildLogLine]:
        """The build's log lines from its start; with ``follow`` new ones until the ``result``
        line (the last), without only what is there now."""
        response = await self._client._open(
            "template_build_logs", {"name": name, "build_id": build_id}, query={"follow": follow},
            timeout=_stream_timeout(None),
        )
        try:
            async for raw in response.aiter_lines():
                if raw:
                    yield BuildLogLine.from_dict(json_line(raw))
        except httpx.TransportError as exc:
            raise SvcConnectionError(f"log of build {build_id} broke: {exc}") from exc
        finally:
            await response.aclose()


class AsyncQuotas:
    """``client.quotas``: per-owner limits."""

    def __init__(self, client: AsyncSvcClient) -> None:
        self._client = client

    async def list(self) -> builtins.list[Quota]:
        return [Quota.from_dict(q) for q in await self._client._list_all("quota_list")]

    async def summary(self) -> QuotaSummary:
        return QuotaSummary.from_dict(await self._client._call("quota_summary"))

    async def get(self, owner_id: str) -> Quota:
        """:class:`NotFoundError` when the owner has no stored quota."""
        return Quota.from_dict(await self._client._call("quota_get", {"ownerID": owner_id}))

    async def set(
        self,
        owner_id: str,
        *,
        max_sandboxes: int | None = None,
        max_ttl: Duration | None = None,
        max_exec_timeout: Duration | None = None,
    ) -> Quota:
        """Saves the owner's quota (``0``/``0s``/omitted inherit the global limit)."""
        body: QuotaRequest = {}
        if max_sandboxes is not None:
            body["max_sandboxes"] = max_sandboxes
        if max_ttl is not None:
            body["max_ttl"] = format_duration(max_ttl)
        if max_exec_timeout is not None:
            body["max_exec_timeout"] = format_duration(max_exec_timeout)
        data = await self._client._call("quota_set", {"ownerID": owner_id}, json_body=body)
        return Quota.from_dict(data)

    async def delete(self, owner_id: str) -> None:
        await self._client._call("quota_delete", {"ownerID": owner_id})

    async def usage(self, owner_id: str) -> QuotaUsage:
        return QuotaUsage.from_dict(await self._client._call("quota_usage", {"ownerID": owner_id}))


__all__ = [
    "AsyncSvcClient",
    "AsyncSandbox",
    "AsyncCommands",
    "AsyncCommandHandle",
    "AsyncPty",
    "AsyncPtySession",
    "AsyncFiles",
    "AsyncTemplates",
    "AsyncQuotas",
    "AsyncEventStream",
]
