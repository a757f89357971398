"""The library's runtime: its count of worker threads, one by default and
``MQSTATE_WORKER_THREADS`` to change it, read when the module is imported (a bad value fails the
import with a clear ``ValueError``, not the first call).

Each case runs in a child interpreter, since the runtime is started once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Starts the runtime (through a LocalServer) and prints how many of the process's threads
# are its workers (tokio names them all "mqstate"; nothing here uses its blocking pool).
COUNT_WORKERS = """
import os
from mqstate.testing import LocalServer
with LocalServer():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    print(names.count("mqstate"))
"""


def run_child(code: str, workers: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("MQSTATE_WORKER_THREADS", None)
    if workers is not None:
        env["MQSTATE_WORKER_THREADS"] = workers
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
@pytest.mark.parametrize(("workers", "expected"), [(None, 1), ("3", 3), (" 2\n", 2)])
def test_worker_threads(workers: str | None, expected: int) -> None:
    done = run_child(COUNT_WORKERS, workers)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == expected


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", "1025", ""])
def test_a_bad_worker_count_fails_the_import(bad: str) -> None:
    done = run_child("import mqstate", bad)
    assert done.returncode != 0
    assert (
        f"ValueError: MQSTATE_WORKER_THREADS: expected a whole number of worker threads"
        f" from 1 to 1024, got {json.dumps(bad)}" in done.stderr
    ), done.stderr
