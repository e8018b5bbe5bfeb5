"""E2B compatibility benchmark (issue 20): one cycle is create + run `true` + kill, through the
unmodified E2B SDK (against svc's E2B listener) and through svc's own Python SDK (against its
API), alternately, so both see the same machine. Prints per-round medians and the ratio;
target: the E2B path within 10% of svc's own.

Usage: python bench/e2b_vs_svc.py E2B_URL SVC_URL [ROUNDS] [CYCLES] (bench/e2b.sh starts the server)."""

from __future__ import annotations

import os
import statistics
import sys
import time

from e2b import Sandbox as E2bSandbox
from svc_sdk import Sandbox as SvcSandbox
from svc_sdk import SvcClient


def e2b_cycle() -> None:
    sandbox = E2bSandbox.create()
    sandbox.commands.run("true")
    sandbox.kill()


def svc_cycle(client: SvcClient) -> None:
    sandbox = SvcSandbox.create(client=client)
    sandbox.commands.run("true")
    client.destroy_sandbox(sandbox.id)


def timed(cycle, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        begun = time.perf_counter()
        cycle()
        samples.append((time.perf_counter() - begun) * 1000)
    return samples


def main() -> None:
    e2b_url, svc_url = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    cycles = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    os.environ.update({"E2B_API_URL": e2b_url, "E2B_SANDBOX_URL": e2b_url, "E2B_API_KEY": "bench"})
    with SvcClient(svc_url) as client:
        e2b_cycle()  # warm-up: connections, the image, the code paths
        svc_cycle(client)
        ratios = []
        for round_no in range(1, rounds + 1):
            own = statistics.median(timed(lambda: svc_cycle(client), cycles))
            e2b = statistics.median(timed(e2b_cycle, cycles))
            ratios.append(e2b / own)
            print(f"round {round_no}: svc SDK {own:.1f} ms, E2B SDK {e2b:.1f} ms per cycle (median of {cycles}); E2B/svc {e2b / own:.2f}")
        ratio = statistics.median(ratios)
        print(f"median of {rounds} rounds: the E2B path takes {ratio:.2f}x svc's own (target at most 1.10x)")


if __name__ == "__main__":
    main()
