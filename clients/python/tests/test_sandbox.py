"""Sandbox lifecycle: create, connect, get, list, extend, logs, stats, destroy, context manager."""

from __future__ import annotations

import time
from typing import Any

import pytest

from svc_sdk import ConflictError, NotFoundError, Sandbox, SvcClient
from svc_sdk._common import duration_seconds

from .conftest import Server


def test_create_get_list_extend_destroy(client: SvcClient, spawn_args: dict[str, Any], provider: str) -> None:
    sb = Sandbox.create(client=client, ttl="5m", metadata={"suite": "sdk"}, owner_id="sdk-owner", **spawn_args)
    try:
        assert sb.id.startswith("sb-") and len(sb.id) == 19
        assert sb.info.state == "running"
        assert sb.info.provider == provider
        assert sb.info.metadata == {"suite": "sdk"}
        assert sb.info.owner_id == "sdk-owner"
        assert sb.is_running()

        got = Sandbox.get(sb.id, client=client)
        assert got.id == sb.id and got.state == "running"

        listed = Sandbox.list(client=client, provider=provider, owner_id="sdk-owner")
        assert sb.id in [s.id for s in listed]
        assert sb.id not in [s.id for s in Sandbox.list(client=client, owner_id="someone-else")]

        before = sb.info.expires_at
        extended = sb.extend("20m")
        assert extended.expires_at > before
        assert sb.get_info().expires_at == extended.expires_at

        sb.commands.run("echo for-the-log")
        assert isinstance(sb.logs(lines=10), list)
        stats = sb.stats()
        assert stats.memory_bytes >= 0 and stats.sampled_at
    finally:
        sb.destroy()
    after = Sandbox.get(sb.id, client=client)
    assert after.state == "destroyed"
    assert after.state_reason == "destroyed_by_request"
    assert sb.id not in [s.id for s in Sandbox.list(client=client)]
    assert sb.id in [s.id for s in Sandbox.list(client=client, state="destroyed")]
    client.destroy_sandbox(sb.id)  # idempotent


def _uptimes(output: str) -> list[float]:
    """The uptimes of the counter's complete lines."""
    return [float(line) for line in output[: output.rfind("\n") + 1].split()]


def test_pause_and_resume(sandbox: Sandbox) -> None:
    # The counter prints the machine's uptime: while the sandbox is paused it prints nothing, so
    # its output shows a gap at least as long as the pause.
    job = sandbox.commands.run(
        "while true; do read up rest < /proc/uptime; echo $up; sleep 0.05; done", background=True
    )
    deadline = time.monotonic() + 20
    while job.info().stdout_bytes == 0:
        assert time.monotonic() < deadline, "the counter never printed"
        time.sleep(0.05)
    paused = sandbox.pause()
    paused_from = time.monotonic()
    assert paused.state == "paused" and paused.paused_at
    time.sleep(1)
    with pytest.raises(ConflictError):
        sandbox.commands.run("true")
    assert sandbox.pause().state == "paused"  # idempotent
    paused_for = time.monotonic() - paused_from
    resumed = sandbox.resume()
    assert resumed.state == "running" and resumed.paused_at is None
    now = float(sandbox.commands.run("cat /proc/uptime").stdout.split()[0])
    deadline = time.monotonic() + 20
    while not any(up > now for up in _uptimes(job.stdout)):
        assert time.monotonic() < deadline, "the counter did not continue"
        list(job.iter_output(follow=False))
        time.sleep(0.05)
    job.kill()
    ups = _uptimes(job.wait(timeout=30).stdout)
    gap = max(b - a for a, b in zip(ups, ups[1:]))
    assert gap >= paused_for - 0.1, f"a paused sandbox went on printing (longest gap {gap:.2f}s of {paused_for:.2f}s)"


def test_connect_to_existing(client: SvcClient, sandbox: Sandbox) -> None:
    other = Sandbox.connect(sandbox.id)  # own client, SVC_URL from the environment
    try:
        assert other.info == sandbox.get_info()
        assert other.commands.run("echo connected").stdout == "connected\n"
    finally:
        other.close()
    assert sandbox.is_running()  # close() does not destroy


def test_context_manager_destroys(spawn_args: dict[str, Any]) -> None:
    with Sandbox.create(**spawn_args) as sb:  # URL from SVC_URL
        assert sb.commands.run("true").exit_code == 0
        sid = sb.id
    assert Sandbox.get(sid).state == "destroyed"


def test_context_manager_destroys_on_error(client: SvcClient, spawn_args: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError):
        with Sandbox.create(client=client, **spawn_args) as sb:
            sid = sb.id
            raise RuntimeError("boom")
    assert client.get_sandbox(sid).state == "destroyed"


def test_destroyed_sandbox_refuses_work(client: SvcClient, spawn_args: dict[str, Any]) -> None:
    sb = Sandbox.create(client=client, **spawn_args)
    sb.destroy()
    with pytest.raises(ConflictError) as err:
        sb.commands.run("true")
    assert err.value.code == "conflict" and err.value.status == 409
    with pytest.raises(ConflictError):
        sb.files.read("/etc/hostname")


