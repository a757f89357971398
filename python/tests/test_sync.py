"""The blocking client against the local state store."""

from __future__ import annotations

import builtins
import datetime
import os
import signal
import socket
import threading
import time

import pytest

import mqstate
from mqstate._native import _SilentBroker
from mqstate.testing import LocalServer


def test_set_then_get_with_str_and_bytes(client: mqstate.Client, key: str) -> None:
    outcome = client.set(key, "héllo")
    assert outcome.applied and outcome
    assert isinstance(outcome.version, mqstate.Hlc)
    assert client.get(key) == "héllo".encode()
    assert client.get(key.encode()) == "héllo".encode()  # the same key as bytes
    got = client.get_versioned(key)
    assert got is not None
    assert got.value == "héllo".encode() and got.version == outcome.version
    assert got == client.get_versioned(key)


def test_binary_keys_and_values(client: mqstate.Client) -> None:
    key = b"\x00\xffbinary\r\nkey"
    value = bytes(range(256)) * 4
    client.set(key, value)
    assert client.get(key) == value
    big = os.urandom(1 << 20)  # 1 MiB
    client.set(key, big)
    assert client.get(key) == big
    client.set(key, b"")
    assert client.get(key) == b""


def test_not_found(client: mqstate.Client, key: str) -> None:
    assert client.get(key) is None
    assert client.get_versioned(key) is None
    assert client.delete(key) is False
    assert client.vdel(key, "x") == mqstate.VdelOutcome.NOT_FOUND


def test_versions_increase(client: mqstate.Client, key: str) -> None:
    first = client.set(key, "1").version
    second = client.set(key, "2").version
    assert second > first and first < second and first != second
    assert sorted([second, first]) == [first, second]


def test_nx_and_nex_not_applied(client: mqstate.Client, key: str) -> None:
    assert client.set(key, "a", nx=True).applied
    refused = client.set(key, "b", nx=True)
    assert not refused.applied and not refused
    assert client.get(key) == b"a"
    assert client.set(key, "a", nex=True).applied  # absent or equal
    assert not client.set(key, "c", nex=True).applied
    assert client.get(key) == b"a"


def test_expiry(client: mqstate.Client, key: str) -> None:
    client.set(key, "short", expiry=0.2)
    client.set(key + "/td", "short", expiry=datetime.timedelta(milliseconds=200))
    client.set(key + "/long", "long", expiry=60)
    assert client.get(key) == b"short"
    deadline = time.monotonic() + 5
    while client.get(key) is not None or client.get(key + "/td") is not None:
        assert time.monotonic() < deadline, "the keys did not expire"
        time.sleep(0.05)
    assert client.get(key + "/long") == b"long"


def test_delete_and_vdel(client: mqstate.Client, key: str) -> None:
    client.set(key, "v")
    assert client.delete(key) is True
    assert client.get(key) is None
    client.set(key, "mine")
    mismatch = client.vdel(key, "theirs")
    assert mismatch == mqstate.VdelOutcome.VALUE_MISMATCH and not mismatch.deleted
    assert client.get(key) == b"mine"
    deleted = client.vdel(key, b"mine")
    assert deleted == mqstate.VdelOutcome.DELETED and deleted.deleted
    assert client.get(key) is None


def test_fencing_tokens_and_service_errors(client: mqstate.Client, key: str) -> None:
    lease = client.set(key + "/lock", "holder-1", nex=True, expiry=10)
    assert lease.applied
    token = lease.version
    assert client.set(key, "v1", fencing_token=token).applied

    with pytest.raises(mqstate.ServiceError) as info:
        client.set(key, "v2")
    assert info.value.kind == "fencing_token_required"
    assert info.value.code == "service"
    assert info.value.text == "a fencing token is required for this request"

    older = mqstate.Hlc(token.ms - 1, 0, token.node_id)
    with pytest.raises(mqstate.ServiceError) as info:
        client.set(key, "v2", fencing_token=older)
    assert info.value.kind == "fencing_token_lower_version"
    with pytest.raises(mqstate.ServiceError) as info:
        client.delete(key, fencing_token=older)
    assert info.value.kind == "fencing_token_lower_version"

    future = mqstate.Hlc(token.ms + 3_600_000, 0, token.node_id)
    with pytest.raises(mqstate.ServiceError) as info:
        client.set(key, "v2", fencing_token=future)
    assert info.value.kind == "fencing_token_skew"

    assert client.get(key) == b"v1"  # GET never needs the token
    assert client.vdel(key, "v1", fencing_token=token).deleted


def test_quota_exceeded_is_a_service_error() -> None:
    with LocalServer(max_keys=1) as small, mqstate.Client(small.url) as c:
        c.set("one", "1")
        with pytest.raises(mqstate.ServiceError) as info:
            c.set("two", "2")
        assert info.value.kind == "quota_exceeded"
        assert isinstance(info.value, mqstate.Error)


