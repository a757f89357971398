"""The asyncio client on uvloop, the event loop many asyncio applications run on.

A `mqstate.Call` is a future-like that asyncio's functions take through their public
protocol; uvloop reimplements the loop (its `add_reader`, `call_soon`, exception handler) but
uses asyncio's Tasks, so the same calls must behave the same on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvloop

import mqstate
from mqstate.testing import LocalServer


def test_calls_on_uvloop(server: LocalServer, key: str) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, uvloop.Loop)
        async with mqstate.AsyncClient.connect(server.url) as c:
            await c.set(key, "v")
            call = c.get(key)
            assert asyncio.isfuture(call) and call.get_loop() is loop
            assert await call == b"v"
            assert await asyncio.gather(*(c.get(key) for _ in range(200))) == [b"v"] * 200
            assert await asyncio.wait_for(c.get(key), 5) == b"v"
            assert await asyncio.shield(c.get(key)) == b"v"
            done, pending = await asyncio.wait([c.get(key), c.get(key)])
            assert not pending and [d.result() for d in done] == [b"v", b"v"]

            # 64 tasks awaiting calls in a loop: every result reaches its task.
            async def worker() -> int:
                got = 0
                for _ in range(100):
                    got += await c.get(key) == b"v"
                return got

            assert await asyncio.gather(*(worker() for _ in range(64))) == [100] * 64

            # Cancelling: the call itself, then the task awaiting one.
            cancelled = c.get(key)
            assert cancelled.cancel("stop") and cancelled.cancelled()
            results = await asyncio.gather(cancelled, c.get(key), return_exceptions=True)
            assert isinstance(results[0], asyncio.CancelledError) and results[1] == b"v"

            async def one() -> bytes | None:
                return await c.get(key)

            task = asyncio.create_task(one())
            await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            assert c._requests_in_flight() == 0

            # A done callback's exception goes to uvloop's exception handler.
            reported: list[dict[str, Any]] = []
            loop.set_exception_handler(lambda _loop, context: reported.append(context))

            def boom(_call: object) -> None:
                raise ValueError("boom")

            failing = c.get(key)
            failing.add_done_callback(boom)
            assert await failing == b"v"
            await asyncio.sleep(0)  # (in case it was done before the callback was added)
            loop.set_exception_handler(None)
            assert [type(r["exception"]) for r in reported] == [ValueError]

    uvloop.run(main())
