"""The blocking client is generated from the async one; it must be up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_sync_client_is_generated_from_async() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "unasync.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
