"""Leases, locks and leader election (blocking and asyncio) against the local state store."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import mqstate
from mqstate.testing import LocalServer


def _events(stream: mqstate.LeaseEvents, n: int) -> list[mqstate.LeaseEvent]:
    out = []
    for _ in range(n):
        event = stream.recv(timeout=5)
        assert event is not None
        out.append(event)
    return out


def test_lease_acquire_renew_release(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as a, mqstate.Client(server.url) as b:
        mine = mqstate.Lease(a, key, "holder-a", session_id="1")
        theirs = mqstate.Lease(b, key.encode(), b"holder-b")
        assert mine.name == key.encode() and mine.holder_value == b"holder-a:1"
        assert mine.token is None
        with mine.events() as events:
            token = mine.acquire(10)
            assert token is not None and mine.token == token
            assert theirs.acquire(10) is None  # held by someone else
            assert theirs.holder() == b"holder-a:1" == mine.holder()
            renewed = mine.renew()
            assert renewed is not None and renewed > token
            # The token fences writes: the key's protector moves on with each renewal.
            assert a.set(key + "/data", "1", fencing_token=renewed).applied
            with pytest.raises(mqstate.ServiceError) as info:
                b.set(key + "/data", "2", fencing_token=token)
            assert info.value.kind == "fencing_token_lower_version"
            assert mine.release() is True
            assert mine.token is None and mine.holder() is None
            assert mine.release() is False  # not held any more
            kinds = [(e.kind, e.token) for e in _events(events, 3)]
            assert kinds == [("acquired", token), ("renewed", renewed), ("released", None)]
        assert events.recv() is None  # the with block closed the stream
        assert theirs.acquire(10) is not None
        theirs.release()


def test_lease_acquire_wait_wakes_on_release(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as a, mqstate.Client(server.url) as b:
        first = mqstate.Lease(a, key, "a")
        second = mqstate.Lease(b, key, "b")
        held = first.acquire(30)
        assert held is not None
        with pytest.raises(mqstate.TimeoutError):
            second.acquire_wait(30, 0.3)
        got: list[mqstate.Hlc] = []
        waiter = threading.Thread(target=lambda: got.append(second.acquire_wait(30, 10)))
        waiter.start()
        time.sleep(0.2)
        assert not got  # still waiting: the lease's ttl is 30 s
        first.release()
        waiter.join(timeout=10)
        assert len(got) == 1 and got[0] > held
        assert second.holder() == b"b"
        second.release()


def test_lease_auto_renew_and_loss(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as a, mqstate.Client(server.url) as other:
        lease = mqstate.Lease(a, key, "renewer")
        events = lease.events()
        first = lease.acquire(0.4)
        assert first is not None
        lease.auto_renew(0.25)  # every 0.1 s
        time.sleep(1.0)  # far past the ttl: only the renewals keep it
        assert lease.holder() == b"renewer"
        current = lease.token
        assert current is not None and current > first
        other.delete(key)  # someone removes the lease key
        seen = []
        while True:
            event = events.recv(timeout=5)
            assert event is not None
            seen.append(event.kind)
            if event.kind == "lost":
                assert event.reason and "deleted" in event.reason
                break
        assert seen[0] == "acquired" and seen.count("renewed") >= 3
        assert lease.token is None
        events.close()


def test_lease_context_manager_releases(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as c:
        with mqstate.Lease(c, key, "ctx") as lease:
            assert lease.acquire(10) is not None
            assert c.get(key) == b"ctx"
        assert c.get(key) is None


def test_lock_guards_and_fences(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as a, mqstate.Client(server.url) as b:
        lock_a = mqstate.Lock(a, key + "/lock", "a")
        lock_b = mqstate.Lock(b, key + "/lock", "b")
        with lock_a.acquire(10, 5) as guard:
            assert guard.held and lock_a.holder() == b"a"
            a.set(key, "written under the lock", fencing_token=guard.token)
            with pytest.raises(mqstate.TimeoutError):
                lock_b.acquire(10, 0.3)
            old_token = guard.token
        assert not guard.held and lock_a.holder() is None
        assert guard.release() is False  # idempotent
        guard_b = lock_b.acquire(10, 5)
        assert guard_b.token > old_token
        b.set(key, "b was here", fencing_token=guard_b.token)
        # A writer still holding the old token is refused: the fencing at work.
        with pytest.raises(mqstate.ServiceError) as info:
            a.set(key, "late write", fencing_token=old_token)
        assert info.value.kind == "fencing_token_lower_version"
        assert a.get(key) == b"b was here"
        assert guard_b.release() is True


def test_lock_mutual_exclusion_between_threads(server: LocalServer, key: str) -> None:
    """8 threads, each its own holder, increment one counter under the lock."""
    with mqstate.Client(server.url) as c:
        c.set(key, "0")

        def work(i: int) -> None:
            lock = mqstate.Lock(c, key + "/lock", f"worker-{i}")
            for _ in range(5):
                with lock.acquire(10, 30) as guard:
                    n = int(c.get(key) or b"0")
                    c.set(key, str(n + 1), fencing_token=guard.token)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert c.get(key) == b"40"


def test_leader_election(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as a, mqstate.Client(server.url) as b:
        alice = mqstate.LeaderElection(a, key, "alice", renew_fraction=0.3)
        bob = mqstate.LeaderElection(b, key, "bob")
        bob_events = bob.events()
        token = alice.campaign(1, 5)
        assert alice.is_leader and alice.token == token
        assert bob.try_campaign(1) is None and not bob.is_leader
        assert bob.leader() == b"alice"
        event = bob_events.recv(timeout=5)
        assert event is not None and event.kind == "new_leader" and event.leader == b"alice"
        time.sleep(1.5)  # longer than the term: alice's automatic renewal keeps it
        assert alice.is_leader and bob.leader() == b"alice"

        elected: list[mqstate.Hlc] = []
        waiter = threading.Thread(target=lambda: elected.append(bob.campaign(1, 10)))
        waiter.start()
        assert alice.resign() is True and not alice.is_leader
        waiter.join(timeout=10)
        assert len(elected) == 1 and elected[0] > token and bob.is_leader
        # Bob learns that nobody led after alice resigned, and that he was elected (the two
        # come from two sources, in either order).
        seen: set[tuple[str, bytes | None]] = set()
        while not {("new_leader", None), ("elected", None)} <= seen:
            e = bob_events.recv(timeout=5)
            assert e is not None
            seen.add((e.kind, e.leader))
            if e.kind == "elected":
                assert e.token == elected[0]
        bob_events.close()
        with bob:
            pass  # leaving the with block resigns
        assert a.get(key) is None


def test_lock_argument_errors(client: mqstate.Client, key: str) -> None:
    lease = mqstate.Lease(client, key, "x")
    with pytest.raises(mqstate.InvalidArgument, match="ttl"):
        lease.acquire(0)
    with pytest.raises(mqstate.InvalidArgument, match="renew"):
        lease.renew()  # never acquired
    with pytest.raises(mqstate.InvalidArgument, match="renewal fraction"):
        mqstate.LeaderElection(client, key, "x", renew_fraction=1.5)
    with pytest.raises(mqstate.InvalidArgument):
        lease.auto_renew(0)
    with pytest.raises(TypeError):
        mqstate.Lease(object(), key, "x")  # type: ignore[arg-type]
    with pytest.raises(mqstate.InvalidArgument, match="empty"):
        mqstate.Lock(client, "", "x").acquire(1, 1)


@pytest.mark.asyncio
async def test_async_lease_lock_and_election(server: LocalServer, key: str) -> None:
    async with (
        mqstate.AsyncClient.connect(server.url) as a,
        mqstate.AsyncClient.connect(server.url) as b,
    ):
        lease = mqstate.AsyncLease(a, key + "/lease", "a")
        other = mqstate.AsyncLease(b, key + "/lease", "b")
        async with lease.events() as events:
            token = await lease.acquire(10)
            assert token is not None and lease.token == token
            assert await other.acquire(10) is None
            assert await other.holder() == b"a"
            renewed = await lease.renew()
            assert renewed is not None and renewed > token
            waiting = asyncio.ensure_future(other.acquire_wait(10, 10))
            await asyncio.sleep(0.1)
            assert not waiting.done()
            assert await lease.release() is True
            got = await asyncio.wait_for(waiting, 10)
            assert got > renewed
            kinds = []
            async for event in events:
                kinds.append(event.kind)
                if len(kinds) == 3:
                    break
            assert kinds == ["acquired", "renewed", "released"]
        await other.release()

        lock_a = mqstate.AsyncLock(a, key + "/lock", "a")
        lock_b = mqstate.AsyncLock(b, key + "/lock", "b")
        async with lock_a.acquire(10, 5) as guard:
            assert guard.held
            await a.set(key, "1", fencing_token=guard.token)
            with pytest.raises(mqstate.TimeoutError):
                await lock_b.acquire(10, 0.2)
        assert not guard.held and await lock_a.holder() is None
        guard_b = await lock_b.acquire(10, 5)
        assert guard_b.token > guard.token
        assert await guard_b.release() is True

        alice = mqstate.AsyncLeaderElection(a, key + "/election", "alice")
        bob = mqstate.AsyncLeaderElection(b, key + "/election", "bob")
        async with bob.events() as bob_events:
            first = await alice.campaign(5, 5)
            assert alice.is_leader
            assert await bob.try_campaign(5) is None
            campaign = asyncio.ensure_future(bob.campaign(5, 10))
            seen = await asyncio.wait_for(bob_events.__anext__(), 5)
            assert seen.kind == "new_leader" and seen.leader == b"alice"
            async with alice:
                pass  # resigns on exit
            token = await asyncio.wait_for(campaign, 10)
            assert token > first and bob.is_leader and await alice.leader() == b"bob"
            async for change in bob_events:
                if change.kind == "elected":
                    assert change.token == token
                    break
        assert await bob.resign() is True


@pytest.mark.asyncio
async def test_cancelling_acquire_wait(server: LocalServer, key: str) -> None:
    async with (
        mqstate.AsyncClient.connect(server.url) as a,
        mqstate.AsyncClient.connect(server.url) as b,
    ):
        assert await mqstate.AsyncLease(a, key, "a").acquire(30) is not None
        waiter = mqstate.AsyncLease(b, key, "b")
        task = asyncio.ensure_future(waiter.acquire_wait(30, 30))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Let the loop run the future's done callbacks (they abort the Rust task). A release
        # racing with the cancellation itself could still be seen by the waiter.
        await asyncio.sleep(0.05)
        await mqstate.AsyncLease(a, key, "a").release()
        await asyncio.sleep(0.2)
        # The cancelled wait did not go on to take the lease behind our back.
        assert await b.get(key) is None


def test_lock_edit_session_and_core_rules(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as c:
        lock = mqstate.Lock(c, key + "/lock", "me", session_id="s1")
        c.set(key, "1")
        assert lock.edit(key, 5, 10, lambda old: (old or b"") + b"+") == b"1+"
        assert c.get(key) == b"1+"

        class Refused(Exception):
            pass

        def refuse(old: bytes | None) -> bytes | None:
            raise Refused(old)

        with pytest.raises(Refused):
            lock.edit(key, 5, 10, refuse)
        assert c.get(key) == b"1+"  # nothing written
        assert lock.holder() is None  # released after the exception
        assert lock.edit(key, 5, 10, lambda old: None) is None
        assert c.get(key) is None
        # The rules live in the core: the same errors as every language.
        with pytest.raises(mqstate.InvalidArgument, match="lock name is empty"):
            mqstate.Lock(c, "", "me")
        with pytest.raises(mqstate.InvalidArgument, match="lease holder is empty"):
            mqstate.Lease(c, key, "")
        with pytest.raises(mqstate.InvalidArgument, match="cannot contain ':'"):
            mqstate.Hlc(1, 0, "a:b")


@pytest.mark.asyncio
async def test_async_lock_edit(server: LocalServer, key: str) -> None:
    async with mqstate.AsyncClient.connect(server.url) as c:
        lock = mqstate.AsyncLock(c, key + "/lock", "me")
        assert await lock.edit(key, 5, 10, lambda old: b"new" if old is None else old) == b"new"
        assert await c.get(key) == b"new"
        def fail(old: bytes | None) -> bytes | None:
            raise ZeroDivisionError(old)

        with pytest.raises(ZeroDivisionError):
            await lock.edit(key, 5, 10, fail)
        assert await lock.holder() is None


@pytest.mark.asyncio
async def test_async_lock_edit_awaits_a_coroutine_function(server: LocalServer, key: str) -> None:
    async with mqstate.AsyncClient.connect(server.url) as c:
        lock = mqstate.AsyncLock(c, key + "/lock", "me")
        seen: list[bytes | None] = []

        async def append(old: bytes | None) -> bytes:
            seen.append(old)
            # Awaits on the client's own loop while the lock is held: the edit waits for it.
            previous = await c.get(key)
            await asyncio.sleep(0.01)
            return (previous or b"") + b"+"

        assert await lock.edit(key, 5, 10, append) == b"+"
        assert await lock.edit(key, 5, 10, append) == b"++"
        assert seen == [None, b"+"]
        assert await c.get(key) == b"++"

        async def refuse(old: bytes | None) -> bytes | None:
            await asyncio.sleep(0)
            raise ZeroDivisionError(old)

        with pytest.raises(ZeroDivisionError):
            await lock.edit(key, 5, 10, refuse)
        assert await c.get(key) == b"++"  # nothing written
        assert await lock.holder() is None  # and unlocked

        async def not_bytes(old: bytes | None) -> object:
            return 42

        with pytest.raises(TypeError):
            await lock.edit(key, 5, 10, not_bytes)  # type: ignore[arg-type]
        assert await lock.holder() is None


def test_blocking_lock_edit_refuses_a_coroutine_function(server: LocalServer, key: str) -> None:
    with mqstate.Client(server.url) as c:
        lock = mqstate.Lock(c, key + "/lock", "me")

        async def coroutine_function(old: bytes | None) -> bytes:
            return b"never"

        with pytest.raises(TypeError):
            lock.edit(key, 5, 10, coroutine_function)  # type: ignore[arg-type]
        assert c.get(key) is None
        assert lock.holder() is None