def test_unknown_sandbox_not_found(client: SvcClient, provider: str) -> None:
    with pytest.raises(NotFoundError) as err:
        Sandbox.get("sb-0000000000000000", client=client)
    assert err.value.code == "not_found"
    assert err.value.status == 404
    assert "sb-0000000000000000" in err.value.message
    with pytest.raises(NotFoundError):
        Sandbox.connect("sb-0000000000000000", client=client)


def test_prune_destroys_expired(client: SvcClient, spawn_args: dict[str, Any]) -> None:
    sb = Sandbox.create(client=client, ttl="1s", **spawn_args)
    deadline = time.monotonic() + 10
    pruned = 0
    while time.monotonic() < deadline:
        pruned += client.prune()
        if client.get_sandbox(sb.id).state == "destroyed":
            break
        time.sleep(0.1)
    info = client.get_sandbox(sb.id)
    assert info.state == "destroyed" and info.state_reason == "pruned"
    assert pruned >= 1


def test_health_and_providers(client: SvcClient, server: Server, provider: str) -> None:
    health = client.health()
    assert health.status == "ok" and health.version
    assert duration_seconds(health.uptime) >= 0
    names = {p.name: p for p in client.providers()}
    assert names[provider].healthy
    assert "exec" in names[provider].capabilities
    detail = client.provider(provider)
    assert detail["name"] == provider and detail["healthy"] is True
    with pytest.raises(NotFoundError):
        client.provider("no-such-provider")


def test_admission(client: SvcClient, spawn_args: dict[str, Any]) -> None:
    decision = client.admission(owner_id="admission-owner", **spawn_args)
    assert decision.allowed and decision.reason is None
    assert decision.max_ttl


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_preview_of_a_web_server_in_the_sandbox(server: Server, sandbox: Sandbox, provider: str) -> None:
    import httpx

    # The mock's commands share the host's network, so its port must be free here.
    port = 8080 if provider == "docker" else _free_port()
    sandbox.files.write_text("/www/index.html", "hello from the sandbox\n")
    web = sandbox.commands.run(f"busybox httpd -f -p {port} -h .", cwd="/www", background=True)
    try:
        preview = sandbox.preview(port, ttl="2m")
        host = sandbox.get_host(port)
        assert host == f"{port}-{sandbox.id}.localhost"  # the server's default preview domain
        assert preview.url.startswith(f"http://{host}")
        assert preview.token and preview.expires_at
        assert preview.url_with_token.endswith("svc_preview_token=" + preview.token)

        by_path = f"{server.url}/api/v1/sandboxes/{sandbox.id}/proxy/{port}/index.html"
        deadline = time.monotonic() + 20
        while True:  # httpd binds a moment after the command starts
            r = httpx.get(by_path, params={"svc_preview_token": preview.token})
            if r.status_code != 502 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert r.status_code == 200, r.text
        assert r.text == "hello from the sandbox\n"

        by_host = httpx.get(server.url + "/index.html", headers={"Host": host})
        assert by_host.status_code == 200 and by_host.text == "hello from the sandbox\n"
    finally:
        web.kill()
    with pytest.raises(NotFoundError):
        Sandbox.connect("sb-0000000000000000").preview(port)


def test_egress_is_asked_for_and_shown(client: SvcClient, provider: str, spawn_args: dict[str, Any]) -> None:
    from svc_sdk import BadRequestError

    allow = ["192.0.2.9:9", "*.example.internal"]
    if provider == "mock":  # the mock does not enforce egress: refused, naming the field
        with pytest.raises(BadRequestError, match="egress"):
            Sandbox.create(client=client, egress=allow, **spawn_args)
        with Sandbox.create(client=client, **spawn_args) as sb:
            assert sb.info.egress == {"mode": "all", "allow": []}
        return
    with Sandbox.create(client=client, egress=allow, ttl="5m", **spawn_args) as sb:
        assert sb.info.egress == {"mode": "allowlist", "allow": allow}
        assert Sandbox.get(sb.id, client=client).egress == sb.info.egress
    with Sandbox.create(client=client, egress="none", ttl="5m", **spawn_args) as sb:
        assert sb.info.egress == {"mode": "none", "allow": []}
    tpl = client.templates.create(f"egress-{provider}-{_free_port()}", egress=allow, **{
        k: v for k, v in spawn_args.items() if k in ("image", "provider")
    })
    try:
        assert tpl.egress == {"mode": "allowlist", "allow": allow}
    finally:
        client.templates.delete(tpl.name)


def test_list_follows_every_page(client: SvcClient, provider: str) -> None:
    """The server answers 1000 at a time; the SDK follows X-Next-Cursor to the end."""
    if provider != "mock":
        pytest.skip("paging is the server's, the same on every provider; mock makes 1001 quickly")
    from concurrent.futures import ThreadPoolExecutor

    def make(_: int) -> str:
        return client.create_sandbox(provider="mock", owner_id="sdk-pager", ttl="10m").id

    with ThreadPoolExecutor(8) as pool:
        made = set(pool.map(make, range(1001)))
    try:
        listed = [s.id for s in client.list_sandboxes(owner_id="sdk-pager")]
        assert len(listed) == 1001 and set(listed) == made, "every page, each sandbox once"
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(client.destroy_sandbox, made))
