"""Listing keys (SCAN) with the blocking and the asyncio client, against the local state store:
every key listed exactly once across pages, binary keys and glob metacharacters, patterns,
the errors (an empty pattern before anything is sent, a malformed one from the server), the
page API and the iterator API, and what a failed page leaves behind."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

import mqstate
from mqstate._native import _FaultProxy, _SilentBroker
from mqstate.testing import LocalServer

COUNT = 3000
#: The most keys the local server puts on one page (docs/protocol.md, "Listing keys: SCAN").
PAGE_MAX = 500


@pytest.fixture(scope="module")
def many(server: LocalServer) -> tuple[bytes, set[bytes]]:
    """3,000 keys under a prefix of their own: ``{prefix}0000`` ... ``{prefix}2999``."""
    prefix = f"scan/{os.getpid()}-{time.time_ns()}/many/".encode()
    keys = {prefix + f"{i:04d}".encode() for i in range(COUNT)}

    async def fill() -> None:
        async with mqstate.AsyncClient.connect(server.url) as c:
            ordered = sorted(keys)
            for chunk in range(0, COUNT, 500):
                outcomes = await asyncio.gather(*(c.set(k, "v") for k in ordered[chunk : chunk + 500]))
                assert all(o.applied for o in outcomes)

    asyncio.run(fill())
    return prefix, keys


@pytest.fixture
def prefix(key: str) -> bytes:
    """A prefix no other test (and no other run) uses."""
    return f"{key}/{os.getpid()}-{time.time_ns()}/".encode()


@pytest_asyncio.fixture
async def aclient(server: LocalServer) -> AsyncIterator[mqstate.AsyncClient]:
    async with mqstate.AsyncClient.connect(server.url) as c:
        yield c


@pytest.fixture
def proxy(server: LocalServer) -> Iterator[_FaultProxy]:
    p = _FaultProxy(server.port)
    try:
        yield p
    finally:
        p.stop()


#: Keys with bytes that are not UTF-8, NUL, CR LF, and every glob metacharacter.
ODD_KEYS = [
    b"\xff\xfe\x00binary",
    b"\x80\r\nline",
    b"star*key",
    b"starXkey",
    b"what?",
    b"[class]",
    b"back\\slash",
    b"caf\xc3\xa9",  # UTF-8 "café"
]

# --- blocking -------------------------------------------------------------------------------


def test_every_key_is_listed_exactly_once_by_iteration(
    client: mqstate.Client, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, keys = many
    scan = client.scan(prefix + b"*")
    assert isinstance(scan, mqstate.Scan) and scan.pattern == prefix + b"*"
    assert not scan.done
    listed = list(scan)
    assert all(isinstance(k, bytes) for k in listed)
    assert len(listed) == COUNT
    assert set(listed) == keys
    assert scan.done
    assert scan.next_page() is None
    assert list(scan) == []  # an ended iteration stays ended


def test_every_key_is_listed_exactly_once_by_pages(
    client: mqstate.Client, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, keys = many
    scan = client.scan(prefix.decode() + "*")  # str is its UTF-8
    pages: list[list[bytes]] = []
    while (page := scan.next_page()) is not None:
        assert isinstance(page, list)
        assert len(page) <= PAGE_MAX
        pages.append(page)
    assert scan.done
    assert scan.next_page() is None and scan.next_page() is None
    listed = [k for page in pages for k in page]
    assert len(listed) == COUNT and set(listed) == keys
    assert len(pages) >= COUNT // PAGE_MAX


def test_done_turns_true_with_the_last_page(
    client: mqstate.Client, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, keys = many
    scan = client.scan(prefix + b"*")
    seen: list[bytes] = []
    dones: list[bool] = []
    while not scan.done:
        page = scan.next_page()
        assert page is not None
        seen.extend(page)
        dones.append(scan.done)
    assert dones[-1] and not any(dones[:-1])
    assert len(seen) == COUNT and set(seen) == keys


def test_question_mark_and_prefix_patterns(
    client: mqstate.Client, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, _ = many
    assert sorted(client.scan(prefix + b"00?0")) == [prefix + f"00{d}0".encode() for d in range(10)]
    assert sorted(client.scan(prefix + b"12*")) == [prefix + f"{i}".encode() for i in range(1200, 1300)]
    assert sorted(client.scan(prefix + b"299[5-9]")) == [
        prefix + f"{i}".encode() for i in range(2995, 3000)
    ]


def test_binary_keys_and_glob_metacharacters(client: mqstate.Client, prefix: bytes) -> None:
    for k in ODD_KEYS:
        assert client.set(prefix + k, b"v").applied
    listed = list(client.scan(prefix + b"*"))
    assert sorted(listed) == sorted(prefix + k for k in ODD_KEYS)
    assert len(listed) == len(ODD_KEYS)
    assert list(client.scan(prefix + b"\xff\xfe*")) == [prefix + b"\xff\xfe\x00binary"]
    assert list(client.scan(prefix + b"\x80\r\n*")) == [prefix + b"\x80\r\nline"]
    assert list(client.scan(prefix + b"star\\*key")) == [prefix + b"star*key"]
    assert sorted(client.scan(prefix + b"star?key")) == [prefix + b"star*key", prefix + b"starXkey"]
    assert list(client.scan(prefix + b"what\\?")) == [prefix + b"what?"]
    assert list(client.scan(prefix + b"\\[class\\]")) == [prefix + b"[class]"]
    assert list(client.scan(prefix + b"back\\\\slash")) == [prefix + b"back\\slash"]
    assert list(client.scan(prefix.decode() + "café")) == [prefix + "café".encode()]


def test_no_match_is_an_empty_iteration(client: mqstate.Client, prefix: bytes) -> None:
    assert list(client.scan(prefix + b"nothing-here*")) == []
    scan = client.scan(prefix + b"nothing-here*")
    pages: list[list[bytes]] = []
    while (page := scan.next_page()) is not None:
        pages.append(page)
    assert pages and all(page == [] for page in pages)
    assert scan.done


def test_an_empty_pattern_is_refused_before_anything_is_sent(
    silent_broker: _SilentBroker,
) -> None:
    # A broker that never answers: anything sent would wait for the request timeout.
    with mqstate.Client(silent_broker.url, request_timeout=5) as c:
        started = time.monotonic()
        for empty in ("", b""):
            with pytest.raises(mqstate.InvalidArgument, match="pattern") as info:
                c.scan(empty)
            assert info.value.code == "invalid_argument"
            assert isinstance(info.value, ValueError)
        assert time.monotonic() - started < 1
        assert c._requests_in_flight() == 0
        with pytest.raises(TypeError, match="pattern must be bytes or str"):
            c.scan(42)  # type: ignore[arg-type]


def test_a_malformed_pattern_is_the_servers_error(client: mqstate.Client) -> None:
    scan = client.scan("k[")  # nothing is sent yet: the server judges the pattern
    with pytest.raises(mqstate.ServiceError, match=r"no closing '\]'") as info:
        scan.next_page()
    assert info.value.code == "service"
    assert "no closing ']'" in info.value.text
    assert not scan.done
    # The scan stays where it was: the same page is asked for again, and fails again.
    with pytest.raises(mqstate.ServiceError, match=r"no closing '\]'"):
        scan.next_page()

    # The iteration raises the error once, then ends.
    it = client.scan("k[")
    with pytest.raises(mqstate.ServiceError, match=r"no closing '\]'"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert list(it) == []
    with pytest.raises(mqstate.ServiceError):  # the page call still asks again
        it.next_page()


def test_a_failed_page_leaves_the_scan_where_it_was(
    proxy: _FaultProxy, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, keys = many
    with mqstate.Client(host="127.0.0.1", port=proxy.port, request_timeout=1) as c:
        scan = c.scan(prefix + b"*")
        first = scan.next_page()
        assert first and not scan.done
        proxy.set_stalled(True)
        try:
            # The iterator has no key at hand: it asks for the next page, which fails.
            with pytest.raises(mqstate.TimeoutError):
                next(scan)
            with pytest.raises(StopIteration):  # the iteration ended with its error
                next(scan)
            with pytest.raises(mqstate.TimeoutError):
                scan.next_page()
        finally:
            proxy.set_stalled(False)
        assert not scan.done
        rest: list[bytes] = []
        while (page := scan.next_page()) is not None:  # the same page as the failed ones
            rest.extend(page)
        listed = first + rest
        assert len(listed) == COUNT and set(listed) == keys


def test_a_blocking_page_releases_the_gil(silent_broker: _SilentBroker) -> None:
    stop = threading.Event()
    ticks = 0

    def python_work() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    spinner = threading.Thread(target=python_work)
    with mqstate.Client(silent_broker.url, request_timeout=0.5) as c:
        scan = c.scan("*")
        spinner.start()
        try:
            time.sleep(0.05)
            before = ticks
            with pytest.raises(mqstate.TimeoutError):
                scan.next_page()
            with pytest.raises(mqstate.TimeoutError):
                next(scan)
            # A plain Python loop advanced meanwhile (it could not have with the GIL held).
            assert ticks - before > 10_000
        finally:
            stop.set()
            spinner.join()


def test_repr(client: mqstate.Client, prefix: bytes) -> None:
    scan = client.scan(prefix + b"x*")
    assert repr(scan) == f"<mqstate.Scan pattern={prefix + b'x*'!r}>"
    assert list(scan) == []
    assert repr(scan).endswith(" done>")


# --- asyncio --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_every_key_is_listed_exactly_once_by_iteration(
    aclient: mqstate.AsyncClient, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, keys = many
    scan = aclient.scan(prefix + b"*")  # not awaitable: nothing is sent yet
    assert isinstance(scan, mqstate.AsyncScan) and scan.pattern == prefix + b"*"
    assert not scan.done
    listed = [k async for k in scan]
    assert all(isinstance(k, bytes) for k in listed)
    assert len(listed) == COUNT
    assert set(listed) == keys
    assert scan.done
    assert await scan.next_page() is None
    assert [k async for k in scan] == []


@pytest.mark.asyncio
async def test_async_every_key_is_listed_exactly_once_by_pages(
    aclient: mqstate.AsyncClient, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, keys = many
    scan = aclient.scan(prefix.decode() + "*")
    pages: list[list[bytes]] = []
    dones: list[bool] = []
    while (page := await scan.next_page()) is not None:
        assert len(page) <= PAGE_MAX
        pages.append(page)
        dones.append(scan.done)
    assert dones[-1] and not any(dones[:-1])
    assert await scan.next_page() is None
    listed = [k for page in pages for k in page]
    assert len(listed) == COUNT and set(listed) == keys
    assert len(pages) >= COUNT // PAGE_MAX


@pytest.mark.asyncio
async def test_async_patterns_binary_keys_and_no_match(
    aclient: mqstate.AsyncClient, many: tuple[bytes, set[bytes]], prefix: bytes
) -> None:
    many_prefix, _ = many
    assert sorted([k async for k in aclient.scan(many_prefix + b"00?0")]) == [
        many_prefix + f"00{d}0".encode() for d in range(10)
    ]
    assert sorted([k async for k in aclient.scan(many_prefix + b"12*")]) == [
        many_prefix + f"{i}".encode() for i in range(1200, 1300)
    ]
    await asyncio.gather(*(aclient.set(prefix + k, b"v") for k in ODD_KEYS))
    listed = [k async for k in aclient.scan(prefix + b"*")]
    assert sorted(listed) == sorted(prefix + k for k in ODD_KEYS)
    assert [k async for k in aclient.scan(prefix + b"\xff\xfe*")] == [prefix + b"\xff\xfe\x00binary"]
    assert [k async for k in aclient.scan(prefix + b"star\\*key")] == [prefix + b"star*key"]
    assert sorted([k async for k in aclient.scan(prefix + b"star?key")]) == [
        prefix + b"star*key",
        prefix + b"starXkey",
    ]
    assert [k async for k in aclient.scan(prefix + b"nothing-here*")] == []
    empty = aclient.scan(prefix + b"nothing-here*")
    assert await empty.next_page() == [] and empty.done
    assert await empty.next_page() is None


@pytest.mark.asyncio
async def test_async_an_empty_pattern_is_refused_before_anything_is_sent(
    silent_broker: _SilentBroker,
) -> None:
    async with mqstate.AsyncClient.connect(silent_broker.url, request_timeout=5) as c:
        for empty in ("", b""):
            with pytest.raises(mqstate.InvalidArgument, match="pattern"):
                c.scan(empty)  # raised by the call itself, not by an awaitable
        assert c._requests_in_flight() == 0


@pytest.mark.asyncio
async def test_async_a_malformed_pattern_is_the_servers_error(
    aclient: mqstate.AsyncClient,
) -> None:
    scan = aclient.scan("k[")
    for _ in range(2):  # the same page is asked for again, and fails again
        with pytest.raises(mqstate.ServiceError, match=r"no closing '\]'") as info:
            await scan.next_page()
        assert info.value.code == "service"
        assert not scan.done

    it = aclient.scan(b"k[")
    with pytest.raises(mqstate.ServiceError, match=r"no closing '\]'"):
        await it.__anext__()
    with pytest.raises(StopAsyncIteration):  # the iteration ended with its error
        await it.__anext__()
    assert [k async for k in it] == []
    with pytest.raises(mqstate.ServiceError):
        await it.next_page()


@pytest.mark.asyncio
async def test_async_a_failed_or_cancelled_page_leaves_the_scan_where_it_was(
    proxy: _FaultProxy, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, keys = many
    async with mqstate.AsyncClient.connect(
        host="127.0.0.1", port=proxy.port, request_timeout=1
    ) as c:
        scan = c.scan(prefix + b"*")
        first = await scan.next_page()
        assert first and not scan.done
        proxy.set_stalled(True)
        try:
            with pytest.raises(mqstate.TimeoutError):
                await scan.__anext__()
            with pytest.raises(StopAsyncIteration):
                await scan.__anext__()
            with pytest.raises(mqstate.TimeoutError):
                await scan.next_page()
            with pytest.raises(asyncio.TimeoutError):  # cancelled while it waits
                await asyncio.wait_for(scan.next_page(), 0.2)
        finally:
            proxy.set_stalled(False)
        assert not scan.done
        rest: list[bytes] = []
        while (page := await scan.next_page()) is not None:
            rest.extend(page)
        listed = first + rest
        assert len(listed) == COUNT and set(listed) == keys


@pytest.mark.asyncio
async def test_async_concurrent_anext_calls_share_one_iteration(
    aclient: mqstate.AsyncClient, many: tuple[bytes, set[bytes]]
) -> None:
    prefix, _ = many
    scan = aclient.scan(prefix + b"12*")
    got = await asyncio.gather(*(scan.__anext__() for _ in range(100)))
    assert sorted(got) == [prefix + f"{i}".encode() for i in range(1200, 1300)]
    with pytest.raises(StopAsyncIteration):
        await scan.__anext__()


def test_async_repr(server: LocalServer) -> None:
    async def main() -> None:
        async with mqstate.AsyncClient.connect(server.url) as c:
            scan = c.scan(b"nothing/at/all/*")
            assert repr(scan) == "<mqstate.AsyncScan pattern=b'nothing/at/all/*'>"
            assert [k async for k in scan] == []
            assert repr(scan) == "<mqstate.AsyncScan pattern=b'nothing/at/all/*' done>"

    asyncio.run(main())
