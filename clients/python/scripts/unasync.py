#!/usr/bin/env python3
"""Generates ``svc_sdk/_sync/client.py`` from ``svc_sdk/_async/client.py``.

Usage: ``python scripts/unasync.py`` (writes) or ``python scripts/unasync.py --check`` (exit 1
when the generated file is stale; ``tests/test_unasync.py`` runs this check).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "svc_sdk"
SOURCE = ROOT / "_async" / "client.py"
TARGET = ROOT / "_sync" / "client.py"

# applied in order; word-boundary regexes
RULES: list[tuple[str, str]] = [
    (r'"""The asyncio client\. ``svc_sdk/_sync/client\.py`` is generated from this file by\n``scripts/unasync\.py`` \(edit this one, then run the script; a test checks they agree\)\."""',
     '"""The blocking client. GENERATED from ``svc_sdk/_async/client.py`` by\n``scripts/unasync.py``: do not edit; edit the async file and rerun the script."""'),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncIterable\b", "Iterable"),
    (r"\baiter_lines\b", "iter_lines"),
    (r"\baiter_bytes\b", "iter_bytes"),
    (r"\baread\b", "read"),
    (r"\baclose\b", "close"),
    (r"\b_async_compat\b", "_sync_compat"),
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"\basync_", "sync_"),
]


def generate(source: str) -> str:
    out = source
    for pattern, replacement in RULES:
        out = re.sub(pattern, replacement, out)
    # "from collections.abc import Iterator, Callable, Iterable" may now list a name twice
    out = re.sub(
        r"^from collections\.abc import (.+)$",
        lambda m: "from collections.abc import "
        + ", ".join(sorted(dict.fromkeys(n.strip() for n in m.group(1).split(",")))),
        out,
        count=1,
        flags=re.MULTILINE,
    )
    return out


def main(argv: list[str]) -> int:
    generated = generate(SOURCE.read_text())
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text() != generated:
            print(f"{TARGET} is stale: run python scripts/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(generated)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
