"""Persistence through the Python binding: ``set(..., persist=True)`` against the real
``mqstate serve --data-dir`` binary, killed with SIGKILL and restarted on the same data dir;
and ``LocalServer(data_dir=...)`` restarted in-process."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import mqstate
from mqstate.testing import LocalServer

BINARY = pathlib.Path(
    os.environ.get(
        "MQSTATE_BIN",
        pathlib.Path(__file__).resolve().parents[2] / "target" / "debug" / "mqstate",
    )
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(data_dir: pathlib.Path, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``mqstate serve --data-dir`` as a child process; killed (SIGKILL) on exit."""
    if not BINARY.exists():
        pytest.fail(
            f"{BINARY} not found: build it with `cargo build -p mqstate-cli` (or set MQSTATE_BIN)"
        )
    port = free_port()
    # No hub and no dashboard: their fixed ports would collide between servers.
    args = [str(BINARY), "serve", "--no-iothub", "--no-dashboard"]
    args += ["--port", str(port), "--log", "warn"]
    args += ["--data-dir", str(data_dir)]
    proc = subprocess.Popen([*args, *extra], stdin=subprocess.DEVNULL)
    try:
        yield proc, f"mqtt://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def connect(url: str) -> mqstate.Client:
    """Connects once the server answers (it may still be starting; the machine may be busy)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            client = mqstate.Client(url, request_timeout=20)
            client.get("probe")
            return client
        except mqstate.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_sigkill_and_restart_keeps_persisted_keys(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    with serve(data, "--persist", "requested") as (proc, url):
        with connect(url) as c:
            kept = c.set("kept", b"value", persist=True)
            t1 = c.set("lock", b"holder").version
            c.set("fenced", b"a", fencing_token=t1, persist=True)
            c.set("not-persisted", b"x")
            c.set("short", b"x", expiry=0.5, persist=True)
        proc.kill()  # SIGKILL: nothing runs on the way out
        proc.wait()
    time.sleep(1.0)  # "short" expires while the server is down
    with serve(data, "--persist", "requested") as (_, url):
        with connect(url) as c:
            got = c.get_versioned("kept")
            assert got is not None
            assert got.value == b"value" and got.version == kept.version
            assert c.get("not-persisted") is None
            assert c.get("short") is None
            # The fence survived: no token, or an older one, is refused.
            with pytest.raises(mqstate.ServiceError) as err:
                c.set("fenced", b"b")
            assert err.value.kind == "fencing_token_required"
            older = mqstate.Hlc(t1.ms - 1, 0, "StateStore")
            with pytest.raises(mqstate.ServiceError) as err:
                c.set("fenced", b"b", fencing_token=older)
            assert err.value.kind == "fencing_token_lower_version"
            assert c.set("fenced", b"c", fencing_token=t1).version > kept.version


def test_local_server_with_a_data_dir_restarts_with_its_keys(tmp_path: pathlib.Path) -> None:
    with LocalServer(data_dir=tmp_path) as server, mqstate.Client(server.url) as c:
        version = c.set("k", b"v").version
    with LocalServer(data_dir=tmp_path) as server, mqstate.Client(server.url) as c:
        got = c.get_versioned("k")
        assert got is not None and got.version == version


def test_a_locked_data_dir_and_a_bad_mode_are_clear_errors(tmp_path: pathlib.Path) -> None:
    with LocalServer(data_dir=tmp_path):
        with pytest.raises(mqstate.Error, match="store.redb.*locked"):
            LocalServer(data_dir=tmp_path)
    with pytest.raises(mqstate.InvalidArgument, match="persist"):
        LocalServer(data_dir=tmp_path, persist="sometimes")  # type: ignore[arg-type]
