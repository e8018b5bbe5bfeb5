"""The unmodified E2B SDK against svc: lifecycle, commands, files and errors."""

from __future__ import annotations

import time
import uuid

import pytest
from e2b import Sandbox
from e2b.exceptions import NotFoundException, SandboxException
from e2b.sandbox.commands.command_handle import CommandExitException


@pytest.fixture
def sandbox(provider: str) -> Sandbox:
    sbx = Sandbox.create(timeout=300, metadata={"suite": "e2b", "provider": provider})
    yield sbx
    sbx.kill()


def test_create_info_list_timeout_and_kill(provider: str) -> None:
    sbx = Sandbox.create(timeout=120, metadata={"case": "lifecycle"}, envs={"GREETING": "hi"})
    assert sbx.sandbox_id.startswith("sb-")
    info = sbx.get_info()
    assert info.state.value == "running"
    assert info.metadata == {"case": "lifecycle"}
    assert info.template_id == "base"
    assert sbx.commands.run("echo $GREETING").stdout == "hi\n"
    before = info.end_at
    sbx.set_timeout(600)
    assert sbx.get_info().end_at > before
    listed = Sandbox.list(query=None).next_items()
    assert sbx.sandbox_id in [s.sandbox_id for s in listed]
    from e2b import SandboxQuery

    by_metadata = Sandbox.list(query=SandboxQuery(metadata={"case": "lifecycle"})).next_items()
    assert [s.sandbox_id for s in by_metadata] == [sbx.sandbox_id]
    assert Sandbox.list(query=SandboxQuery(metadata={"case": "other"})).next_items() == []
    assert sbx.is_running()
    metrics = sbx.get_metrics()
    assert len(metrics) == 1 and metrics[0].cpu_count >= 1 and metrics[0].mem_total > 0
    assert sbx.kill() is True
    assert Sandbox.kill(sbx.sandbox_id) is False  # gone already
    assert sbx.sandbox_id not in [s.sandbox_id for s in Sandbox.list().next_items()]


def test_commands_foreground_callbacks_and_exit_codes(sandbox: Sandbox) -> None:
    result = sandbox.commands.run("echo out; echo err >&2")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 0)
    # "b" waits for a gate file that is made only once "a" has arrived: so "a" must have been
    # streamed while the command still ran (it cannot end before the gate exists)
    gate = f"/tmp/gate-{uuid.uuid4().hex}"
    chunks: list[str] = []

    def on_stdout(text: str) -> None:
        chunks.append(text)
        if "<gate>" not in chunks and "a\n" in "".join(chunks):
            chunks.append("<gate>")
            sandbox.commands.run(f"touch {gate}")

    sandbox.commands.run(
        f"echo a; while [ ! -e {gate} ]; do sleep 0.05; done; rm -f {gate}; echo b", on_stdout=on_stdout
    )
    assert "<gate>" in chunks, f"output was not streamed: {chunks}"
    at = chunks.index("<gate>")
    assert ("".join(chunks[:at]), "".join(chunks[at + 1 :])) == ("a\n", "b\n"), f"output was not streamed: {chunks}"
    with pytest.raises(CommandExitException) as failed:
        sandbox.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stdout == "partial\n"
    sandbox.files.make_dir("/work")
    # (a mock sandbox is a directory of the host: its pwd is that directory's host path)
    assert sandbox.commands.run("pwd", cwd="/work").stdout.endswith("/work\n")
    assert sandbox.commands.run("echo $A", envs={"A": "from-envs"}).stdout == "from-envs\n"


def test_background_connect_stdin_list_and_kill(sandbox: Sandbox) -> None:
    # the command waits for stdin, so it still runs when connect finds it
    handle = sandbox.commands.run("read line; echo done", background=True, stdin=True)
    attached = sandbox.commands.connect(handle.pid)
    sandbox.commands.send_stdin(handle.pid, "go\n")
    result = attached.wait()
    assert result.stdout == "done\n" and result.exit_code == 0

    reader = sandbox.commands.run("read line; echo got:$line", background=True, stdin=True)
    sandbox.commands.send_stdin(reader.pid, "piped\n")
    assert reader.wait().stdout == "got:piped\n"

    sleeper = sandbox.commands.run("sleep 600", background=True)
    assert sleeper.pid in [p.pid for p in sandbox.commands.list()]
    assert sandbox.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException):
        sleeper.wait()
    assert sleeper.pid not in [p.pid for p in sandbox.commands.list()]
    assert sandbox.commands.kill(sleeper.pid) is False  # not running any more


