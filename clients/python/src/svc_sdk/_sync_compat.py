"""I/O primitives of the blocking flavour. ``_async_compat`` has the same names for asyncio."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Generic, TypeVar, Union

from websockets.sync.client import ClientConnection as WebSocket
from websockets.sync.client import connect as _ws_connect

__all__ = [
    "WebSocket", "sleep", "ws_connect", "ws_recv", "body_stream", "run_sync", "write_to", "Body",
    "TimedIterator",
]

T = TypeVar("T")
CHUNK = 256 * 1024

Body = Union[bytes, Iterator[bytes]]


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def ws_connect(url: str, headers: dict[str, str], open_timeout: float | None) -> WebSocket:
    # ``connect(...)`` is a context manager in every websockets release this SDK supports;
    # entering it (rather than using the return value directly, deprecated in 17.1) gives the
    # connection, which ``PtySession.close`` closes.
    return _ws_connect(url, additional_headers=headers, open_timeout=open_timeout, max_size=None).__enter__()


def ws_recv(ws: WebSocket, timeout: float | None) -> str | bytes:
    return ws.recv(timeout=timeout)


def _file_chunks(fileobj: IO[bytes]) -> Iterator[bytes]:
    while True:
        chunk = fileobj.read(CHUNK)
        if not chunk:
            return
        yield chunk


def _iter_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    yield from chunks


def body_stream(data: bytes | str | IO[bytes] | Iterable[bytes]) -> Body:
    """A request body httpx can stream without holding a file in memory."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        return _file_chunks(data)  # type: ignore[arg-type]
    return _iter_chunks(data)


def run_sync(fn: Callable[..., T], *args: object) -> T:
    return fn(*args)


def write_to(fileobj: IO[bytes], chunk: bytes) -> None:
    fileobj.write(chunk)


_END = object()


class TimedIterator(Generic[T]):
    """Pulls items from an iterator with a per-call deadline. With a deadline the read runs in
    a daemon thread; a timeout leaves it pending and the next call waits for the same item, so
    nothing is lost."""

    def __init__(self, iterator: Iterator[T]) -> None:
        self._iterator = iterator
        self._pending: Future[object] | None = None

    def _pull(self, future: Future[object]) -> None:
        try:
            future.set_result(next(self._iterator, _END))
        except BaseException as exc:  # handed to the caller
            future.set_exception(exc)

    def next(self, timeout: float | None) -> T:
        if self._pending is None and timeout is None:
            return next(self._iterator)
        if self._pending is None:
            self._pending = Future()
            threading.Thread(target=self._pull, args=(self._pending,), daemon=True).start()
        try:
            value = self._pending.result(timeout)
        except FutureTimeout as exc:
            raise TimeoutError("no item before the deadline") from exc
        self._pending = None
        if value is _END:
            raise StopIteration
        return value  # type: ignore[return-value]

    def close(self) -> None:
        self._pending = None
