"""Test helpers: a real state store in-process, like fakeredis but speaking the real protocol.

A pytest fixture::

    import pytest
    import mqstate
    from mqstate.testing import LocalServer

    @pytest.fixture
    def state_store():
        with LocalServer() as server:      # 127.0.0.1, a free port
            yield server

    def test_door(state_store):
        with mqstate.Client(state_store.url) as client:
            client.set("door", "open")
            assert client.get("door") == b"open"

``LocalServer(data_dir=path)`` keeps the keys in ``path`` (every key, or with
``persist="requested"`` only those SET with ``persist=True``): a new server on the same
directory finds them again, with their versions, fencing tokens and expiry deadlines.

The server runs on the library's own runtime threads (no child process, no Docker); it stops
at the end of the ``with`` block, on :meth:`LocalServer.stop`, or when garbage-collected.

To run it as a child process instead (for code under test that runs in another process, or
a suite that wants the server outside its own process)::

    python -m mqstate.testing [--port N] [--max-keys N] [--data-dir DIR [--persist all|requested]]

prints ``mqtt://127.0.0.1:PORT`` on its first line once the server is ready, and runs until
its standard input closes or it receives SIGTERM / SIGINT.

This module needs a native module built with the ``testing`` cargo feature (from a checkout:
``maturin develop --features testing``, what ``scripts/test-python`` does). The released wheel
holds the clients only, and importing this module from it raises ``ImportError``: tests
written against a released wheel run the ``mqstate`` binary instead (``mqstate serve --port 0``
logs ``ready url=mqtt://127.0.0.1:PORT``; see the README, "Testing with a local server").
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from . import _native

if not hasattr(_native, "LocalServer"):  # the released wheel: built without the `testing` feature
    raise ImportError(
        "mqstate.testing needs the in-process test server, which this build of mqstate does not "
        "have: the released wheel holds the clients only. For tests, run the `mqstate` binary "
        "(`mqstate serve --port 0` logs `ready url=mqtt://127.0.0.1:PORT`; see the README, "
        '"Testing with a local server"), or build the package from a checkout with the test '
        "server: `maturin develop --features testing`."
    )

from ._native import LocalIotHub, LocalServer  # noqa: E402 (after the check above)

__all__ = ["LocalIotHub", "LocalServer", "main"]


def main(argv: list[str] | None = None) -> None:
    """``python -m mqstate.testing``: a local state store until stdin closes or a signal."""
    parser = argparse.ArgumentParser(prog="python -m mqstate.testing", description=main.__doc__)
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument("--max-keys", type=int, default=None, help="key quota (default: none)")
    parser.add_argument("--data-dir", default=None, help="keep keys in this directory")
    parser.add_argument(
        "--persist",
        choices=["all", "requested"],
        default="all",
        help="with --data-dir: every key (default), or only keys SET with persist",
    )
    args = parser.parse_args(argv)
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())

    def watch_stdin() -> None:
        sys.stdin.read()  # returns at end of file: the parent is gone or closed the pipe
        done.set()

    with LocalServer(
        port=args.port, max_keys=args.max_keys, data_dir=args.data_dir, persist=args.persist
    ) as server:
        print(server.url, flush=True)
        threading.Thread(target=watch_stdin, daemon=True).start()
        while not done.wait(0.2):
            pass


if __name__ == "__main__":
    main()
