"""The asyncio flavour: the same calls with ``await`` (anyio's pytest plugin, asyncio backend)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from svc_sdk import (
    AsyncCommandHandle,
    AsyncSandbox,
    AsyncSvcClient,
    ConflictError,
    NotFoundError,
    SvcTimeoutError,
)

pytestmark = pytest.mark.anyio

EXPECTED_LINES = "".join(f"line{i}\n" for i in range(1, 41))


async def test_lifecycle_and_context_manager(aclient: AsyncSvcClient, spawn_args: dict[str, Any], provider: str) -> None:
    async with await AsyncSandbox.create(ttl="5m", metadata={"a": "1"}, **spawn_args) as sb:
        assert sb.info.state == "running" and sb.info.provider == provider
        assert (await AsyncSandbox.get(sb.id)).id == sb.id
        assert sb.id in [s.id for s in await AsyncSandbox.list(provider=provider)]
        other = await AsyncSandbox.connect(sb.id, client=aclient)
        assert (await other.get_info()).metadata == {"a": "1"}
        before = sb.info.expires_at
        assert (await sb.extend("30m")).expires_at > before
        assert await sb.is_running()
        assert isinstance(await sb.logs(), list)
        assert (await sb.stats()).sampled_at
        sid = sb.id
    info = await aclient.get_sandbox(sid)
    assert info.state == "destroyed"
    with pytest.raises(ConflictError):
        await other.commands.run("true")
    with pytest.raises(NotFoundError) as err:
        await AsyncSandbox.get("sb-0000000000000000", client=aclient)
    assert err.value.code == "not_found" and err.value.status == 404


async def test_run_buffered_and_streamed(asandbox: AsyncSandbox) -> None:
    r = await asandbox.commands.run("echo hi; echo oops >&2; exit 2")
    assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "oops\n", 2)
    # "b" waits for a gate file that is made only once "a" has arrived: so "a" must have been
    # streamed while the command still ran (it cannot end before the gate exists)
    gate = f"/tmp/gate-{uuid.uuid4().hex}"
    arrivals: list[str] = []
    opened: list[asyncio.Task[Any]] = []

    def on_stdout(data: str) -> None:
        arrivals.append(data)
        if not opened and "a\n" in "".join(arrivals):
            arrivals.append("<gate>")
            opened.append(asyncio.create_task(asandbox.commands.run(f"touch {gate}")))

    r = await asandbox.commands.run(
        f"echo a; while [ ! -e {gate} ]; do sleep 0.05; done; rm -f {gate}; echo b",
        on_stdout=on_stdout,
        timeout=60,
    )
    assert opened and (await opened[0]).exit_code == 0
    assert r.stdout == "a\nb\n" and r.exit_code == 0
    at = arrivals.index("<gate>")
    assert ("".join(arrivals[:at]), "".join(arrivals[at + 1 :])) == ("a\n", "b\n"), arrivals
    r = await asandbox.commands.run("sleep 5", timeout=0.5)
    assert r.timed_out and r.exit_code == 124


async def test_background_reattach_stdin_kill(asandbox: AsyncSandbox, aclient: AsyncSvcClient) -> None:
    h = await asandbox.commands.run(
        "for i in $(seq 1 40); do echo line$i; sleep 0.02; done", background=True
    )
    assert isinstance(h, AsyncCommandHandle)
    n = 0
    async for _ in h.iter_output():
        n += 1
        if n == 3:
            break
    part = h.stdout
    assert part and EXPECTED_LINES.startswith(part)
    r = await h.wait(timeout=30)
    assert r.stdout == EXPECTED_LINES
    again = await asandbox.commands.connect(h.exec_id, stdout_offset=len(part)).wait(timeout=10)
    assert again.stdout == EXPECTED_LINES[len(part) :]
    assert (await asandbox.commands.get(h.exec_id)).status == "exited"
    assert h.exec_id in [c.exec_id for c in await asandbox.commands.list()]

    cat = await asandbox.commands.run("cat", background=True)
    await cat.send_stdin("in\n")
    await asandbox.commands.send_stdin(cat.exec_id, "put\n")
    await cat.close_stdin()
    assert (await cat.wait(timeout=10)).stdout == "in\nput\n"

    sleeper = await asandbox.commands.run("echo go; sleep 30", background=True)
    async for _ in sleeper.iter_output(timeout=30):
        if "go\n" in sleeper.stdout:
            break
    with pytest.raises(SvcTimeoutError):
        await sleeper.wait(timeout=0.5)
    assert sleeper.stdout == "go\n"
    await sleeper.signal("SIGINT")
    assert (await sleeper.wait(timeout=10)).exit_code == 130
    assert await sleeper.kill() is False

    victim = await asandbox.commands.run("sleep 30", background=True)
    assert await asandbox.commands.kill(victim.exec_id) is True
    await victim.wait(timeout=10)
    assert (await victim.info()).status == "killed"


async def test_pty(asandbox: AsyncSandbox) -> None:
    async with await asandbox.pty.create(cols=90, rows=20) as pty:
        assert pty.exec_id and pty.exec_id.startswith("ex-")
        await pty.send_stdin("echo async-$((6*7))\n")
        await pty.read_until("async-42", timeout=15)
        await pty.resize(100, 50)
        await pty.send_stdin("stty size; exit 3\n")
        assert await pty.wait(timeout=15) == 3
        assert "50 100" in pty.output
    plain = await asandbox.pty.create("cat", tty=False)
    try:
        await plain.send_stdin("z\n", eof=True)
        chunks = [c async for c in plain.iter_output(timeout=15)]
        assert "".join(c.data for c in chunks) == "z\n" and plain.exit_code == 0
    finally:
        await plain.close()
    ghost = AsyncSandbox(dataclasses.replace(asandbox.info, id="sb-0000000000000000"), asandbox.client)
    with pytest.raises(NotFoundError):
        await ghost.pty.create()


async def test_files(asandbox: AsyncSandbox, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 2000
    assert (await asandbox.files.write("/a/blob.bin", io.BytesIO(blob))).size == len(blob)
    assert await asandbox.files.read("/a/blob.bin") == blob
    assert await asandbox.files.read("/a/blob.bin", offset=5, length=3) == blob[5:8]
    out = io.BytesIO()
    assert await asandbox.files.read_to("/a/blob.bin", out) == len(blob) and out.getvalue() == blob
    await asandbox.files.write_text("/a/t.txt", "text")
    assert await asandbox.files.read_text("/a/t.txt") == "text"
    assert [e.name for e in await asandbox.files.list("/a")] == ["blob.bin", "t.txt"]
    assert (await asandbox.files.stat("/a/t.txt")).size == 4
    assert await asandbox.files.glob("/a/*.txt") == ["/a/t.txt"]
    await asandbox.files.move("/a/t.txt", "/b/t.txt")
    assert not await asandbox.files.exists("/a/t.txt") and await asandbox.files.exists("/b/t.txt")
    await asandbox.files.chmod("/b/t.txt", 0o700)
    assert (await asandbox.files.stat("/b/t.txt")).mode == "0700"
    await asandbox.files.make_dir("/c/d")
    await asandbox.files.remove("/b", recursive=True)
    assert not await asandbox.files.exists("/b")

    src = tmp_path / "src"
    (src / "x" / "y").mkdir(parents=True)
    (src / "x" / "y" / "f.bin").write_bytes(blob)
    (src / "g.txt").write_text("g")
    assert (await asandbox.files.upload_dir(src, "/tree")).entries == 4
    arc = io.BytesIO()
    assert await asandbox.files.read_archive("/tree", arc) > 0
    assert (await asandbox.files.write_archive("/tree-copy", arc.getvalue())).entries >= 4
    dst = tmp_path / "dst"
    assert await asandbox.files.download_dir("/tree-copy", dst) == 4
    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    assert digest(dst / "x" / "y" / "f.bin") == digest(src / "x" / "y" / "f.bin")
    assert (dst / "g.txt").read_text() == "g"


async def test_events_templates_quotas(aclient: AsyncSvcClient, spawn_args: dict[str, Any], provider: str, image: str | None) -> None:
    assert (await aclient.health()).status == "ok"
    assert provider in [p.name for p in await aclient.providers()]
    assert (await aclient.provider(provider))["name"] == provider
    assert (await aclient.admission(**spawn_args)).allowed

    name = f"async-tpl-{provider}-{int(time.time() * 1000) % 100000}"
    tpl = await aclient.templates.create(name, provider=provider, image=image, ttl="10m")
    assert (await aclient.templates.get(name)).ttl == tpl.ttl == "10m0s"
    assert name in [t.name for t in await aclient.templates.list()]
    assert (await aclient.templates.update(name, provider=provider, image=image, vcpus=1)).vcpus == 1
    async with aclient.events(types=["sandbox.created"]) as events:
        sb = await aclient.templates.spawn(name)
        try:
            event = await events.wait_for(lambda e: e.sandbox_id == sb.id, timeout=15)
            assert event.type == "sandbox.created"
            async with sb.events(types=["exec.completed"]) as sb_events:
                await sb.commands.run("true")
                async for ev in sb_events:
                    assert ev.sandbox_id == sb.id
                    break
                with pytest.raises(SvcTimeoutError):
                    await sb_events.next(timeout=0.3)
        finally:
            await sb.destroy()
    await aclient.templates.delete(name)
    with pytest.raises(NotFoundError):
        await aclient.templates.get(name)

    owner = f"async-owner-{provider}"
    q = await aclient.quotas.set(owner, max_sandboxes=3, max_ttl="2h")
    assert q.max_ttl == "2h0m0s" and (await aclient.quotas.get(owner)).max_sandboxes == 3
    assert owner in [x.owner_id for x in await aclient.quotas.list()]
    assert (await aclient.quotas.summary()).total >= 1
    assert (await aclient.quotas.usage(owner)).quota_configured
    await aclient.quotas.delete(owner)
    with pytest.raises(NotFoundError):
        await aclient.quotas.get(owner)
    assert await aclient.prune() >= 0
    assert isinstance(await aclient.list_sandboxes(state="all"), list)
    sb2 = await aclient.create_sandbox(**spawn_args)
    assert (await aclient.extend_sandbox(sb2.id, "40m")).id == sb2.id
    await aclient.destroy_sandbox(sb2.id)
