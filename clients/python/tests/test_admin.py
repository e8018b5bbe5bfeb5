"""Templates, quotas and events."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from svc_sdk import ConflictError, NotFoundError, Sandbox, SvcClient, SvcTimeoutError


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_templates(client: SvcClient, provider: str, image: str | None) -> None:
    name = _name("tpl")
    created = client.templates.create(
        name, provider=provider, image=image, ttl="15m", memory_mb=256, metadata={"team": "sdk"}
    )
    try:
        assert created.name == name and created.provider == provider
        assert created.ttl == "15m0s" and created.memory_mb == 256
        assert client.templates.get(name) == created
        assert name in [t.name for t in client.templates.list()]
        with pytest.raises(ConflictError) as err:
            client.templates.create(name, provider=provider, image=image)
        assert err.value.code == "conflict"

        updated = client.templates.update(
            name, provider=provider, image=image, ttl="20m", metadata={"v": "2"}, warm_pool=1
        )
        assert updated.ttl == "20m0s" and updated.metadata == {"v": "2"} and updated.warm_pool == 1
        deadline = time.monotonic() + 30
        while client.templates.get(name).warm_ready < 1:
            assert time.monotonic() < deadline, "the warm pool never filled"
            time.sleep(0.05)

        spawned = client.templates.spawn(name, ttl="5m", env={"FROM": "warm"}, metadata={"req": "1"})
        try:
            assert spawned.info.template == name and spawned.info.provider == provider
            assert spawned.info.metadata == {"v": "2", "req": "1"}
            assert spawned.commands.run("echo $FROM").stdout == "warm\n"
        finally:
            spawned.destroy()

        with Sandbox.create(template=name, client=client) as sb:
            assert sb.info.template == name and sb.info.provider == provider
    finally:
        client.templates.delete(name)
    with pytest.raises(NotFoundError):
        client.templates.get(name)


def test_quotas(client: SvcClient, spawn_args: dict[str, Any]) -> None:
    owner = _name("owner")
    with pytest.raises(NotFoundError):
        client.quotas.get(owner)
    usage = client.quotas.usage(owner)
    assert not usage.quota_configured and usage.active_sandboxes == 0

    q = client.quotas.set(owner, max_sandboxes=1, max_ttl="1h", max_exec_timeout=120)
    assert (q.owner_id, q.max_sandboxes, q.max_ttl, q.max_exec_timeout) == (owner, 1, "1h0m0s", "2m0s")
    assert client.quotas.get(owner) == q
    assert owner in [x.owner_id for x in client.quotas.list()]
    summary = client.quotas.summary()
    assert summary.total >= 1 and summary.with_max_sandboxes >= 1

    sb = Sandbox.create(client=client, owner_id=owner, **spawn_args)
    try:
        usage = client.quotas.usage(owner)
        assert usage.quota_configured and usage.active_sandboxes == 1 and usage.max_sandboxes == 1
        decision = client.admission(owner_id=owner, **spawn_args)
        assert not decision.allowed and decision.reason == "max_owner_sandboxes"
        from svc_sdk import ResourceLimitError

        with pytest.raises(ResourceLimitError):
            Sandbox.create(client=client, owner_id=owner, **spawn_args)
    finally:
        sb.destroy()
    client.quotas.delete(owner)
    with pytest.raises(NotFoundError):
        client.quotas.get(owner)


def test_events_see_sandbox_created(client: SvcClient, spawn_args: dict[str, Any]) -> None:
    with client.events(types=["sandbox.created", "sandbox.destroyed"]) as events:
        sb = Sandbox.create(client=client, **spawn_args)
        sb.destroy()
        created = events.wait_for(lambda e: e.sandbox_id == sb.id, timeout=60)
        assert created.type == "sandbox.created"
        assert created.data is not None and created.data["provider"] == spawn_args["provider"]
        assert created.id and created.timestamp
        destroyed = events.wait_for(lambda e: e.sandbox_id == sb.id, timeout=60)
        assert destroyed.type == "sandbox.destroyed"
        assert events.last_event_id == destroyed.id


def test_sandbox_events_and_resume(client: SvcClient, sandbox: Sandbox) -> None:
    with sandbox.events(types=["exec.completed"]) as events:
        sandbox.commands.run("echo one")
        first = events.next(timeout=15)
        assert first.type == "exec.completed" and first.sandbox_id == sandbox.id
        with pytest.raises(SvcTimeoutError):
            events.next(timeout=0.3)
        sandbox.commands.run("echo two")
        second = events.next(timeout=15)  # the pending read after a timeout still delivers
        assert second.id != first.id
    # replay history after an event ID
    with client.events(sandbox_id=sandbox.id, types=["exec.completed"], last_event_id=first.id) as replay:
        assert replay.next(timeout=15).id == second.id


def test_iterate_events(client: SvcClient, sandbox: Sandbox) -> None:
    with sandbox.events(types=["file.written"]) as events:
        sandbox.files.write("/ev.txt", "x")
        for event in events:
            assert event.type == "file.written"
            assert event.data is not None and event.data["path"] == "/ev.txt"
            break
