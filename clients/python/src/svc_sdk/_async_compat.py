"""I/O primitives of the asyncio flavour. ``_sync_compat`` has the same names, blocking."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterable
from typing import IO, Generic, TypeVar, Union

import anyio.to_thread
from websockets.asyncio.client import ClientConnection as WebSocket
from websockets.asyncio.client import connect as _ws_connect

__all__ = [
    "WebSocket", "sleep", "ws_connect", "ws_recv", "body_stream", "run_sync", "write_to", "Body",
    "TimedIterator",
]

T = TypeVar("T")
CHUNK = 256 * 1024

Body = Union[bytes, AsyncIterator[bytes]]


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def ws_connect(url: str, headers: dict[str, str], open_timeout: float | None) -> WebSocket:
    return await _ws_connect(
        url, additional_headers=headers, open_timeout=open_timeout, max_size=None, ping_interval=20
    )


async def ws_recv(ws: WebSocket, timeout: float | None) -> str | bytes:
    try:
        return await asyncio.wait_for(ws.recv(), timeout)
    except asyncio.TimeoutError as exc:  # an alias of TimeoutError from 3.11 on
        raise TimeoutError("no message before the deadline") from exc


async def _file_chunks(fileobj: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        chunk = await anyio.to_thread.run_sync(fileobj.read, CHUNK)
        if not chunk:
            return
        yield chunk


async def _iter_chunks(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def body_stream(data: bytes | str | IO[bytes] | Iterable[bytes]) -> Body:
    """A request body httpx can stream without holding a file in memory."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        return _file_chunks(data)  # type: ignore[arg-type]
    return _iter_chunks(data)


async def run_sync(fn: Callable[..., T], *args: object) -> T:
    """Runs blocking work (tar packing, disk writes) in a worker thread."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


async def write_to(fileobj: IO[bytes], chunk: bytes) -> None:
    await anyio.to_thread.run_sync(fileobj.write, chunk)


class TimedIterator(Generic[T]):
    """Pulls items from an async iterator with a per-call deadline. A timeout does not cancel
    the pending read: the next call waits for the same item, so nothing is lost."""

    def __init__(self, iterator: AsyncIterator[T]) -> None:
        self._iterator = iterator
        self._pending: asyncio.Task[T] | None = None

    async def next(self, timeout: float | None) -> T:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._iterator.__anext__())
        done, _ = await asyncio.wait({self._pending}, timeout=timeout)
        if not done:
            raise TimeoutError("no item before the deadline")
        task, self._pending = self._pending, None
        return task.result()

    async def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