def test_invalid_arguments(client: mqstate.Client) -> None:
    with pytest.raises(mqstate.InvalidArgument, match="key is empty"):
        client.get("")
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        client.set(b"", "v")
    with pytest.raises(mqstate.InvalidArgument, match="nx and nex"):
        client.set("k", "v", nx=True, nex=True)
    with pytest.raises(mqstate.InvalidArgument, match="expiry"):
        client.set("k", "v", expiry=0)
    with pytest.raises(mqstate.InvalidArgument, match="expiry"):
        client.set("k", "v", expiry=-1.0)
    with pytest.raises(mqstate.InvalidArgument):
        client.set("k", "v", expiry=float("nan"))
    with pytest.raises(mqstate.InvalidArgument):
        client.with_timeout(0)
    with pytest.raises(TypeError, match="key must be bytes or str, not int"):
        client.get(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value must be bytes or str"):
        client.set("k", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.set("k", "v", fencing_token="1:2:n")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.set("k", "v", expiry=True)


def test_exception_hierarchy() -> None:
    for cls in (
        mqstate.InvalidArgument,
        mqstate.MalformedHlc,
        mqstate.TimeoutError,
        mqstate.Disconnected,
        mqstate.ConnectionFailed,
        mqstate.ServiceError,
        mqstate.UnexpectedPayload,
        mqstate.ClockDrift,
        mqstate.Lagged,
    ):
        assert issubclass(cls, mqstate.Error)
        assert cls.__module__ == "mqstate"
    assert issubclass(mqstate.TimeoutError, builtins.TimeoutError)
    assert issubclass(mqstate.InvalidArgument, ValueError)
    assert issubclass(mqstate.Disconnected, ConnectionError)
    assert issubclass(mqstate.ConnectionFailed, ConnectionError)
    assert not issubclass(mqstate.ServiceError, ConnectionError)


def test_timeout(silent_broker: _SilentBroker) -> None:
    with mqstate.Client(silent_broker.url) as c:
        fast = c.with_timeout(0.3)
        assert fast.timeout == pytest.approx(0.3) and c.timeout == pytest.approx(10)
        started = time.monotonic()
        with pytest.raises(mqstate.TimeoutError) as info:
            fast.get("k")
        assert 0.25 < time.monotonic() - started < 3
        assert isinstance(info.value, builtins.TimeoutError)
        assert info.value.code == "timeout"
        assert c._requests_in_flight() == 0
    with mqstate.Client(silent_broker.url, request_timeout=0.2) as c:
        with pytest.raises(TimeoutError):  # the built-in name catches it too
            c.set("k", "v")


def test_closed_client_raises_disconnected(server: LocalServer) -> None:
    c = mqstate.Client(server.url)
    assert c.state == "connected"
    c.close()
    c.close()  # idempotent
    assert c.state == "closed"  # type: ignore[comparison-overlap]  # mypy narrowed the property
    with pytest.raises(mqstate.Disconnected) as info:
        c.get("k")
    assert isinstance(info.value, ConnectionError)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused() -> None:
    with pytest.raises(mqstate.ConnectionFailed):
        mqstate.Client(f"mqtt://127.0.0.1:{_free_port()}", connect_timeout=2)


def test_connect_from_url_kwargs_and_env(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with mqstate.Client(f"{server.url}?client_id=py-url") as c:
        assert c.client_id == "py-url"
    with mqstate.Client(
        host="127.0.0.1", port=server.port, client_id="py-kwargs", keep_alive=30,
        request_timeout=datetime.timedelta(seconds=2),
    ) as c:
        assert c.client_id == "py-kwargs"
        assert c.timeout == pytest.approx(2)
        c.set("kwargs", "ok")
    with mqstate.Client("mqtt://127.0.0.1:1", port=server.port, client_id="py-override") as c:
        assert c.client_id == "py-override"  # keyword arguments override the URL
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("AIO_BROKER_TCP_PORT", str(server.port))
    monkeypatch.setenv("AIO_MQTT_USE_TLS", "false")
    monkeypatch.setenv("AIO_MQTT_CLIENT_ID", "py-env")
    with mqstate.Client.from_env() as c:
        assert c.client_id == "py-env"
        assert c.get("kwargs") == b"ok"
    with mqstate.Client.from_env(client_id="py-env-2") as c:
        assert c.client_id == "py-env-2"


def test_bad_connect_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'hots'"):
        mqstate.Client(hots="x")  # type: ignore[call-arg]
    with pytest.raises(mqstate.InvalidArgument, match="unsupported scheme"):
        mqstate.Client("http://127.0.0.1")
    with pytest.raises(mqstate.InvalidArgument, match="port"):
        mqstate.Client(port=70000)
    with pytest.raises(TypeError, match="client_id must be a str"):
        mqstate.Client(client_id=5)  # type: ignore[arg-type]
    monkeypatch.delenv("AIO_BROKER_HOSTNAME", raising=False)
    with pytest.raises(mqstate.InvalidArgument, match="AIO_BROKER_HOSTNAME"):
        mqstate.Client.from_env()


def test_observe_with_another_client_writing(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as watcher, mqstate.Client(server.url) as writer:
        with watcher.observe(key) as changes:
            assert changes.key == key.encode()
            first = writer.set(key, b"\x00one")
            writer.set(key, "two")
            writer.delete(key)
            seen = [changes.recv(timeout=5) for _ in range(3)]
            assert [(n.operation, n.value) for n in seen if n] == [
                ("set", b"\x00one"),
                ("set", b"two"),
                ("delete", None),
            ]
            assert seen[0] is not None and seen[0].version == first.version
            assert all(n is not None and n.key == key.encode() and not n.synthesized for n in seen)
            with pytest.raises(mqstate.TimeoutError):
                changes.recv(timeout=0.1)
        # The with block ended the observation.
        assert changes.recv() is None
        assert list(changes) == []


def test_observe_iteration_ends_on_client_close(server: LocalServer, key: str) -> None:
    watcher = mqstate.Client(server.url)
    received: list[mqstate.Notification] = []
    changes = watcher.observe(key)

    def consume() -> None:
        for change in changes:  # blocks; ends when the client closes
            received.append(change)

    consumer = threading.Thread(target=consume)
    consumer.start()
    with mqstate.Client(server.url) as writer:
        writer.set(key, "x")
        deadline = time.monotonic() + 5
        while not received and time.monotonic() < deadline:
            time.sleep(0.01)
    watcher.close()
    consumer.join(timeout=5)
    assert not consumer.is_alive()
    assert [n.value for n in received] == [b"x"]


def test_unobserve_ends_the_observation(client: mqstate.Client, key: str) -> None:
    changes = client.observe(key)
    client.unobserve(key)
    assert changes.recv(timeout=5) is None


def test_sixteen_threads_share_one_client_while_python_runs(
    client: mqstate.Client, silent_broker: _SilentBroker
) -> None:
    """16 threads share one blocking client; a 17th thread keeps running Python code."""
    stop = threading.Event()
    ticks = 0

    def python_work() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(50):
                k = f"threads/{i}/{j % 5}"
                client.set(k, f"{i}:{j}")
                assert client.get(k) == f"{i}:{j}".encode()
        except BaseException as e:  # reported below
            errors.append(e)

    spinner = threading.Thread(target=python_work)
    spinner.start()
    try:
        workers = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
        assert not errors, errors
        assert not any(w.is_alive() for w in workers)

        # Proof that the GIL is released while a call waits: 16 threads each wait 0.5 s on a
        # broker that never answers; all 16 requests are in flight at once, and the Python
        # thread keeps counting meanwhile.
        with mqstate.Client(silent_broker.url, request_timeout=0.5) as silent:
            timeouts: list[BaseException] = []

            def wait_for_timeout() -> None:
                try:
                    silent.get("nobody-answers")
                except mqstate.TimeoutError as e:
                    timeouts.append(e)

            waiters = [threading.Thread(target=wait_for_timeout) for _ in range(16)]
            before = ticks
            for w in waiters:
                w.start()
            time.sleep(0.2)
            in_flight = silent._requests_in_flight()
            for w in waiters:
                w.join(timeout=10)
            assert len(timeouts) == 16
            assert in_flight == 16  # all 16 were waiting at once, each in its own call
            # A plain Python loop advanced meanwhile (it could not have with the GIL held).
            assert ticks - before > 10_000, "the Python thread did not run while the calls waited"
    finally:
        stop.set()
        spinner.join()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_signal_handlers_run_during_a_blocking_call(silent_broker: _SilentBroker) -> None:
    """Ctrl-C (any signal handler that raises) interrupts a call waiting on the main thread."""

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        with mqstate.Client(silent_broker.url) as c:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            started = time.monotonic()
            with pytest.raises(Interrupted):
                c.get("k")  # the request timeout is 10 s
            assert time.monotonic() - started < 2
            deadline = time.monotonic() + 2
            while c._requests_in_flight() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert c._requests_in_flight() == 0  # the abandoned request was cancelled
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_local_server_lifecycle() -> None:
    server = LocalServer()
    assert server.running and server.host == "127.0.0.1"
    assert server.url == f"mqtt://127.0.0.1:{server.port}" and server.port > 0
    assert "LocalServer" in repr(server)
    with mqstate.Client(server.url) as c:
        c.set("k", "v")
    port = server.port
    server.stop()
    server.stop()  # idempotent
    assert not server.running
    # The port is free again: a new server can take it.
    with LocalServer(port=port) as again, mqstate.Client(again.url) as c:
        assert again.port == port
        assert c.get("k") is None  # a new, empty store


def test_local_server_as_a_child_process() -> None:
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "mqstate.testing", "--max-keys", "10"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        url = child.stdout.readline().strip()
        assert url.startswith("mqtt://127.0.0.1:")
        with mqstate.Client(url) as c:
            c.set("from-parent", "hello")
            assert c.get("from-parent") == b"hello"
        child.stdin.close()  # end of input: the child stops its server and exits
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
