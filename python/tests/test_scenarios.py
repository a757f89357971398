"""Runs the behaviour scenarios shared by every language (``tests/scenarios/*.json``, format
in ``tests/scenarios/README.md``) against a real local state store, once with the blocking
``mqstate.Client`` and once with ``mqstate.AsyncClient``. A step type or field this runner
does not know fails it; the counts are printed at the end of the session."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import pathlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

import mqstate
from mqstate._errors import _BY_KIND
from mqstate.testing import LocalServer

SCENARIOS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.json"))
WAIT = 20.0  # seconds: anything that must happen may take this long on a busy machine

#: The fields each step type takes (besides ``op``, ``client`` and ``expect``).
STEPS: dict[str, set[str]] = {
    "connect": {"url", "host", "tls", "connect_timeout_ms"},
    "close": set(),
    "set": {"key", "value", "nx", "nex", "expiry_ms", "fencing_token", "save_version"},
    "get": {"key"},
    "del": {"key", "fencing_token"},
    "vdel": {"key", "value", "fencing_token"},
    "observe": {"key", "observer"},
    "expect_notification": {"observer", "operation", "value"},
    "flood": {"key", "count"},
    "expect_lagged": {"observer", "total"},
    "hlc": {"ms", "counter", "node_id"},
    "lease_acquire": {"lease", "name", "holder", "ttl_ms", "save_token"},
    "lease_auto_renew": {"lease", "fraction"},
    "expect_lease_event": {"lease", "event", "skip"},
    "lease_release": {"lease"},
    "lock": {"lock", "name", "holder", "session", "ttl_ms", "timeout_ms"},
    "lock_edit": {"lock", "name", "holder", "key", "ttl_ms", "timeout_ms", "new_value"},
    "unlock": {"lock"},
    "try_campaign": {"election", "name", "candidate", "term_ms"},
    "leader": {"election"},
    "resign": {"election"},
    "fill": {"prefix", "count", "start", "delete"},
    "scan": {"pattern"},
    "scan_open": {"scan", "pattern"},
    "scan_page": {"scan"},
    "scan_rest": {"scan", "must_include"},
}
BYTE_FIELDS = {"value", "leader", "old"}
#: Fields whose values are lists of byte strings (each compared as bytes).
BYTE_LIST_FIELDS = {"keys", "missing"}

#: (mode, scenarios, steps) run so far, printed by conftest's terminal summary.
COUNTS: dict[str, list[int]] = {}


def bytes_of(v: Any) -> bytes:
    """A scenario value as bytes: a string is its UTF-8, ``{"hex": ...}`` is binary."""
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, dict) and set(v) == {"hex"}:
        return bytes.fromhex(v["hex"])
    raise AssertionError(f"not a value: {v!r}")


def canonical(b: bytes | None) -> Any:
    if b is None:
        return None
    try:
        return b.decode()
    except UnicodeDecodeError:
        return {"hex": b.hex()}


async def resolve(x: Any) -> Any:
    """The result of a call of either client: awaited when it is awaitable."""
    return await x if inspect.isawaitable(x) else x


def validate(file: str, index: int, step: Any) -> str:
    assert isinstance(step, dict), f"{file} step {index}: not an object"
    op = step.get("op")
    if op not in STEPS:
        raise AssertionError(f"{file} step {index}: unknown step type {op!r}")
    unknown = set(step) - {"op", "client", "expect"} - STEPS[op]
    assert not unknown, f"{file} step {index}: step {op!r} takes no field(s) {sorted(unknown)}"
    return str(op)


class Run:
    """One scenario's clients and named objects, for the blocking or the asyncio API."""

    def __init__(self, is_async: bool, server_url: str, blackhole_port: int, name: str) -> None:
        self.is_async = is_async
        self.server_url = server_url
        self.blackhole_port = blackhole_port
        uid = f"{os.getpid()}-{time.time_ns()}"
        mode = "async" if is_async else "sync"
        self.uid = f"{uid}-{name}"
        self.prefix = f"scenarios/python-{mode}/{uid}/{name}/".encode()
        self.clients: dict[str, Any] = {}
        self.observers: dict[str, Any] = {}
        self.tokens: dict[str, mqstate.Hlc] = {}
        self.leases: dict[str, Any] = {}
        self.lease_events: dict[str, Any] = {}
        self.guards: dict[str, Any] = {}
        self.elections: dict[str, Any] = {}
        #: Open scans and the keys their pages listed so far.
        self.scans: dict[str, tuple[Any, list[bytes]]] = {}

    def subst(self, s: str) -> str:
        return (
            s.replace("{server}", self.server_url)
            .replace("{blackhole}", f"mqtt://127.0.0.1:{self.blackhole_port}")
            .replace("{blackhole_port}", str(self.blackhole_port))
            .replace("{uid}", self.uid)
        )

    def key(self, step: dict[str, Any], field: str) -> bytes:
        raw = bytes_of(step[field])
        return self.prefix + raw if raw else b""

    def listed(self, keys: list[bytes]) -> list[Any]:
        """Listed keys as the scan steps give them: without the run's prefix, sorted by bytes."""
        stripped = []
        for k in keys:
            assert k.startswith(self.prefix), f"{k!r} lacks the run's prefix"
            stripped.append(k[len(self.prefix) :])
        return [canonical(k) for k in sorted(stripped)]

    def client(self, step: dict[str, Any]) -> Any:
        name = step.get("client", "a")
        assert name in self.clients, f"no client {name!r} is open"
        return self.clients[name]

    def token(self, step: dict[str, Any]) -> mqstate.Hlc | None:
        name = step.get("fencing_token")
        return None if name is None else self.tokens[name]

    async def next_item(self, stream: Any) -> Any:
        """The next item of an observation or event stream (an error is raised)."""
        if self.is_async:
            return await asyncio.wait_for(stream.__anext__(), WAIT)
        item = stream.recv(timeout=WAIT)
        assert item is not None, "the stream ended"
        return item

    async def close(self, name: str) -> None:
        await resolve(self.clients.pop(name).close())

    async def execute(self, op: str, step: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if op == "connect":
            url = self.subst(step["url"]) if "url" in step else None
            kwargs: dict[str, Any] = {}
            if "host" in step:
                kwargs["host"] = self.subst(step["host"])
            if "tls" in step:
                kwargs["tls"] = step["tls"]
            if "connect_timeout_ms" in step:
                kwargs["connect_timeout"] = step["connect_timeout_ms"] / 1000
            client: Any
            if self.is_async:
                client = await mqstate.AsyncClient.connect(url, **kwargs)
            else:
                client = mqstate.Client(url, **kwargs)
            self.clients[step.get("client", "a")] = client
        elif op == "close":
            await self.close(step.get("client", "a"))
        elif op == "set":
            kwargs = {"nx": step.get("nx", False), "nex": step.get("nex", False)}
            if "expiry_ms" in step:
                kwargs["expiry"] = step["expiry_ms"] / 1000
            if "fencing_token" in step:
                kwargs["fencing_token"] = self.token(step)
            outcome = await resolve(
                self.client(step).set(self.key(step, "key"), bytes_of(step["value"]), **kwargs)
            )
            if "save_version" in step:
                self.tokens[step["save_version"]] = outcome.version
            out["applied"] = outcome.applied
        elif op == "get":
            out["value"] = canonical(await resolve(self.client(step).get(self.key(step, "key"))))
        elif op == "del":
            deleted = await resolve(
                self.client(step).delete(self.key(step, "key"), fencing_token=self.token(step))
            )
            out["deleted"] = 1 if deleted else 0
        elif op == "vdel":
            outcome = await resolve(
                self.client(step).vdel(
                    self.key(step, "key"), bytes_of(step["value"]), fencing_token=self.token(step)
                )
            )
            names = {
                mqstate.VdelOutcome.DELETED: "deleted",
                mqstate.VdelOutcome.NOT_FOUND: "not_found",
                mqstate.VdelOutcome.VALUE_MISMATCH: "value_mismatch",
            }
            out["outcome"] = names[outcome]
        elif op == "observe":
            observation = await resolve(self.client(step).observe(self.key(step, "key")))
            self.observers[step["observer"]] = observation
        elif op == "expect_notification":
            n = await self.next_item(self.observers[step["observer"]])
            out["operation"] = n.operation
            if n.operation == "set":
                out["value"] = canonical(n.value)
        elif op == "flood":
            client = self.client(step)
            key = self.key(step, "key")
            for i in range(step["count"]):
                outcome = await resolve(client.set(key, str(i)))
                assert outcome.applied, f"flood: SET #{i} not applied"
        elif op == "expect_lagged":
            observation = self.observers[step["observer"]]
            total = step["total"]
            received = lost = lags = 0
            while received + lost < total:
                try:
                    n = await self.next_item(observation)
                except mqstate.Lagged as e:
                    assert isinstance(e.missed, int) and e.missed > 0, f"lagged without a count: {e}"
                    lost += e.missed
                    lags += 1
                    continue
                assert n.operation == "set", "a flood gives set notifications only"
                received += 1
            assert received + lost == total
            assert lags >= 1, f"no lagged error after {total} unread notifications"
        elif op == "hlc":
            out["text"] = str(mqstate.Hlc(step["ms"], step["counter"], step["node_id"]))
        elif op == "lease_acquire":
            lease_cls: Any = mqstate.AsyncLease if self.is_async else mqstate.Lease
            lease = lease_cls(self.client(step), self.key(step, "name"), bytes_of(step["holder"]))
            token = await resolve(lease.acquire(step["ttl_ms"] / 1000))
            if "save_token" in step and token is not None:
                self.tokens[step["save_token"]] = token
            out["acquired"] = token is not None
            self.leases[step["lease"]] = lease
        elif op == "lease_auto_renew":
            lease = self.leases[step["lease"]]
            events = lease.events()
            lease.auto_renew(step["fraction"])
            self.lease_events[step["lease"]] = events
        elif op == "expect_lease_event":
            events = self.lease_events[step["lease"]]
            skip = step.get("skip", [])
            while True:
                event = await self.next_item(events)
                if event.kind == step["event"]:
                    break
                assert event.kind in skip, f"lease event {event.kind!r}, expected {step['event']!r}"
        elif op == "lease_release":
            out["released"] = await resolve(self.leases[step["lease"]].release())
        elif op == "lock":
            lock_cls: Any = mqstate.AsyncLock if self.is_async else mqstate.Lock
            session = {"session_id": bytes_of(step["session"])} if "session" in step else {}
            lock = lock_cls(
                self.client(step), self.key(step, "name"), bytes_of(step["holder"]), **session
            )
            guard = await resolve(lock.acquire(step["ttl_ms"] / 1000, step["timeout_ms"] / 1000))
            out["locked"] = True
            self.guards[step["lock"]] = guard
        elif op == "lock_edit":
            lock_cls = mqstate.AsyncLock if self.is_async else mqstate.Lock
            lock = lock_cls(self.client(step), self.key(step, "name"), bytes_of(step["holder"]))
            new_value = None if step["new_value"] is None else bytes_of(step["new_value"])
            seen: list[bytes | None] = []

            def edit(old: bytes | None) -> bytes | None:
                seen.append(old)
                return new_value

            async def edit_async(old: bytes | None) -> bytes | None:
                await asyncio.sleep(0)
                return edit(old)

            # The asyncio API gets a coroutine function (AsyncLock.edit awaits its result).
            written = await resolve(
                lock.edit(
                    self.key(step, "key"),
                    step["ttl_ms"] / 1000,
                    step["timeout_ms"] / 1000,
                    edit_async if self.is_async else edit,
                )
            )
            assert len(seen) == 1, f"the edit function was called {len(seen)} times"
            out["old"] = canonical(seen[0])
            out["value"] = canonical(written)
        elif op == "unlock":
            out["unlocked"] = await resolve(self.guards.pop(step["lock"]).release())
        elif op == "try_campaign":
            election_cls: Any = (
                mqstate.AsyncLeaderElection if self.is_async else mqstate.LeaderElection
            )
            election = election_cls(self.client(step), self.key(step, "name"), bytes_of(step["candidate"]))
            token = await resolve(election.try_campaign(step["term_ms"] / 1000))
            out["elected"] = token is not None
            self.elections[step["election"]] = election
        elif op == "leader":
            out["leader"] = canonical(await resolve(self.elections[step["election"]].leader()))
        elif op == "resign":
            out["resigned"] = await resolve(self.elections[step["election"]].resign())
        elif op == "fill":
            client = self.client(step)
            prefix = self.key(step, "prefix")
            start = step.get("start", 0)
            delete = step.get("delete") is True
            for i in range(start, start + step["count"]):
                k = prefix + f"{i:04d}".encode()
                if delete:
                    assert await resolve(client.delete(k)), f"fill: DEL #{i}"
                else:
                    outcome = await resolve(client.set(k, "v"))
                    assert outcome.applied, f"fill: SET #{i} not applied"
        elif op == "scan":
            # The language's own iteration: `for` over a Scan, `async for` over an AsyncScan.
            scan = self.client(step).scan(self.key(step, "pattern"))
            listed: list[bytes] = []
            if self.is_async:
                async for k in scan:
                    listed.append(k)
            else:
                for k in scan:
                    listed.append(k)
            out["count"] = len(listed)
            out["keys"] = self.listed(listed)
        elif op == "scan_open":
            self.scans[step["scan"]] = (self.client(step).scan(self.key(step, "pattern")), [])
        elif op == "scan_page":
            scan, listed = self.scans[step["scan"]]
            page = await resolve(scan.next_page())
            listed.extend(page or [])
            out["done"] = scan.done
        elif op == "scan_rest":
            scan, listed = self.scans.pop(step["scan"])
            while (page := await resolve(scan.next_page())) is not None:
                listed.extend(page)
            listed_once = set(listed)
            must = [self.prefix + bytes_of(k) for k in step["must_include"]]
            out["missing"] = self.listed([k for k in must if k not in listed_once])
            out["count"] = len(listed)
        else:
            raise AssertionError(f"unknown step type {op!r}")
        return out

    def check(self, step: dict[str, Any], out: dict[str, Any] | None, error: BaseException | None) -> None:
        expect: dict[str, Any] = step.get("expect", {})
        if "error" in expect:
            assert error is not None, f"expected an error of kind {expect['error']}, got {out}"
            kind = expect["error"]
            if kind != "any":
                cls = _BY_KIND[kind]
                assert isinstance(error, cls), f"expected {cls.__name__} ({kind}), got {error!r}"
            if "service" in expect:
                assert isinstance(error, mqstate.ServiceError)
                assert error.kind == expect["service"], f"service kind {error.kind}"
            for part in expect.get("message_contains", []):
                part = self.subst(part)
                assert part in str(error), f"the message {str(error)!r} does not contain {part!r}"
            return
        if error is not None:
            raise AssertionError(f"unexpected error: {error!r}") from error
        assert out is not None
        for field, want in expect.items():
            if field in BYTE_FIELDS and want is not None:
                want = canonical(bytes_of(want))
            if field in BYTE_LIST_FIELDS:
                want = [canonical(bytes_of(w)) for w in want]
            assert field in out, f"the step gives no {field!r} (it gives {out})"
            assert out[field] == want, f"{field}: got {out[field]!r}, expected {want!r}"


def not_run_reason(file: str, doc: Any) -> str | None:
    """Checks a scenario's top-level fields; the reason when Python cannot run it."""
    assert isinstance(doc, dict), f"{file}: not an object"
    unknown = set(doc) - {"description", "not_in", "steps"}
    assert not unknown, f"{file}: unknown top-level field(s) {sorted(unknown)}"
    not_in = doc.get("not_in", {})
    for lang, reason in not_in.items():
        assert lang in {"rust", "c", "python", "node"}, f"{file}: unknown language {lang!r}"
        assert isinstance(reason, str) and reason, f"{file}: not_in.{lang} must give the reason"
    reason = not_in.get("python")
    return None if reason is None else str(reason)


async def run_scenario(is_async: bool, path: pathlib.Path, server_url: str, blackhole_port: int) -> int:
    doc = json.loads(path.read_text(encoding="utf-8"))
    reason = not_run_reason(path.name, doc)
    if reason is not None:
        pytest.skip(f"not run in Python: {reason}")
    steps = doc["steps"]
    run = Run(is_async, server_url, blackhole_port, path.stem)
    try:
        for i, step in enumerate(steps, start=1):
            op = validate(path.name, i, step)
            out: dict[str, Any] | None = None
            error: BaseException | None = None
            try:
                out = await run.execute(op, step)
            except mqstate.Error as e:
                error = e
            try:
                run.check(step, out, error)
            except AssertionError as e:
                raise AssertionError(f"{path.name} step {i}: {json.dumps(step)}\n  {e}") from e
    finally:
        for name in list(run.clients):
            await run.close(name)
    return len(steps)


@pytest.fixture(scope="module")
def blackhole() -> Iterator[int]:
    """A TCP port that accepts connections (into the backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


def test_scenario_files_exist() -> None:
    assert FILES, f"no scenarios in {SCENARIOS}"


def _count(mode: str, steps: int) -> None:
    counts = COUNTS.setdefault(mode, [0, 0])
    counts[0] += 1
    counts[1] += steps


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_blocking(server: LocalServer, blackhole: int, path: pathlib.Path) -> None:
    _count("blocking", asyncio.run(run_scenario(False, path, server.url, blackhole)))


@pytest.mark.asyncio
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_scenario_asyncio(server: LocalServer, blackhole: int, path: pathlib.Path) -> None:
    _count("asyncio", await run_scenario(True, path, server.url, blackhole))
