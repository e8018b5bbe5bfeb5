"""Template builds: ``templates.build`` and the calls under it.

Builds run on the server's Docker engine whatever the template's provider, so they are docker
cases (skipped, loudly, without Docker; the templates use the docker provider so that the built
image can be spawned). Each Dockerfile sets a random ``ENV`` so the engine's cache runs every step.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from svc_sdk import (
    AsyncSvcClient,
    BuildError,
    BuildLogLine,
    ConflictError,
    NotFoundError,
    Sandbox,
    SvcClient,
    SvcTimeoutError,
    TemplateBuild,
)

from .conftest import DOCKER_IMAGE

docker_only = pytest.mark.parametrize("provider", ["docker"], indirect=True)


def _nonce() -> str:
    return uuid.uuid4().hex[:12]


def _dockerfile(*lines: str) -> str:
    return "\n".join([f"FROM {DOCKER_IMAGE}", f"ENV X={_nonce()}", *lines]) + "\n"


@pytest.fixture
def template(client: SvcClient, provider: str) -> Iterator[str]:
    name = f"Build-{_nonce()}"  # upper case: the image name is the lowercased template name
    client.templates.create(name, provider="docker", image=DOCKER_IMAGE)
    try:
        yield name
    finally:
        client.templates.delete(name)


@pytest.fixture
async def atemplate(aclient: AsyncSvcClient, provider: str) -> AsyncIterator[str]:
    name = f"abuild-{_nonce()}"
    await aclient.templates.create(name, provider="docker", image=DOCKER_IMAGE)
    try:
        yield name
    finally:
        await aclient.templates.delete(name)


@docker_only
def test_build_from_dockerfile_and_files(client: SvcClient, template: str) -> None:
    content = f"a-{_nonce()}"
    lines: list[BuildLogLine] = []
    record = client.templates.build(
        template,
        _dockerfile("COPY a.txt /a.txt", "RUN cat /a.txt"),
        files={"a.txt": content + "\n"},
        on_log=lines.append,
        timeout=120,
    )
    assert isinstance(record, TemplateBuild) and record.status == "succeeded"
    assert record.build_id.startswith("bd-") and record.template == template and record.ended_at
    assert record.image == f"svc-templates/{template.lower()}:{record.build_id}"
    assert client.templates.get(template).image == record.image
    assert any(ln.type == "step" and ln.instruction == "RUN cat /a.txt" for ln in lines)
    assert any(ln.type == "output" and content in (ln.data or "") for ln in lines)
    assert lines[-1].type == "result" and lines[-1].image == record.image

    assert client.templates.list_builds(template)[0] == record
    assert client.templates.get_build(template, record.build_id) == record
    replay = list(client.templates.build_logs(template, record.build_id, follow=False))
    assert replay == lines
    with Sandbox.create(template=template, client=client) as sb:
        assert sb.commands.run("cat /a.txt").stdout == content + "\n"


@docker_only
def test_build_from_a_context_directory(client: SvcClient, template: str, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("bee\n")
    (tmp_path / "Dockerfile").write_text(_dockerfile("COPY . /ctx", "RUN cat /ctx/sub/b.txt"))
    output: list[str] = []
    record = client.templates.build(
        template, context_dir=tmp_path, on_log=lambda ln: output.append(ln.data or ""), timeout=120
    )
    assert record.status == "succeeded" and "bee\n" in "".join(output)
    # ``dockerfile`` replaces the directory's, ``files`` (bytes here) join the context
    output.clear()
    record = client.templates.build(
        template,
        _dockerfile("COPY . /ctx", "RUN cat /ctx/extra.bin /ctx/sub/b.txt"),
        files={"extra.bin": b"extra\n"},
        context_dir=tmp_path,
        on_log=lambda ln: output.append(ln.data or ""),
        timeout=120,
    )
    assert record.status == "succeeded" and "extra\nbee\n" in "".join(output)
    # the same files as JSON, base64 because one is bytes
    output.clear()
    record = client.templates.build(
        template,
        _dockerfile("COPY . /ctx", "RUN cat /ctx/t.txt /ctx/b.bin"),
        files={"t.txt": "text\n", "b.bin": b"\x00bin\n"},
        on_log=lambda ln: output.append(ln.data or ""),
        timeout=120,
    )
    assert record.status == "succeeded" and "text\n\x00bin\n" in "".join(output)


@docker_only
def test_failed_build_raises(client: SvcClient, template: str) -> None:
    before = client.templates.get(template).image
    with pytest.raises(BuildError) as err:
        client.templates.build(template, _dockerfile("RUN exit 3"), timeout=120)
    assert "step" in str(err.value) and "exit 3" in str(err.value)
    assert err.value.code == "build_failed" and err.value.build.status == "failed"
    assert err.value.build.error and err.value.build.image is None
    assert client.templates.get(template).image == before


@docker_only
def test_cancel_build(client: SvcClient, template: str) -> None:
    started = client.templates.start_build(template, _dockerfile("RUN sleep 30"))
    assert started.status == "running" and started.build_id.startswith("bd-")
    for line in client.templates.build_logs(template, started.build_id):
        if line.type == "step" and line.instruction == "RUN sleep 30":
            break
    cancelled = client.templates.cancel_build(template, started.build_id)
    assert cancelled.status == "cancelled" and cancelled.build_id == started.build_id
    assert client.templates.get_build(template, started.build_id).status == "cancelled"
    with pytest.raises(ConflictError):
        client.templates.cancel_build(template, started.build_id)

    # cancelled from elsewhere while build() follows it: BuildError too, never silence
    cancels: list[TemplateBuild] = []

    def on_log(line: BuildLogLine) -> None:
        if line.type == "step" and line.instruction == "RUN sleep 30":
            build_id = client.templates.list_builds(template)[0].build_id
            cancels.append(client.templates.cancel_build(template, build_id))

    with pytest.raises(BuildError) as err:
        client.templates.build(template, _dockerfile("RUN sleep 30"), on_log=on_log, timeout=120)
    assert err.value.code == "build_cancelled" and err.value.build.status == "cancelled"
    assert [c.status for c in cancels] == ["cancelled"]


def test_unknown_template_or_build(client: SvcClient, provider: str) -> None:
    with pytest.raises(NotFoundError) as err:
        client.templates.build("no-such-template", "FROM scratch\n")
    assert err.value.status == 404
    with pytest.raises(NotFoundError):
        client.templates.list_builds("no-such-template")
    name = f"nobuild-{_nonce()}"
    client.templates.create(name, provider=provider)
    try:
        assert client.templates.list_builds(name) == []
        with pytest.raises(NotFoundError):
            client.templates.get_build(name, "bd-0000000000000000")
        with pytest.raises(NotFoundError):
            client.templates.cancel_build(name, "bd-0000000000000000")
    finally:
        client.templates.delete(name)
    with pytest.raises(ValueError):
        client.templates.start_build(name)  # neither a dockerfile nor a context directory


@docker_only
@pytest.mark.anyio
async def test_async_build_and_timeout(aclient: AsyncSvcClient, atemplate: str) -> None:
    lines: list[BuildLogLine] = []
    record = await aclient.templates.build(
        atemplate, _dockerfile("RUN echo async-built"), on_log=lines.append, timeout=120
    )
    assert record.status == "succeeded"
    assert (await aclient.templates.get(atemplate)).image == record.image
    assert any(ln.type == "output" and ln.data == "async-built\n" for ln in lines)
    assert [ln async for ln in aclient.templates.build_logs(atemplate, record.build_id)] == lines

    # past the deadline the build is cancelled
    with pytest.raises(SvcTimeoutError):
        await aclient.templates.build(atemplate, _dockerfile("RUN sleep 30"), timeout=2)
    latest = (await aclient.templates.list_builds(atemplate))[0]
    assert latest.status == "cancelled"
