"""Helpers shared by the sync and async clients (no I/O here)."""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import posixpath
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Union

from .errors import ProtocolError
from .models import Event, OutputChunk

DEFAULT_URL = "http://127.0.0.1:7423"

#: seconds (int/float), a ``timedelta`` or a Go duration string (``"30s"``, ``"1h30m"``)
Duration = Union[int, float, _dt.timedelta, str]


def resolve_url(url: str | None) -> str:
    base = url or os.environ.get("SVC_URL") or DEFAULT_URL
    return base.rstrip("/")


def auth_headers(api_key: str | None, token: str | None, user_id: str | None) -> dict[str, str]:
    """``X-API-Key`` (from the argument or ``SVC_API_KEY``), else a bearer token (``SVC_TOKEN``)."""
    headers: dict[str, str] = {}
    key = api_key if api_key is not None else os.environ.get("SVC_API_KEY")
    tok = token if token is not None else os.environ.get("SVC_TOKEN")
    if key:
        headers["X-API-Key"] = key
    elif tok:
        headers["Authorization"] = f"Bearer {tok}"
    if user_id:
        headers["X-User-ID"] = user_id
    return headers


def ws_url(http_url: str) -> str:
    if http_url.startswith("https://"):
        return "wss://" + http_url[len("https://") :]
    if http_url.startswith("http://"):
        return "ws://" + http_url[len("http://") :]
    return http_url


def format_duration(value: Duration) -> str:
    """Renders seconds or a ``timedelta`` as a Go duration string; strings pass through."""
    if isinstance(value, str):
        return value
    seconds = value.total_seconds() if isinstance(value, _dt.timedelta) else float(value)
    if seconds < 0:
        raise ValueError("durations must not be negative")
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    millis = round(seconds * 1000)
    if millis == seconds * 1000:
        return f"{millis}ms"
    return f"{round(seconds * 1_000_000)}us"


def duration_seconds(value: Duration) -> float:
    """Best-effort seconds of a duration (used for client-side HTTP deadlines)."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    total = 0.0
    number = ""
    i = 0
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    while i < len(value):
        ch = value[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = value[i : i + 2] if value[i : i + 2] in units else ch
        if not number or unit not in units:
            raise ValueError(f"not a duration: {value!r}")
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    if number:
        raise ValueError(f"not a duration (missing unit): {value!r}")
    return total


def octal_mode(mode: int | str | None) -> str | None:
    if mode is None:
        return None
    if isinstance(mode, int):
        return f"{mode:04o}"
    return mode


def json_line(line: str | bytes) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"malformed line from server: {line!r:.200}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {line!r:.200}")
    return obj


@dataclass
class ExitLine:
    exit_code: int
    duration: str


def parse_output_line(obj: dict[str, Any]) -> OutputChunk | ExitLine:
    """One NDJSON line of ``POST /exec`` (stream) or ``GET /execs/{id}/output``."""
    stream = obj.get("stream")
    if stream == "exit":
        return ExitLine(exit_code=int(obj.get("exit_code", -1)), duration=str(obj.get("duration", "")))
    if stream not in ("stdout", "stderr"):
        raise ProtocolError(f"unknown output stream {stream!r}")
    if "lost" in obj:
        return OutputChunk(stream=stream, data="", offset=None, lost=int(obj["lost"]))
    offset = obj.get("offset")
    return OutputChunk(
        stream=stream, data=str(obj.get("data", "")), offset=int(offset) if offset is not None else None
    )


class StreamCursor:
    """Tracks how far a consumer has read each output stream (byte offsets in the raw output),
    so that a replay from those offsets continues exactly after the last chunk received.

    The server gives each chunk's start offset; its end is the start plus the byte length of
    its UTF-8 ``data``, which is exact unless the raw output was not valid UTF-8 (the server
    sends U+FFFD for such bytes). Within one connection the server's own offsets are used, so
    this only matters when a connection breaks right after such a chunk.
    """

    def __init__(self, stdout_offset: int = 0, stderr_offset: int = 0) -> None:
        self.offsets: dict[str, int] = {"stdout": stdout_offset, "stderr": stderr_offset}
        self.lost = 0

    def accept(self, chunk: OutputChunk) -> OutputChunk:
        """Advances past ``chunk`` (a data chunk or a ``lost`` marker) and returns it."""
        if chunk.lost:
            self.offsets[chunk.stream] += chunk.lost
            self.lost += chunk.lost
            return chunk
        start = chunk.offset if chunk.offset is not None else self.offsets[chunk.stream]
        self.offsets[chunk.stream] = start + len(chunk.data.encode("utf-8"))
        return chunk


class SSEParser:
    """Incremental ``text/event-stream`` parser: feed lines, get events at blank lines."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._id: str | None = None
        self._event: str | None = None

    def feed(self, line: str) -> tuple[str, Event | None] | None:
        """Returns ``(event name, Event or None)`` when a message completes, else ``None``."""
        if line == "":
            if not self._data and self._event is None:
                self._id = None
                return None
            name = self._event or "message"
            payload = "\n".join(self._data)
            self._data, self._event, self._id = [], None, None
            if name != "message":
                return (name, None)
            return (name, Event.from_dict(json_line(payload)))
        if line.startswith(":"):
            return None
        fieldname, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if fieldname == "data":
            self._data.append(value)
        elif fieldname == "id":
            self._id = value
        elif fieldname == "event":
            self._event = value
        return None


# --- directories as tar -----------------------------------------------------------------------

FileSource = Union[bytes, str, IO[bytes]]


def tar_directory(
    local_dir: str | os.PathLike[str], out: IO[bytes], extra: Mapping[str, bytes] | None = None
) -> int:
    """Writes ``local_dir``'s contents (names relative to it) as a tar stream to ``out``;
    ``extra`` files (relative name -> content) are added, replacing the directory's own."""
    root = Path(local_dir)
    if not root.is_dir():
        raise NotADirectoryError(str(root))
    extra = extra or {}
    count = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if rel in extra:
                continue
            tar.add(str(path), arcname=rel, recursive=False)
            count += 1
        for name, data in extra.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
            count += 1
    out.seek(0)
    return count


def _safe_member(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo | None:
    name = member.name
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    if name in ("", "."):
        return None
    norm = posixpath.normpath(name)
    if norm.startswith("/") or norm == ".." or norm.startswith("../"):
        raise ProtocolError(f"archive entry {member.name!r} leaves the target directory")
    if member.issym() or member.islnk():
        target = member.linkname
        base = posixpath.dirname(norm) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
            raise ProtocolError(f"archive link {member.name!r} points outside the target directory")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return None
    member.name = norm
    return member


def extract_tar(src: IO[bytes], local_dir: str | os.PathLike[str]) -> int:
    """Extracts a tar stream into ``local_dir`` (created), refusing entries that leave it."""
    dest = Path(local_dir)
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(fileobj=src, mode="r|*") as tar:
        for member in tar:
            safe = _safe_member(member, dest)
            if safe is None:
                continue
            if hasattr(tarfile, "data_filter"):
                tar.extract(safe, path=str(dest), filter="tar")
            else:  # pragma: no cover - Python < 3.10.12 / 3.11.4
                tar.extract(safe, path=str(dest))
            count += 1
    return count


def as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def to_text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data.decode("utf-8")


def empty_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT):
        pass
    return buf.getvalue()
