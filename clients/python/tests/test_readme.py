"""The README's example runs as written (against the test server, via SVC_URL)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import Server

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs(server: Server, provider: str) -> None:
    text = README.read_text()
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, "README has no python example"
    code = match.group(1)
    assert len(code.strip().splitlines()) <= 12
    env = dict(os.environ, SVC_URL=server.url)
    if provider == "docker":
        code = code.replace("Sandbox.create()", 'Sandbox.create(provider="docker", image="svc-test-busybox:latest")')
    else:
        code = code.replace("Sandbox.create()", 'Sandbox.create(provider="mock")')
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "hi" in proc.stdout


def test_repository_readme_example_runs(server: Server) -> None:
    """The repository README's Python example (on the mock provider) runs as written too."""
    text = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    match = re.search(r"### From Python.*?```python\n(.*?)```", text, re.S)
    assert match, "the repository README has no python example"
    code = match.group(1)
    assert len(code.strip().splitlines()) <= 12
    env = dict(os.environ, SVC_URL=server.url)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["hi", "1", "2", "3", "0", "hello"], proc.stdout
