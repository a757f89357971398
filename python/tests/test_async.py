"""The asyncio client against the local state store."""

from __future__ import annotations

import asyncio
import socket
import builtins
import os
import threading
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import mqstate
from mqstate._native import _SilentBroker, _panicking_call
from mqstate.testing import LocalServer


@pytest_asyncio.fixture
async def aclient(server: LocalServer) -> AsyncIterator[mqstate.AsyncClient]:
    async with mqstate.AsyncClient.connect(server.url) as c:
        yield c


async def _wait_until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_every_operation(aclient: mqstate.AsyncClient, key: str) -> None:
    outcome = await aclient.set(key, b"\x00\x01\xff")
    assert outcome.applied
    assert await aclient.get(key) == b"\x00\x01\xff"
    got = await aclient.get_versioned(key.encode())
    assert got is not None and got.version == outcome.version
    assert not (await aclient.set(key, "other", nx=True)).applied
    assert (await aclient.set(key, b"\x00\x01\xff", nex=True)).applied
    assert await aclient.vdel(key, "other") == mqstate.VdelOutcome.VALUE_MISMATCH
    assert await aclient.vdel(key, b"\x00\x01\xff") == mqstate.VdelOutcome.DELETED
    assert await aclient.get(key) is None
    assert await aclient.get_versioned(key) is None
    assert await aclient.delete(key) is False
    await aclient.set(key, "x", expiry=30)
    assert await aclient.delete(key) is True
    big = os.urandom(256 * 1024)
    await aclient.set(key, big)
    assert await aclient.get(key) == big


@pytest.mark.asyncio
async def test_many_requests_in_flight(aclient: mqstate.AsyncClient, key: str) -> None:
    await asyncio.gather(*(aclient.set(f"{key}/{i}", str(i)) for i in range(200)))
    values = await asyncio.gather(*(aclient.get(f"{key}/{i}") for i in range(200)))
    assert values == [str(i).encode() for i in range(200)]


@pytest.mark.asyncio
async def test_one_client_serves_event_loops_in_several_threads(
    aclient: mqstate.AsyncClient, key: str
) -> None:
    """Each call is driven by the loop that made it, on that loop's thread, while other loops
    in other threads use the same client."""
    await aclient.set(key, b"v")

    async def gets(n: int) -> list[bytes | None]:
        me = threading.get_ident()
        got = await asyncio.gather(*(aclient.get(key) for _ in range(n)))
        assert threading.get_ident() == me
        return got

    def in_new_loop() -> list[bytes | None]:
        return asyncio.run(gets(300))

    results = await asyncio.gather(
        asyncio.to_thread(in_new_loop), asyncio.to_thread(in_new_loop), gets(300)
    )
    assert [len(r) for r in results] == [300, 300, 300]
    assert all(v == b"v" for r in results for v in r)


@pytest.mark.asyncio
async def test_a_panic_in_a_call_is_a_runtime_error_and_the_loop_goes_on(
    aclient: mqstate.AsyncClient, key: str
) -> None:
    with pytest.raises(RuntimeError, match=r"internal error \(a Rust panic, a bug: please report it\): boom"):
        await _panicking_call("boom")
    await aclient.set(key, b"after")
    assert await aclient.get(key) == b"after"


@pytest.mark.asyncio
async def test_errors(aclient: mqstate.AsyncClient, key: str) -> None:
    with pytest.raises(mqstate.InvalidArgument):
        await aclient.get("")
    with pytest.raises(mqstate.InvalidArgument):
        aclient.set(key, "v", nx=True, nex=True)  # refused before anything is sent
    with pytest.raises(TypeError):
        aclient.get(None)  # type: ignore[arg-type]
    token = (await aclient.set(key + "/lock", "me", nex=True, expiry=10)).version
    await aclient.set(key, "v", fencing_token=token)
    with pytest.raises(mqstate.ServiceError) as info:
        await aclient.delete(key)
    assert info.value.kind == "fencing_token_required"
    assert await aclient.delete(key, fencing_token=token)


@pytest.mark.asyncio
async def test_timeout(silent_broker: _SilentBroker) -> None:
    async with mqstate.AsyncClient.connect(silent_broker.url) as c:
        with pytest.raises(mqstate.TimeoutError) as info:
            await c.with_timeout(0.2).get("k")
        assert isinstance(info.value, builtins.TimeoutError)


@pytest.mark.asyncio
async def test_a_finished_request_schedules_only_its_waiter(
    aclient: mqstate.AsyncClient, key: str
) -> None:
    """The cancellation hook of a request is removed once its result is in, so the loop runs
    one callback per request (the awaiting task's wake-up) instead of two."""
    await aclient.set(key, b"v")
    loop = asyncio.get_running_loop()
    scheduled: list[object] = []
    call_soon = loop.call_soon

    def counting(callback: object, *args: object, **kwargs: object) -> object:
        scheduled.append(callback)
        return call_soon(callback, *args, **kwargs)  # type: ignore[arg-type]

    # A request whose response came within the call itself (possible on a loaded machine)
    # is done before it is awaited, and awaiting it schedules nothing: counted apart.
    done_at_once = 0
    loop.call_soon = counting  # type: ignore[method-assign, assignment]
    try:
        for _ in range(20):
            pending = aclient.get(key)
            done_at_once += pending.done()
            assert await pending == b"v"
    finally:
        del loop.call_soon
    # One wake-up of this task per request that was awaited pending, and never the
    # cancellation hook (left in place, it would be scheduled once per request).
    kinds = sorted({type(cb).__name__ for cb in scheduled})
    assert "_Cancel" not in kinds, f"the cancellation hook ran: {kinds}"
    assert len(scheduled) == 20 - done_at_once, (
        f"{len(scheduled)} callbacks for {20 - done_at_once} pending requests: {kinds}"
    )


