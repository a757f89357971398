"""Micro-benchmark: Python `get` throughput next to the Rust client's, same process, same server.

    python python/bench/bench.py [--rounds 3] [--sync-ops 20000] [--async-ops 100000]

Starts one local state store in this process (or uses --url), stores a 16-byte value, then
for each round measures, one after the other:

- blocking: ``Client.get`` in a Python loop (1 request in flight) and the same workload in
  pure Rust (``_native._bench_rust_blocking_get(url, n)``: ``mqstate::blocking::Client``, the
  facade a blocking Python call goes through too, called in a loop on this thread);
- asyncio: 64 asyncio tasks awaiting ``AsyncClient.get`` in a loop (64 in flight) and the
  Rust client with 64 tasks (``depth=64``).

It prints the median of the rounds for each, and Python / Rust as a ratio. Build the module
with `maturin develop --release` first: a debug build measures the debug build.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import mqstate
from mqstate._native import _bench_rust_blocking_get, _bench_rust_get
from mqstate.testing import LocalServer

KEY = "mqstate-bench"
VALUE = b"0123456789abcdef"


def python_blocking(url: str, n: int) -> float:
    with mqstate.Client(url) as client:
        for _ in range(200):  # warm-up, as the Rust side does
            client.get(KEY)
        get = client.get
        start = time.perf_counter()
        for _ in range(n):
            get(KEY)
        elapsed = time.perf_counter() - start
    return n / elapsed


async def _python_async(url: str, n: int, depth: int) -> float:
    async with mqstate.AsyncClient.connect(url) as client:
        for _ in range(200):
            await client.get(KEY)
        per_task = -(-n // depth)
        get = client.get

        async def worker() -> None:
            for _ in range(per_task):
                await get(KEY)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(depth)))
        elapsed = time.perf_counter() - start
    return per_task * depth / elapsed


def python_async(url: str, n: int, depth: int) -> float:
    return asyncio.run(_python_async(url, n, depth))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an existing state store (default: a local one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sync-ops", type=int, default=20_000)
    parser.add_argument("--async-ops", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=64)
    args = parser.parse_args()

    server = None if args.url else LocalServer()
    url = args.url or (server.url if server else "")
    try:
        with mqstate.Client(url) as c:
            c.set(KEY, VALUE)
        results: dict[str, list[float]] = {k: [] for k in ("py1", "rs1", "pyN", "rsN")}
        for _ in range(args.rounds):
            results["rs1"].append(_bench_rust_blocking_get(url, args.sync_ops, KEY))
            results["py1"].append(python_blocking(url, args.sync_ops))
            results["rsN"].append(_bench_rust_get(url, args.async_ops, args.depth, KEY))
            results["pyN"].append(python_async(url, args.async_ops, args.depth))
    finally:
        if server:
            server.stop()

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"mqstate {mqstate.__version__}, server {url}, median of {args.rounds} rounds")
    print(f"{'workload':<32}{'Python ops/s':>14}{'Rust ops/s':>14}{'Python/Rust':>13}")
    rows = [
        ("blocking get, 1 in flight", med["py1"], med["rs1"]),
        (f"asyncio get, {args.depth} in flight", med["pyN"], med["rsN"]),
    ]
    for name, py, rs in rows:
        print(f"{name:<32}{py:>14,.0f}{rs:>14,.0f}{py / rs:>13.2f}")
    print(
        "(Rust: mqstate::blocking::Client for the blocking row, the async Client with the"
        " same depth for the asyncio row)"
    )


if __name__ == "__main__":
    main()
