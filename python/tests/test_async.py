"""The asyncio client against the local state store."""

from __future__ import annotations

import asyncio
import socket
import builtins
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
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


def test_calls_made_while_results_are_delivered_belong_to_the_running_loop(
    server: LocalServer, key: str
) -> None:
    """A call made while a batch of results is delivered (by a Task that a result resumed, or
    by a done callback) belongs to the loop delivering it; the binding skips asking for the
    running loop there. Two loops in two threads at once, then a new loop in a thread that
    had another: every call is its own loop's, and every chain finishes."""

    async def chains(url: str) -> list[bool]:
        loop = asyncio.get_running_loop()
        own: list[bool] = []
        finished = loop.create_future()
        async with mqstate.AsyncClient.connect(url) as c:
            await c.set(key, b"v")
            left = 30

            def again(call: mqstate.Call[bytes | None]) -> None:
                # Runs as the result is delivered, outside any Task.
                nonlocal left
                assert call.result() == b"v"
                left -= 1
                if left:
                    following = c.get(key)
                    own.append(following.get_loop() is loop)
                    following.add_done_callback(again)
                else:
                    finished.set_result(None)

            c.get(key).add_done_callback(again)
            for _ in range(30):
                call = c.get(key)  # made by this Task, resumed by the last delivery
                own.append(call.get_loop() is loop)
                assert await call == b"v"
            await finished
        return own

    def run_twice() -> list[bool]:
        return asyncio.run(chains(server.url)) + asyncio.run(chains(server.url))

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_twice(), range(2)))
    assert [len(r) for r in results] == [118, 118]
    assert all(all(r) for r in results)


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
async def test_a_finished_request_schedules_nothing(
    aclient: mqstate.AsyncClient, key: str
) -> None:
    """The awaiting task is woken by the delivery of the result itself: the loop schedules no
    callback per request (an `asyncio.Future` would schedule the task's wake-up with
    `call_soon`, one more loop iteration and one more handle per request)."""
    await aclient.set(key, b"v")
    loop = asyncio.get_running_loop()
    scheduled: list[object] = []
    call_soon = loop.call_soon

    def counting(callback: object, *args: object, **kwargs: object) -> object:
        scheduled.append(callback)
        return call_soon(callback, *args, **kwargs)  # type: ignore[arg-type]

    loop.call_soon = counting  # type: ignore[method-assign, assignment]
    try:
        for _ in range(20):
            assert await aclient.get(key) == b"v"
    finally:
        del loop.call_soon
    assert scheduled == [], f"scheduled per request: {sorted({type(cb).__name__ for cb in scheduled})}"


@pytest.mark.asyncio
async def test_a_call_is_a_future_like(aclient: mqstate.AsyncClient, key: str) -> None:
    """What asyncio's own functions need from a future: each of them, on calls."""
    await aclient.set(key, b"v")
    call = aclient.get(key)
    assert isinstance(call, mqstate.Call) and asyncio.isfuture(call)
    assert call.get_loop() is asyncio.get_running_loop()
    assert await call == b"v"
    assert call.done() and not call.cancelled()
    assert call.result() == b"v" and call.exception() is None
    assert repr(call) == "<mqstate.Call finished result=b'v'>"
    assert await call == b"v"  # awaited again: the same result
    assert await asyncio.gather(aclient.get(key), aclient.get(key)) == [b"v", b"v"]
    assert await asyncio.wait_for(aclient.get(key), 5) == b"v"
    assert await asyncio.shield(aclient.get(key)) == b"v"
    done, pending = await asyncio.wait([aclient.get(key), aclient.get(key)])
    assert not pending and [c.result() for c in done] == [b"v", b"v"]
    assert [await c for c in asyncio.as_completed([aclient.get(key)])] == [b"v"]
    assert await asyncio.ensure_future(aclient.get(key)) == b"v"
    assert mqstate.Call[bytes] is not None  # usable in annotations at runtime

    with pytest.raises(mqstate.InvalidArgument):
        await aclient.get("")
    token = (await aclient.set(key + "/lock", "me", nex=True, expiry=10)).version
    await aclient.set(key + "/fenced", "v", fencing_token=token)
    failed = aclient.delete(key + "/fenced")  # without the token: refused
    with pytest.raises(mqstate.ServiceError):
        await failed
    assert isinstance(failed.exception(), mqstate.ServiceError)
    assert repr(failed).startswith("<mqstate.Call finished exception=ServiceError(")


