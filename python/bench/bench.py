"""Micro-benchmark: Python `get` throughput next to the Rust client's, same process, same server.

    python python/bench/bench.py [--rounds 3] [--sync-ops 20000] [--async-ops 100000]

Starts one local state store in this process (or uses --url), stores a 16-byte value, then
for each round measures, one after the other:

- blocking: ``Client.get`` in a Python loop (1 request in flight) and the same workload in
  pure Rust (``_native._bench_rust_blocking_get(url, n)``: ``mqstate::blocking::Client``, the
  facade a blocking Python call goes through too, called in a loop on this thread);
- asyncio: 64 asyncio tasks awaiting ``AsyncClient.get`` in a loop (64 in flight) and the
  Rust client with 64 tasks (``depth=64``).

It prints the median of the rounds for each, and Python / Rust as a ratio. With ``--cpu``
(Linux) it also prints the CPU time each workload used per request, split into this thread
(the event loop's, for the asyncio rows) and the library's runtime workers (which also run
the local server and its broker). Build the module with `maturin develop --release` first: a
debug build measures the debug build.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable

import mqstate
from mqstate._native import _bench_rust_blocking_get, _bench_rust_get
from mqstate.testing import LocalServer

KEY = "mqstate-bench"
VALUE = b"0123456789abcdef"


def _cpu_seconds() -> tuple[float, float]:
    """CPU time (user + system) used so far by this thread and by all the others."""
    tick = os.sysconf("SC_CLK_TCK")
    mine = other = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        used = (int(fields[11]) + int(fields[12])) / tick
        if int(tid) == threading.get_native_id():
            mine += used
        else:
            other += used
    return mine, other


def measured(
    run: Callable[[], float], n: int, cpu: list[tuple[float, float]] | None
) -> float:
    """Runs a workload of `n` requests. With `cpu` (--cpu), also appends its CPU µs per
    request (this thread, the others); without it, /proc is not read (it is Linux only)."""
    if cpu is None:
        return run()
    before = _cpu_seconds()
    rate = run()
    after = _cpu_seconds()
    cpu.append(tuple((a - b) * 1e6 / n for a, b in zip(after, before)))  # type: ignore[arg-type]
    return rate


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
    parser.add_argument("--cpu", action="store_true", help="also print CPU µs per request")
    args = parser.parse_args()

    server = None if args.url else LocalServer()
    url = args.url or (server.url if server else "")
    try:
        with mqstate.Client(url) as c:
            c.set(KEY, VALUE)
        workloads: dict[str, tuple[int, Callable[[], float]]] = {
            "rs1": (args.sync_ops, lambda: _bench_rust_blocking_get(url, args.sync_ops, KEY)),
            "py1": (args.sync_ops, lambda: python_blocking(url, args.sync_ops)),
            "rsN": (args.async_ops, lambda: _bench_rust_get(url, args.async_ops, args.depth, KEY)),
            "pyN": (args.async_ops, lambda: python_async(url, args.async_ops, args.depth)),
        }
        results: dict[str, list[float]] = {k: [] for k in workloads}
        cpu: dict[str, list[tuple[float, float]]] = {k: [] for k in workloads}
        for _ in range(args.rounds):
            for name, (n, run) in workloads.items():
                results[name].append(measured(run, n, cpu[name] if args.cpu else None))
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
    if args.cpu:
        print(f"CPU µs per request, median of {args.rounds} rounds: this thread + runtime workers")
        names = (
            ("py1", "Python blocking"),
            ("rs1", "Rust blocking"),
            ("pyN", "Python asyncio"),
            ("rsN", "Rust async"),
        )
        for key, name in names:
            mine = statistics.median(c[0] for c in cpu[key])
            other = statistics.median(c[1] for c in cpu[key])
            print(f"  {name:<16}{mine:>8.1f} +{other:>7.1f} = {mine + other:>6.1f}")


if __name__ == "__main__":
    main()
