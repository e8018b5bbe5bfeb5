"""One `svc serve` with the E2B listener per provider (mock, and docker with the busybox test
image as its default image); the E2B SDK reaches it through E2B_API_URL and E2B_SANDBOX_URL,
as a user would set them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

DEFAULT_BIN = str(Path(__file__).resolve().parents[3] / "target" / "debug" / "svc")
DOCKER_IMAGE = os.environ.get("SVC_TEST_DOCKER_IMAGE", "svc-test-busybox:latest")
REQUIRE_DOCKER = os.environ.get("SVC_TEST_REQUIRE_DOCKER") == "1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def docker_problem() -> str | None:
    sock = "/var/run/docker.sock"
    if not os.path.exists(sock):
        return f"no Docker socket at {sock}"
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=3.0) as c:
            if c.get("http://docker/_ping").status_code != 200:
                return "Docker does not answer /_ping"
            if c.get(f"http://docker/images/{DOCKER_IMAGE}/json").status_code != 200:
                return f"Docker test image {DOCKER_IMAGE} is missing (see scripts/docker-test-env.sh)"
    except httpx.HTTPError as exc:
        return f"Docker does not answer: {exc}"
    return None


@pytest.fixture(scope="session", params=["mock", "docker"])
def provider(request: pytest.FixtureRequest) -> Iterator[str]:
    name = str(request.param)
    if name == "docker":
        problem = docker_problem()
        if problem is not None:
            reason = f"DOCKER CASES NOT RUN: {problem}"
            if REQUIRE_DOCKER:
                pytest.fail(f"{reason} (SVC_TEST_REQUIRE_DOCKER=1)", pytrace=False)
            print(f"\n*** {reason} ***", file=sys.stderr)
            pytest.skip(reason)
    binary = os.environ.get("SVC_BIN", DEFAULT_BIN)
    workdir = Path(tempfile.mkdtemp(prefix=f"svc-e2b-{name}-"))
    port, e2b_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "E2B_")) or k == "SVC_BIN"}
    env.update(
        {
            "SVC_SERVER__PORT": str(port),
            # Its own egress proxy port: servers of other suites run at the same time.
            "SVC_PROVIDERS__DOCKER__EGRESS_PROXY_PORT": str(_free_port()),
            "SVC_E2B__ENABLED": "true",
            "SVC_E2B__PORT": str(e2b_port),
            "SVC_PROVIDERS__MOCK__ROOT_DIR": str(workdir / "mock"),
        }
    )
    if name == "docker":
        env["SVC_PROVIDERS__DEFAULT"] = "docker"
        env["SVC_DEFAULTS__IMAGE"] = DOCKER_IMAGE
    else:
        env["SVC_PROVIDERS__DOCKER__ENABLED"] = "false"
    log_path = workdir / "server.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([binary, "serve"], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{e2b_port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"svc serve exited: {log_path.read_text(errors='replace')}", pytrace=False)
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1.0)
            httpx.get(url + "/health", timeout=1.0)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("svc serve did not answer within 60 s", pytrace=False)
            time.sleep(0.05)
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")}
    os.environ.update({"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": "e2b-compat-suite"})
    try:
        yield name
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        # svc leaves sandboxes running across its restarts: the suite ends what it made.
        api = f"http://127.0.0.1:{port}/api/v1"
        for sandbox in httpx.get(api + "/sandboxes", timeout=10).json():
            httpx.delete(f"{api}/sandboxes/{sandbox['id']}", timeout=30)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        if proc.returncode not in (0, -signal.SIGTERM):
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)