@pytest.mark.asyncio
async def test_call_states_and_done_callbacks(
    silent_broker: _SilentBroker, aclient: mqstate.AsyncClient, key: str
) -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[tuple[str, object]] = []

    def record(call: mqstate.Call[object]) -> None:
        seen.append((var.get(), call.result() if not call.cancelled() else "cancelled"))

    await aclient.set(key, b"v")
    call = aclient.get(key)
    var.set("at add")
    call.add_done_callback(record)  # runs in a copy of this context
    call.add_done_callback(lambda c: seen.append(("second", None)))
    other = contextvars.copy_context()
    other.run(var.set, "given")
    call.add_done_callback(record, context=other)
    assert call.remove_done_callback(print) == 0
    await call
    await asyncio.sleep(0)  # (in case the result came within the call: then scheduled)
    assert seen == [("at add", b"v"), ("second", None), ("given", b"v")]

    # Added once done: scheduled with call_soon, so it runs in a later loop iteration.
    seen.clear()
    call.add_done_callback(record)
    assert seen == []
    await asyncio.sleep(0)
    assert seen == [("at add", b"v")]

    async with mqstate.AsyncClient.connect(silent_broker.url) as c:
        pending = c.get("nobody-answers")
        with pytest.raises(asyncio.InvalidStateError):
            pending.result()
        with pytest.raises(asyncio.InvalidStateError):
            pending.exception()
        assert repr(pending) == "<mqstate.Call pending>"
        pending.add_done_callback(record)
        pending.add_done_callback(record)
        assert pending.remove_done_callback(record) == 2
        pending.add_done_callback(record)
        assert c._requests_in_flight() == 1
        assert pending.cancel("enough")
        assert not pending.cancel() and pending.cancelled() and pending.done()
        # The request is withdrawn at once, by cancel() itself.
        assert c._requests_in_flight() == 0
        with pytest.raises(asyncio.CancelledError, match="enough"):
            pending.result()
        with pytest.raises(asyncio.CancelledError):
            await pending
        seen.clear()
        await asyncio.sleep(0)
        assert seen == [("at add", "cancelled")]
        assert repr(pending) == "<mqstate.Call cancelled>"
        assert weakref.ref(pending)() is pending

        # asyncio.gather reads a cancelled child's message through asyncio's private protocol.
        cancelled, answered = c.get("nobody-answers"), aclient.get(key)
        cancelled.cancel("stop")
        results = await asyncio.gather(cancelled, answered, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError) and str(results[0]) == "stop"
        assert results[1] == b"v"
        with pytest.raises(asyncio.CancelledError, match="stop"):
            await asyncio.gather(cancelled, aclient.get(key))


@pytest.mark.asyncio
async def test_a_failing_done_callback_is_reported_and_the_batch_goes_on(
    aclient: mqstate.AsyncClient, key: str
) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        await aclient.set(key, b"v")
        calls = [aclient.get(key) for _ in range(50)]

        def boom(call: mqstate.Call[object]) -> None:
            raise ValueError("boom")

        for call in calls[::7]:
            call.add_done_callback(boom)
        assert await asyncio.gather(*calls) == [b"v"] * 50
    finally:
        loop.set_exception_handler(None)
    assert len(reported) == len(calls[::7])
    assert all(isinstance(r["exception"], ValueError) for r in reported)
    assert all(str(r["message"]).startswith("Exception in callback") for r in reported)


def test_a_keyboard_interrupt_in_a_done_callback_leaves_the_loop_and_loses_nothing(
    server: LocalServer, key: str
) -> None:
    """As from a `call_soon` handle, a KeyboardInterrupt raised by a done callback leaves the
    loop; the other results of its batch are still delivered, so running the loop again
    finishes every call (a result dropped with the interrupt would hang here)."""
    loop = asyncio.new_event_loop()
    try:

        async def start() -> tuple[mqstate.AsyncClient, list[mqstate.Call[bytes | None]]]:
            c = await mqstate.AsyncClient.connect(server.url)
            await c.set(key, b"v")
            return c, [c.get(key) for _ in range(20)]

        client, calls = loop.run_until_complete(start())

        def interrupt(_call: object) -> None:
            raise KeyboardInterrupt

        for call in calls[::5]:
            call.add_done_callback(interrupt)
        interrupted = 0
        while not all(call.done() for call in calls):
            # (Not run_until_complete: an interrupted run may leave its stop scheduled.)
            stop = loop.call_later(0.01, loop.stop)
            try:
                loop.run_forever()
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                stop.cancel()
        assert [call.result() for call in calls] == [b"v"] * 20
        assert 1 <= interrupted <= 4  # one per interrupting callback, or one per batch

        async def close() -> None:
            await client.close()

        loop.run_until_complete(close())
    finally:
        loop.close()


@pytest.mark.asyncio
async def test_an_exception_nobody_retrieved_is_reported(silent_broker: _SilentBroker) -> None:
    import gc

    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        async with mqstate.AsyncClient.connect(silent_broker.url) as c:
            forgotten = c.with_timeout(0.1).get("k")
            await _wait_until(forgotten.done)
            del forgotten
            gc.collect()
            retrieved = c.with_timeout(0.1).get("k")
            await _wait_until(retrieved.done)
            assert isinstance(retrieved.exception(), mqstate.TimeoutError)
            del retrieved
            gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert [r["message"] for r in reported] == ["Future exception was never retrieved"]
    assert isinstance(reported[0]["exception"], mqstate.TimeoutError)


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
