"""The benchmark script (bench/bench.py) still runs: a tiny run of each server setup prints
both rows with a ratio and, in its default setup, stops the server process it started.

Nothing here looks at the figures themselves (tests never assert on speed); the benchmark
prints them.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from mqstate.testing import LocalServer

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench" / "bench.py"
TINY = ["--rounds", "1", "--sync-ops", "50", "--async-ops", "200", "--depth", "8"]
# A result row: the workload, Python's and Rust's ops/s, their ratio.
ROW = re.compile(
    r"^(blocking get, 1 in flight|asyncio get, 8 in flight)\s+[\d,]+\s+[\d,]+\s+\d+\.\d\d$"
)


def run_bench(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH), *TINY, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if ROW.match(line)]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="--cpu reads /proc (Linux)")
def test_the_default_runs_the_server_in_a_child_process_and_stops_it() -> None:
    output = run_bench("--cpu")
    header = re.search(r"\(in child process (\d+)\)", output)
    assert header, output
    assert len(rows(output)) == 2, output
    # Each round's ratios, printed as the round ends.
    round_line = r"^round 1: blocking \d+\.\d\d \(.*\), asyncio \d+\.\d\d \("
    assert re.search(round_line, output, re.M), output
    # Three CPU columns (loop's thread, other threads, the server's process) and their sum.
    cpu_rows = [line for line in output.splitlines() if line.startswith("  Python asyncio")]
    assert len(cpu_rows) == 1 and cpu_rows[0].count("+") == 2, output
    # The benchmark waited for its child: the pid is gone, or already another process's.
    pid = int(header.group(1))
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert b"mqstate.testing" not in f.read(), "the server's process outlived the benchmark"
    except FileNotFoundError:
        pass


def test_the_in_process_setup_runs() -> None:
    output = run_bench("--in-process")
    assert "(in this process)" in output
    assert len(rows(output)) == 2, output


def test_the_url_setup_runs(server: LocalServer) -> None:
    output = run_bench("--url", server.url)
    assert "(given by --url)" in output
    assert len(rows(output)) == 2, output


def test_url_and_in_process_exclude_each_other() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--url", "mqtt://127.0.0.1:1", "--in-process"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--url and --in-process exclude each other" in done.stderr
