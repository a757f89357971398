"""Micro-benchmark: Python `get` throughput next to the Rust client's, same process, same server.

    python python/bench/bench.py [--rounds 3] [--sync-ops 20000] [--async-ops 100000]

Starts one local state store in a child process (as the Node benchmark does; ``--in-process``
runs it in this process instead, ``--url`` uses an existing one), stores a 16-byte value,
then for each round measures, one after the other:

- blocking: ``Client.get`` in a Python loop (1 request in flight) and the same workload in
  pure Rust (``_native._bench_rust_blocking_get(url, n)``: ``mqstate::blocking::Client``, the
  facade a blocking Python call goes through too, called in a loop on this thread);
- asyncio: 64 asyncio tasks awaiting ``AsyncClient.get`` in a loop (64 in flight) and the
  Rust client with 64 tasks (``depth=64``).

It prints each round's Python / Rust ratios as the round ends, then the median of the rounds
for each workload and Python / Rust as a ratio. With ``--cpu``
(Linux) it also prints the CPU time each workload used per request, split into this thread
(the event loop's, for the asyncio rows), this process's other threads (the library's
runtime workers, which with ``--in-process`` also run the server and its broker) and the
server's child process. Build the module with `maturin develop --release` first: a debug
build measures the debug build.

Why the server is in another process by default: in-process, the server and its broker run
on the same two runtime workers as the client, so on a small machine the loop's thread
competes with the server for the cores and the figure measures that contention as much as
the binding (see python/README.md, "Benchmark").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import mqstate
from mqstate._native import _bench_rust_blocking_get, _bench_rust_get
from mqstate.testing import LocalServer

KEY = "mqstate-bench"
VALUE = b"0123456789abcdef"


def _stat_seconds(path: str) -> float:
    """User + system CPU seconds of a /proc stat file (fields 14 and 15)."""
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(server_pid: int | None) -> tuple[float, float, float]:
    """CPU time used so far by this thread, by this process's other threads and by the
    server's process (0 when it is not a child of this benchmark)."""
    # The process's own figure includes the threads that have ended (a blocking client's
    # runtime, for example), which summing /proc/self/task would lose.
    mine = _stat_seconds(f"/proc/self/task/{threading.get_native_id()}/stat")
    process = _stat_seconds("/proc/self/stat")
    server = _stat_seconds(f"/proc/{server_pid}/stat") if server_pid else 0.0
    return mine, process - mine, server


def measured(
    run: Callable[[], float],
    n: int,
    cpu: list[tuple[float, ...]] | None,
    server_pid: int | None,
) -> float:
    """Runs a workload of `n` requests. With `cpu` (--cpu), also appends its CPU µs per
    request (this thread, the others, the server's process); without it, /proc is not read
    (it is Linux only)."""
    if cpu is None:
        return run()
    before = _cpu_seconds(server_pid)
    rate = run()
    after = _cpu_seconds(server_pid)
    cpu.append(tuple((a - b) * 1e6 / n for a, b in zip(after, before)))
    return rate


class ChildServer:
    """A LocalServer in a child process (``python -m mqstate.testing`` with this interpreter,
    so this mqstate), which prints its URL and stops when its stdin closes (`stop`).

    Its runtime has two worker threads (the library's default is one): with one, the server
    would be the first to use up a core, and both rows would then measure the server."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mqstate.testing"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "MQSTATE_WORKER_THREADS": "2"},
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url:
            self.stop()
            raise RuntimeError("the benchmark's server process did not start")

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()  # it did not stop when asked: do not leave it running
            self.process.wait()
            raise


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
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the local server in this process (default: in a child process)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sync-ops", type=int, default=20_000)
    parser.add_argument("--async-ops", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=64)
    parser.add_argument("--cpu", action="store_true", help="also print CPU µs per request")
    args = parser.parse_args()

    if args.url and args.in_process:
        parser.error("--url and --in-process exclude each other")
    server: LocalServer | ChildServer | None = None
    where = "given by --url"
    if args.in_process:
        server, where = LocalServer(), "in this process"
    elif not args.url:
        server = ChildServer()
        where = f"in child process {server.process.pid}"
    url = args.url or (server.url if server else "")
    server_pid = server.process.pid if isinstance(server, ChildServer) else None
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
        cpu: dict[str, list[tuple[float, ...]]] = {k: [] for k in workloads}
        for i in range(args.rounds):
            for name, (n, run) in workloads.items():
                results[name].append(
                    measured(run, n, cpu[name] if args.cpu else None, server_pid)
                )
            # Each round as it ends, as Node's bench does: the spread of the rounds shows how
            # much the machine's speed moved during the run.
            r = {k: v[-1] for k, v in results.items()}
            print(
                f"round {i + 1}: blocking {r['py1'] / r['rs1']:.2f}"
                f" ({r['py1']:,.0f} / {r['rs1']:,.0f} ops/s),"
                f" asyncio {r['pyN'] / r['rsN']:.2f} ({r['pyN']:,.0f} / {r['rsN']:,.0f} ops/s)",
                flush=True,
            )
    finally:
        if server:
            server.stop()

    med = {k: statistics.median(v) for k, v in results.items()}
    print(
        f"mqstate {mqstate.__version__}, server {url} ({where}),"
        f" median of {args.rounds} rounds"
    )
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
        # The server's column only when it is this benchmark's child (otherwise its CPU is
        # in the other threads' column, or not measured at all).
        columns = 3 if server_pid else 2
        print(
            f"CPU µs per request, median of {args.rounds} rounds: this thread + this"
            " process's other threads" + (" + the server's child process" if server_pid else "")
        )
        names = (
            ("py1", "Python blocking"),
            ("rs1", "Rust blocking"),
            ("pyN", "Python asyncio"),
            ("rsN", "Rust async"),
        )
        for key, name in names:
            parts = [statistics.median(c[i] for c in cpu[key]) for i in range(columns)]
            cells = " +".join(f"{p:>7.1f}" for p in parts)
            print(f"  {name:<16}{cells} = {sum(parts):>6.1f}")


if __name__ == "__main__":
    main()