def test_files(sandbox: Sandbox) -> None:
    info = sandbox.files.write("/tmp/e2b/hello.txt", "hello from e2b\n")
    assert info.path == "/tmp/e2b/hello.txt" and info.name == "hello.txt"
    assert sandbox.files.read("/tmp/e2b/hello.txt") == "hello from e2b\n"
    assert sandbox.files.read("/tmp/e2b/hello.txt", format="bytes") == b"hello from e2b\n"
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    sandbox.files.write("/tmp/e2b/blob.bin", payload)
    assert sandbox.files.read("/tmp/e2b/blob.bin", format="bytes") == payload
    sandbox.files.write_files([{"path": "/tmp/e2b/m/a.txt", "data": "a"}, {"path": "/tmp/e2b/m/b.txt", "data": "b"}])
    names = sorted(e.name for e in sandbox.files.list("/tmp/e2b"))
    assert names == ["blob.bin", "hello.txt", "m"]
    deep = sorted(e.path for e in sandbox.files.list("/tmp/e2b", depth=2))
    assert "/tmp/e2b/m/a.txt" in deep and "/tmp/e2b/m" in deep
    assert sandbox.files.exists("/tmp/e2b/hello.txt")
    assert not sandbox.files.exists("/tmp/e2b/missing.txt")
    renamed = sandbox.files.rename("/tmp/e2b/hello.txt", "/tmp/e2b/renamed.txt")
    assert renamed.path == "/tmp/e2b/renamed.txt" and renamed.type.value == "file"
    assert not sandbox.files.exists("/tmp/e2b/hello.txt")
    assert sandbox.files.make_dir("/tmp/e2b/new/deeper") is True
    assert sandbox.files.make_dir("/tmp/e2b/new/deeper") is False  # exists
    assert sandbox.files.get_info("/tmp/e2b/new/deeper").type.value == "dir"
    sandbox.files.remove("/tmp/e2b/renamed.txt")
    assert not sandbox.files.exists("/tmp/e2b/renamed.txt")
    # What the SDK wrote, the sandbox's own commands see.
    # (relative to /: a mock sandbox's commands see the host's absolute paths)
    assert sandbox.commands.run("cat tmp/e2b/m/a.txt tmp/e2b/m/b.txt", cwd="/").stdout == "ab"
    from e2b.exceptions import FileNotFoundException

    with pytest.raises(FileNotFoundException):
        sandbox.files.read("/tmp/e2b/missing.txt")


def test_pause_and_resume(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/state.txt", "kept")
    assert sandbox.pause() is True
    assert sandbox.get_info().state.value == "paused"
    assert Sandbox.list(query=None).next_items()[0].state.value in ("running", "paused")
    assert sandbox.pause() is False  # already paused
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.get_info().state.value == "running"
    assert resumed.files.read("/tmp/state.txt") == "kept"
    assert resumed.commands.run("echo back").stdout == "back\n"


def test_unknown_sandboxes_raise_the_sdks_errors(provider: str) -> None:
    unknown = "sb-0000000000000000"
    with pytest.raises(NotFoundException):
        Sandbox.connect(unknown)
    with pytest.raises(NotFoundException):
        Sandbox.get_info(unknown)
    assert Sandbox.kill(unknown) is False
    with pytest.raises(SandboxException):
        Sandbox.set_timeout(unknown, 60)


def test_watch_dir_polled_and_streamed(sandbox: Sandbox) -> None:
    import asyncio

    from e2b import AsyncSandbox
    from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

    sandbox.files.make_dir("/tmp/watched")
    sandbox.files.write("/tmp/watched/before.txt", "x")
    # The sync SDK polls a watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher).
    handle = sandbox.files.watch_dir("/tmp/watched")
    sandbox.files.write("/tmp/watched/new.txt", "new")
    sandbox.files.remove("/tmp/watched/before.txt")
    seen: set[tuple[str, FilesystemEventType]] = set()
    deadline = time.monotonic() + 10
    while {("new.txt", FilesystemEventType.CREATE), ("before.txt", FilesystemEventType.REMOVE)} - seen:
        assert time.monotonic() < deadline, f"events seen: {seen}"
        seen |= {(e.name, e.type) for e in handle.get_new_events()}
        time.sleep(0.2)
    handle.stop()

    # The async SDK streams them (WatchDir).
    async def streamed() -> set[tuple[str, FilesystemEventType]]:
        events: set[tuple[str, FilesystemEventType]] = set()
        arrived = asyncio.Event()

        def on_event(event: object) -> None:
            events.add((event.name, event.type))  # type: ignore[attr-defined]
            if ("sub/deep.txt", FilesystemEventType.CREATE) in events:
                arrived.set()

        async_sandbox = await AsyncSandbox.connect(sandbox.sandbox_id)
        watch = await async_sandbox.files.watch_dir("/tmp/watched", on_event=on_event, recursive=True)
        await async_sandbox.files.write("/tmp/watched/sub/deep.txt", "deep")
        try:
            await asyncio.wait_for(arrived.wait(), 10)
        finally:
            await watch.stop()
        return events

    assert ("sub/deep.txt", FilesystemEventType.CREATE) in asyncio.run(streamed())


def test_pty_and_streamed_uploads(sandbox: Sandbox) -> None:
    import io
    import threading

    from e2b.sandbox.commands.command_handle import PtySize

    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    output = bytearray()
    done = threading.Event()

    def on_pty(data: bytes) -> None:
        output.extend(data)
        if b"pty-3" in output:
            done.set()

    def read() -> None:
        try:
            terminal.wait(on_pty=on_pty)
        except Exception:  # the kill below ends it with a non-zero code
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sandbox.pty.resize(terminal.pid, PtySize(rows=40, cols=120))
    sandbox.pty.send_stdin(terminal.pid, b"echo pty-$((1+2))\n")
    assert done.wait(15), f"terminal output: {bytes(output)!r}"
    assert sandbox.pty.kill(terminal.pid) is True
    reader.join(15)

    # A file object goes up as one raw body (envd >= 0.5.7), streamed.
    payload = b"streamed " * 50_000
    sandbox.files.write("/tmp/streamed.bin", io.BytesIO(payload))
    assert sandbox.files.read("/tmp/streamed.bin", format="bytes") == payload