@pytest.mark.asyncio
async def test_cancelling_a_pending_await_cancels_the_request(
    silent_broker: _SilentBroker,
) -> None:
    async with mqstate.AsyncClient.connect(silent_broker.url) as c:

        async def fetch() -> bytes | None:
            return await c.get("nobody-answers")  # 10 s timeout

        task = asyncio.create_task(fetch())
        await _wait_until(lambda: c._requests_in_flight() == 1)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < 1
        # The Rust future was dropped: its request is gone from the correlation map.
        await _wait_until(lambda: c._requests_in_flight() == 0, timeout=2)

        # The same through asyncio.wait_for's own timeout.
        with pytest.raises(builtins.TimeoutError):
            await asyncio.wait_for(c.get("nobody-answers"), 0.2)
        await _wait_until(lambda: c._requests_in_flight() == 0, timeout=2)


@pytest.mark.asyncio
async def test_connect_forms(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    c = await mqstate.AsyncClient.connect(host="127.0.0.1", port=server.port, client_id="py-async")
    try:
        assert c.client_id == "py-async" and c.state == "connected"
        await c.set("async-connect", "1")
    finally:
        await c.close()
    assert c.state == "closed"  # type: ignore[comparison-overlap]  # mypy narrowed the property
    with pytest.raises(mqstate.Disconnected):
        await c.get("async-connect")
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("AIO_BROKER_TCP_PORT", str(server.port))
    monkeypatch.setenv("AIO_MQTT_USE_TLS", "false")
    async with mqstate.AsyncClient.from_env(client_id="py-async-env") as c:
        assert c.client_id == "py-async-env"
        assert await c.get("async-connect") == b"1"
    with pytest.raises(mqstate.ConnectionFailed):
        await mqstate.AsyncClient.connect("mqtt://127.0.0.1:1", connect_timeout=2)


@pytest.mark.asyncio
async def test_connect_timeout_is_a_timeout_naming_host_port_and_limit() -> None:
    # Listens but never accepts: the TCP connection completes, the MQTT CONNACK never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(mqstate.TimeoutError, match=rf"after 1s connecting to 127\.0\.0\.1:{port}"):
            await mqstate.AsyncClient.connect(f"mqtt://127.0.0.1:{port}", connect_timeout=1)
        with pytest.raises(mqstate.TimeoutError, match=rf"127\.0\.0\.1:{port}"):
            mqstate.Client(f"mqtt://127.0.0.1:{port}?connect_timeout_ms=1000")


@pytest.mark.asyncio
async def test_observe_with_another_client_writing(server: LocalServer, key: str) -> None:
    async with mqstate.AsyncClient.connect(server.url) as watcher:
        async with watcher.observe(key) as changes:
            assert changes.key == key.encode()
            with mqstate.Client(server.url) as writer:  # another client, blocking
                writer.set(key, "1")
                writer.set(key, b"\xff2")
                writer.delete(key)
            seen = []
            async for change in changes:
                seen.append((change.operation, change.value))
                if len(seen) == 3:
                    break
            assert seen == [("set", b"1"), ("set", b"\xff2"), ("delete", None)]
        # The `async with` block ended it.
        assert [c async for c in changes] == []

        # `await` form, ended by the client's close while a reader waits.
        changes = await watcher.observe(key)
        reader = asyncio.create_task(_collect(changes))
        async with mqstate.AsyncClient.connect(server.url) as writer2:
            await writer2.set(key, "last")
        await _wait_until(lambda: watcher._requests_in_flight() == 0)
        await asyncio.sleep(0.2)
    # Leaving the client's `async with` closed it: the reader's iteration ends.
    assert await asyncio.wait_for(reader, 5) == [b"last"]


async def _collect(changes: mqstate.AsyncObservation) -> list[bytes | None]:
    return [c.value async for c in changes]


@pytest.mark.asyncio
async def test_observation_close_and_cancelled_anext(
    aclient: mqstate.AsyncClient, key: str
) -> None:
    changes = await aclient.observe(key)
    # A cancelled wait leaves the observation usable.
    with pytest.raises(builtins.TimeoutError):
        await asyncio.wait_for(changes.__anext__(), 0.1)
    await aclient.set(key, "after")
    change = await asyncio.wait_for(changes.__anext__(), 5)
    assert change.value == b"after"
    await changes.aclose()
    with pytest.raises(StopAsyncIteration):
        await changes.__anext__()


@pytest.mark.asyncio
async def test_a_cancelled_anext_never_swallows_a_change(
    server: LocalServer, aclient: mqstate.AsyncClient, key: str
) -> None:
    """A notification that arrives while its `__anext__` is being cancelled goes to the next
    call instead of being lost."""
    changes = await aclient.observe(key)
    received: list[bytes | None] = []
    async with mqstate.AsyncClient.connect(server.url) as writer:
        for i in range(30):
            pending = asyncio.ensure_future(changes.__anext__())
            await writer.set(key, str(i))  # the notification races the cancellation
            if not pending.cancel():  # it was already delivered
                received.append(pending.result().value)
        while len(received) < 30:
            received.append((await asyncio.wait_for(changes.__anext__(), 5)).value)
    assert received == [str(i).encode() for i in range(30)]
    changes.close()
