"""Test fixtures: one real ``svc serve`` per session, every test on the mock and docker providers.

Environment:
- ``SVC_BIN``: the server binary (default: the workspace's ``target/debug/svc``).
- ``SVC_TEST_REQUIRE_DOCKER=1``: docker cases fail (instead of skipping) when Docker does not
  answer or the test image is missing.
- ``SVC_TEST_DOCKER_IMAGE``: the busybox image for docker sandboxes (default
  ``svc-test-busybox:latest``, built by ``scripts/docker-test-env.sh``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from svc_sdk import AsyncSandbox, AsyncSvcClient, Sandbox, SvcClient

# clients/python/tests -> the repository root.
DEFAULT_BIN = str(Path(__file__).resolve().parents[3] / "target" / "debug" / "svc")
DOCKER_IMAGE = os.environ.get("SVC_TEST_DOCKER_IMAGE", "svc-test-busybox:latest")
REQUIRE_DOCKER = os.environ.get("SVC_TEST_REQUIRE_DOCKER") == "1"


def svc_bin() -> str:
    return os.environ.get("SVC_BIN", DEFAULT_BIN)


def _docker_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host[len("unix://") :]
    return "/var/run/docker.sock"


def docker_problem() -> str | None:
    """Why docker cases cannot run here, or None when they can."""
    sock = _docker_socket()
    if not os.path.exists(sock):
        return f"no Docker socket at {sock}"
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=3.0) as c:
            if c.get("http://docker/_ping").status_code != 200:
                return f"Docker at {sock} does not answer /_ping"
            if c.get(f"http://docker/images/{DOCKER_IMAGE}/json").status_code != 200:
                return f"Docker test image {DOCKER_IMAGE} is missing (see scripts/docker-test-env.sh)"
    except httpx.HTTPError as exc:
        return f"Docker at {sock} does not answer: {exc}"
    return None


DOCKER_PROBLEM = docker_problem()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    workdir: Path
    docker: bool
    log_path: Path

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    binary = svc_bin()
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.fail(f"SVC_BIN={binary!r} is not an executable svc binary", pytrace=False)
    workdir = Path(tempfile.mkdtemp(prefix="svc-sdk-tests-"))
    port = _free_port()
    env = dict(os.environ)
    for key in list(env):  # a stray SVC_ config of the caller must not leak in
        if key.startswith("SVC_") and key not in ("SVC_BIN",):
            del env[key]
    env.update(
        {
            "SVC_SERVER__PORT": str(port),
            # Its own egress proxy port: servers of other suites run at the same time.
            "SVC_PROVIDERS__DOCKER__EGRESS_PROXY_PORT": str(_free_port()),
            "SVC_PROVIDERS__MOCK__ROOT_DIR": str(workdir / "mock"),
            "SVC_DEFAULTS__REAP_INTERVAL": "1h",  # prune, not the reaper, ends expired sandboxes here
        }
    )
    use_docker = DOCKER_PROBLEM is None
    if not use_docker:
        env["SVC_PROVIDERS__DOCKER__ENABLED"] = "false"
    log_path = workdir / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([binary, "serve"], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    srv = Server(url=url, workdir=workdir, docker=use_docker, log_path=log_path)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            log.close()
            pytest.fail(f"svc serve exited with {proc.returncode}:\n{srv.log_tail()}", pytrace=False)
        try:
            if httpx.get(url + "/api/v1/health", timeout=1.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            log.close()
            pytest.fail(f"svc serve did not answer /health within 60s:\n{srv.log_tail()}", pytrace=False)
        time.sleep(0.05)
    old_url = os.environ.get("SVC_URL")
    os.environ["SVC_URL"] = url  # the SDK's default, as a user would set it
    try:
        yield srv
    finally:
        if old_url is None:
            os.environ.pop("SVC_URL", None)
        else:
            os.environ["SVC_URL"] = old_url
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if proc.returncode not in (0, -signal.SIGTERM):
            print(f"svc serve ended with {proc.returncode}:\n{srv.log_tail()}", file=sys.stderr)
        if os.environ.get("SVC_TEST_KEEP_TMP") != "1":
            _cleanup(workdir)


def _cleanup(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(params=["mock", "docker"])
def provider(request: pytest.FixtureRequest, server: Server) -> str:
    name = str(request.param)
    if name == "docker" and not server.docker:
        reason = f"DOCKER CASES NOT RUN: {DOCKER_PROBLEM}"
        if REQUIRE_DOCKER:
            pytest.fail(f"{reason} (SVC_TEST_REQUIRE_DOCKER=1)", pytrace=False)
        print(f"\n*** {reason} ***", file=sys.stderr)
        pytest.skip(reason)
    return name


@pytest.fixture
def spawn_args(provider: str) -> dict[str, Any]:
    """Keyword arguments for ``Sandbox.create`` on the case's provider."""
    if provider == "docker":
        return {"provider": "docker", "image": DOCKER_IMAGE}
    return {"provider": "mock"}


@pytest.fixture
def image(provider: str) -> str | None:
    return DOCKER_IMAGE if provider == "docker" else None


@pytest.fixture(scope="session")
def client(server: Server) -> Iterator[SvcClient]:
    with SvcClient(server.url) as c:
        yield c


@pytest.fixture
def sandbox(client: SvcClient, spawn_args: dict[str, Any]) -> Iterator[Sandbox]:
    sb = Sandbox.create(client=client, ttl="10m", **spawn_args)
    try:
        yield sb
    finally:
        client.destroy_sandbox(sb.id)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[AsyncSvcClient]:
    async with AsyncSvcClient(server.url) as c:
        yield c


@pytest.fixture
async def asandbox(aclient: AsyncSvcClient, spawn_args: dict[str, Any]) -> AsyncIterator[AsyncSandbox]:
    sb = await AsyncSandbox.create(client=aclient, ttl="10m", **spawn_args)
    try:
        yield sb
    finally:
        await aclient.destroy_sandbox(sb.id)


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> None:
    """Polls ``predicate`` until it is true (fails the test at the deadline)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if DOCKER_PROBLEM is not None:
        bar = "!" * 78
        terminalreporter.write_line(bar, red=True, bold=True)
        terminalreporter.write_line(f"DOCKER CASES WERE SKIPPED: {DOCKER_PROBLEM}", red=True, bold=True)
        terminalreporter.write_line("set SVC_TEST_REQUIRE_DOCKER=1 to make this a failure", red=True)
        terminalreporter.write_line(bar, red=True, bold=True)
