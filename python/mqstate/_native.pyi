"""Type stubs of the native module (checked against it by ``python -m mypy.stubtest``)."""

import asyncio
import contextvars
import datetime
import os
from collections.abc import Awaitable, Callable, Generator
from types import GenericAlias, TracebackType
from typing import Any, Final, Generic, Literal, TypeVar, final

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)
#: Keys and values: ``bytes`` as they are, ``str`` as UTF-8.
_Bytes = bytes | str
#: A duration: seconds, or a ``datetime.timedelta``.
_Duration = float | datetime.timedelta
_Path = str | os.PathLike[str]

__version__: Final[str]
__all__ = [
    "Call",
    "AsyncDeviceClient",
    "AsyncMessages",
    "C2dMessage",
    "DeviceClient",
    "Messages",
    "AsyncClient",
    "AsyncLeaderElection",
    "AsyncLease",
    "AsyncLock",
    "AsyncLockGuard",
    "AsyncObservation",
    "AsyncScan",
    "Client",
    "Hlc",
    "LeaderElection",
    "LeadershipEvent",
    "LeadershipEvents",
    "Lease",
    "LeaseEvent",
    "LeaseEvents",
    "LocalIotHub",
    "LocalServer",
    "Lock",
    "LockGuard",
    "Notification",
    "Observation",
    "Pending",
    "Scan",
    "SetOutcome",
    "VdelOutcome",
    "Versioned",
    "_SilentBroker",
    "_FaultProxy",
    "__version__",
    "_bench_rust_blocking_get",
    "_bench_rust_get",
    "_panicking_call",
]

@final
class Hlc:
    """A hybrid logical clock value ``{ms}:{counter}:{node_id}``: a version, a fencing token.

    Ordered by milliseconds, then counter, then node id; hashable; ``str()`` gives the wire form.
    """

    def __new__(cls, ms: int, counter: int, node_id: str) -> Hlc: ...
    @staticmethod
    def parse(text: str | bytes) -> Hlc:
        """Parses ``{ms}:{counter}:{node_id}``; raises :class:`mqstate.MalformedHlc`."""

    @property
    def ms(self) -> int: ...
    @property
    def counter(self) -> int: ...
    @property
    def node_id(self) -> str: ...
    def __lt__(self, other: Hlc, /) -> bool: ...
    def __le__(self, other: Hlc, /) -> bool: ...
    def __gt__(self, other: Hlc, /) -> bool: ...
    def __ge__(self, other: Hlc, /) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __ne__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[type[Hlc], tuple[int, int, str]]: ...

@final
class Versioned:
    """A value with its version (from ``get_versioned``)."""

    @property
    def value(self) -> bytes: ...
    @property
    def version(self) -> Hlc: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class SetOutcome:
    """The outcome of a SET; true in a boolean context when it was applied."""

    @property
    def applied(self) -> bool:
        """False when the ``nx`` / ``nex`` condition failed."""

    @property
    def version(self) -> Hlc:
        """The version the server answered with (the key's new version when applied)."""

    def __bool__(self) -> bool: ...

@final
class VdelOutcome:
    """The outcome of a VDEL."""

    DELETED: Final[VdelOutcome]
    NOT_FOUND: Final[VdelOutcome]
    VALUE_MISMATCH: Final[VdelOutcome]
    @property
    def deleted(self) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __ne__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __int__(self) -> int: ...

@final
class Notification:
    """A change of an observed key."""

    @property
    def key(self) -> bytes: ...
    @property
    def operation(self) -> Literal["set", "delete"]: ...
    @property
    def value(self) -> bytes | None:
        """The new value for ``"set"``; ``None`` for ``"delete"`` (DEL, VDEL or expiry)."""

    @property
    def version(self) -> Hlc | None:
        """The key's new version (``None`` only for a synthesized delete)."""

    @property
    def synthesized(self) -> bool:
        """True when made up by the client after a reconnect, because the key changed meanwhile."""

@final
class Observation:
    """The changes of one key, as a blocking iterator; ends on ``close()``, at the end of its
    ``with`` block, when the client closes, or after ``unobserve(key)``."""

    @property
    def key(self) -> bytes: ...
    def recv(self, timeout: _Duration | None = None) -> Notification | None:
        """The next change, or ``None`` once ended; raises :class:`mqstate.TimeoutError`
        when ``timeout`` passes first."""

    def __iter__(self) -> Observation: ...
    def __next__(self) -> Notification: ...
    def close(self) -> None: ...
    def __enter__(self) -> Observation: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...

@final
class AsyncObservation:
    """The changes of one key, as an async iterator; ends like :class:`Observation`."""

    @property
    def key(self) -> bytes: ...
    def __aiter__(self) -> AsyncObservation: ...
    def __anext__(self) -> Call[Notification]: ...
    def close(self) -> None: ...
    def aclose(self) -> Call[None]: ...
    def __aenter__(self) -> Call[AsyncObservation]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...

@final
class Scan:
    """The keys that match a glob pattern, from :meth:`Client.scan`: an iterator of keys
    (``bytes``) that asks for each page when the keys of the one before have been read, or a
    page at a time with :meth:`next_page`. Each page is one request (the GIL is released while
    it waits). The iteration raises an error once and then ends; :meth:`next_page` after an
    error asks for the same page again.

    Every key that exists from the first page to the last is listed exactly once; a key created
    or deleted meanwhile may or may not be. Do not rely on the order.

    Example::

        for key in client.scan("line3/*"):
            print(key)

        scan = client.scan(b"sensor/?/temperature")
        while (keys := scan.next_page()) is not None:
            print(len(keys), "keys; last page:", scan.done)
    """

    @property
    def pattern(self) -> bytes:
        """The pattern being listed."""

    @property
    def done(self) -> bool:
        """Whether the last page has been received (then :meth:`next_page` returns ``None``)."""

    def next_page(self) -> list[bytes] | None:
        """The keys of the next page (possibly none: a page may be empty and not the last),
        or ``None`` once the last page has been received. After an error, calling again asks
        for the same page."""

    def __iter__(self) -> Scan: ...
    def __next__(self) -> bytes: ...

@final
class AsyncScan:
    """The keys that match a glob pattern, from :meth:`AsyncClient.scan`: an async iterator
    of keys (``bytes``), or a page at a time with ``await`` :meth:`next_page`. Ends, and
    raises, like :class:`Scan`.

    Example::

        async for key in client.scan("line3/*"):
            print(key)

        scan = client.scan(b"sensor/?/temperature")
        while (keys := await scan.next_page()) is not None:
            print(len(keys), "keys; last page:", scan.done)
    """

    @property
    def pattern(self) -> bytes:
        """The pattern being listed."""

    @property
    def done(self) -> bool:
        """Whether the last page has been received (then :meth:`next_page` gives ``None``)."""

    def next_page(self) -> Call[list[bytes] | None]:
        """The keys of the next page (possibly none), or ``None`` once the last page has
        been received. After an error, calling again asks for the same page; cancelling the
        call leaves the scan where it was."""

    def __aiter__(self) -> AsyncScan: ...
    def __anext__(self) -> Call[bytes]: ...

@final
class Call(Generic[_T_co]):
    """What every asyncio method returns: a future-like of the running event loop.

    ``asyncio.isfuture(call)`` is true, so ``await``, Tasks, ``asyncio.gather``,
    ``wait_for``, ``wait``, ``shield`` and ``as_completed`` take it as they take an
    ``asyncio.Future``. The work starts when the method is called. ``cancel()`` drops the
    work at once (a request is withdrawn). Done callbacks run on the loop's thread: those of
    a call that finishes while it is awaited run as its result is delivered (the awaiting
    Task resumes in the same loop iteration), the others through ``loop.call_soon``. An
    exception nobody retrieved is reported to the loop's exception handler.
    """

    @property
    def _asyncio_future_blocking(self) -> bool: ...
    @_asyncio_future_blocking.setter
    def _asyncio_future_blocking(self, value: bool) -> None: ...
    def get_loop(self) -> asyncio.AbstractEventLoop: ...
    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> _T_co: ...
    def exception(self) -> BaseException | None: ...
    def cancel(self, msg: Any | None = None) -> bool: ...
    def _make_cancelled_error(self) -> asyncio.CancelledError: ...
    @property
    def _cancel_message(self) -> Any | None: ...
    def add_done_callback(
        self, fn: Callable[[Call[_T_co]], object], /, *, context: contextvars.Context | None = None
    ) -> None: ...
    def remove_done_callback(self, fn: Callable[[Call[_T_co]], object], /) -> int: ...
    def __await__(self) -> Generator[Any, None, _T_co]: ...
    def __iter__(self) -> Generator[Any, None, _T_co]: ...
    def __next__(self) -> Any: ...
    def __class_getitem__(cls, item: Any, /) -> GenericAlias: ...

@final
class Pending(Generic[_T]):
    """Started work (a connection, an observation): ``await`` it, or use it in ``async with``."""

    def __await__(self) -> Generator[Any, Any, _T]: ...
    def __aenter__(self) -> Call[_T]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...

@final
class Client:
    """A blocking client; thread-safe, every call releases the GIL while it waits.

    ``Client(url=None, **options)`` connects to ``url`` (``mqtt://host:port`` or
    ``mqtts://...``, default ``mqtt://127.0.0.1:1883``); keyword options override the URL's.
    """

    def __new__(
        cls,
        url: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        password_file: _Path | None = None,
        tls: bool | None = None,
        ca_file: _Path | None = None,
        cert_file: _Path | None = None,
        key_file: _Path | None = None,
        server_name: str | None = None,
        sat_file: _Path | None = None,
        keep_alive: _Duration | None = None,
        session_expiry: _Duration | None = None,
        request_timeout: _Duration | None = None,
        connect_timeout: _Duration | None = None,
    ) -> Client: ...
    @staticmethod
    def from_env(
        *,
        host: str | None = None,
        port: int | None = None,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        password_file: _Path | None = None,
        tls: bool | None = None,
        ca_file: _Path | None = None,
        cert_file: _Path | None = None,
        key_file: _Path | None = None,
        server_name: str | None = None,
        sat_file: _Path | None = None,
        keep_alive: _Duration | None = None,
        session_expiry: _Duration | None = None,
        request_timeout: _Duration | None = None,
        connect_timeout: _Duration | None = None,
    ) -> Client:
        """Connects with the ``AIO_*`` environment variables (keyword options override them)."""

    @property
    def client_id(self) -> str: ...
    @property
    def state(self) -> Literal["connecting", "connected", "reconnecting", "closed"]: ...
    @property
    def timeout(self) -> float:
        """This handle's request timeout, in seconds."""

    def with_timeout(self, timeout: _Duration) -> Client:
        """A handle on the same connection whose requests use ``timeout``."""

    def get(self, key: _Bytes) -> bytes | None: ...
    def get_versioned(self, key: _Bytes) -> Versioned | None: ...
    def set(
        self,
        key: _Bytes,
        value: _Bytes,
        *,
        nx: bool = False,
        nex: bool = False,
        expiry: _Duration | None = None,
        fencing_token: Hlc | None = None,
        persist: bool = False,
    ) -> SetOutcome: ...
    def delete(self, key: _Bytes, *, fencing_token: Hlc | None = None) -> bool:
        """True if the key existed."""

    def vdel(
        self, key: _Bytes, value: _Bytes, *, fencing_token: Hlc | None = None
    ) -> VdelOutcome: ...
    def scan(self, pattern: _Bytes) -> Scan:
        """Lists the keys that match a glob pattern (Redis ``MATCH`` syntax over bytes: ``*``,
        ``?``, ``[a-z]``, ``[^...]``, ``\\`` escapes). Sends nothing yet; an empty pattern
        raises :class:`mqstate.InvalidArgument`, a malformed one (``"k["``) makes the first
        page raise :class:`mqstate.ServiceError`.

        Example::

            for key in client.scan("line3/*"):
                print(key)  # bytes
        """

    def observe(self, key: _Bytes) -> Observation: ...
    def unobserve(self, key: _Bytes) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Client: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...
    def _requests_in_flight(self) -> int: ...

@final
class AsyncClient:
    """An asyncio client: methods return awaitables that run on the library's own runtime;
    cancelling one (or the task awaiting it) cancels the request."""

    @staticmethod
    def connect(
        url: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        password_file: _Path | None = None,
        tls: bool | None = None,
        ca_file: _Path | None = None,
        cert_file: _Path | None = None,
        key_file: _Path | None = None,
        server_name: str | None = None,
        sat_file: _Path | None = None,
        keep_alive: _Duration | None = None,
        session_expiry: _Duration | None = None,
        request_timeout: _Duration | None = None,
        connect_timeout: _Duration | None = None,
    ) -> Pending[AsyncClient]:
        """``client = await AsyncClient.connect(url)`` or ``async with AsyncClient.connect(url) as client:``."""

    @staticmethod
    def from_env(
        *,
        host: str | None = None,
        port: int | None = None,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        password_file: _Path | None = None,
        tls: bool | None = None,
        ca_file: _Path | None = None,
        cert_file: _Path | None = None,
        key_file: _Path | None = None,
        server_name: str | None = None,
        sat_file: _Path | None = None,
        keep_alive: _Duration | None = None,
        session_expiry: _Duration | None = None,
        request_timeout: _Duration | None = None,
        connect_timeout: _Duration | None = None,
    ) -> Pending[AsyncClient]: ...
    @property
    def client_id(self) -> str: ...
    @property
    def state(self) -> Literal["connecting", "connected", "reconnecting", "closed"]: ...
    @property
    def timeout(self) -> float: ...
    def with_timeout(self, timeout: _Duration) -> AsyncClient: ...
    def get(self, key: _Bytes) -> Call[bytes | None]: ...
    def get_versioned(self, key: _Bytes) -> Call[Versioned | None]: ...
    def set(
        self,
        key: _Bytes,
        value: _Bytes,
        *,
        nx: bool = False,
        nex: bool = False,
        expiry: _Duration | None = None,
        fencing_token: Hlc | None = None,
        persist: bool = False,
    ) -> Call[SetOutcome]: ...
    def delete(
        self, key: _Bytes, *, fencing_token: Hlc | None = None
    ) -> Call[bool]: ...
    def vdel(
        self, key: _Bytes, value: _Bytes, *, fencing_token: Hlc | None = None
    ) -> Call[VdelOutcome]: ...
    def scan(self, pattern: _Bytes) -> AsyncScan:
        """Lists the keys that match a glob pattern, like :meth:`Client.scan`; not awaitable
        itself (it sends nothing yet). An empty pattern raises :class:`mqstate.InvalidArgument`.

        Example::

            async for key in client.scan("line3/*"):
                print(key)  # bytes
        """

    def observe(self, key: _Bytes) -> Pending[AsyncObservation]:
        """``changes = await client.observe(key)`` or ``async with client.observe(key) as changes:``."""

    def unobserve(self, key: _Bytes) -> Call[None]: ...
    def close(self) -> Call[None]: ...
    def __aenter__(self) -> Call[AsyncClient]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...
    def _requests_in_flight(self) -> int: ...

@final
class LeaseEvent:
    """What happened to a lease."""

    @property
    def kind(self) -> Literal["acquired", "renewed", "lost", "released", "unknown"]: ...
    @property
    def token(self) -> Hlc | None:
        """The new fencing token (``"acquired"``, ``"renewed"``)."""

    @property
    def reason(self) -> str | None:
        """Why the lease was lost (``"lost"``)."""

@final
class LeadershipEvent:
    """What a candidate learns about an election."""

    @property
    def kind(
        self,
    ) -> Literal["elected", "renewed", "lost", "resigned", "new_leader", "unknown"]: ...
    @property
    def token(self) -> Hlc | None:
        """This candidate's new fencing token (``"elected"``, ``"renewed"``)."""

    @property
    def reason(self) -> str | None:
        """Why the leadership was lost (``"lost"``)."""

    @property
    def leader(self) -> bytes | None:
        """The new leader (``"new_leader"``); ``None`` when nobody leads."""

@final
class LeaseEvents:
    """A lease's events: ``for`` / ``recv()`` (blocking) or ``async for``; ends on ``close()``
    or at the end of its ``with`` / ``async with`` block."""

    def recv(self, timeout: _Duration | None = None) -> LeaseEvent | None: ...
    def __iter__(self) -> LeaseEvents: ...
    def __next__(self) -> LeaseEvent: ...
    def __aiter__(self) -> LeaseEvents: ...
    def __anext__(self) -> Call[LeaseEvent]: ...
    def close(self) -> None: ...
    def __enter__(self) -> LeaseEvents: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...
    def __aenter__(self) -> Call[LeaseEvents]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...

@final
class LeadershipEvents:
    """An election's events, seen by one candidate; used like :class:`LeaseEvents`."""

    def recv(self, timeout: _Duration | None = None) -> LeadershipEvent | None: ...
    def __iter__(self) -> LeadershipEvents: ...
    def __next__(self) -> LeadershipEvent: ...
    def __aiter__(self) -> LeadershipEvents: ...
    def __anext__(self) -> Call[LeadershipEvent]: ...
    def close(self) -> None: ...
    def __enter__(self) -> LeadershipEvents: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...
    def __aenter__(self) -> Call[LeadershipEvents]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...

@final
class Lease:
    """A lease on a key (blocking): one holder at a time, for a ttl the holder renews."""

    def __new__(
        cls, client: Client, name: _Bytes, holder: _Bytes, *, session_id: _Bytes | None = None
    ) -> Lease: ...
    @property
    def name(self) -> bytes: ...
    @property
    def holder_value(self) -> bytes:
        """``holder``, or ``holder:session_id``."""

    @property
    def token(self) -> Hlc | None:
        """The fencing token while the lease is believed held."""

    def auto_renew(self, fraction: float = 0.5) -> None: ...
    def stop_renewal(self) -> None: ...
    def events(self) -> LeaseEvents: ...
    def acquire(self, ttl: _Duration) -> Hlc | None:
        """Tries once: the token, or ``None`` if someone else holds the lease."""

    def acquire_wait(self, ttl: _Duration, timeout: _Duration) -> Hlc: ...
    def renew(self) -> Hlc | None: ...
    def release(self) -> bool: ...
    def holder(self) -> bytes | None: ...
    def __enter__(self) -> Lease: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...

@final
class AsyncLease:
    """A lease on a key (asyncio)."""

    def __new__(
        cls,
        client: AsyncClient,
        name: _Bytes,
        holder: _Bytes,
        *,
        session_id: _Bytes | None = None,
    ) -> AsyncLease: ...
    @property
    def name(self) -> bytes: ...
    @property
    def holder_value(self) -> bytes: ...
    @property
    def token(self) -> Hlc | None: ...
    def auto_renew(self, fraction: float = 0.5) -> None: ...
    def stop_renewal(self) -> None: ...
    def events(self) -> LeaseEvents: ...
    def acquire(self, ttl: _Duration) -> Call[Hlc | None]: ...
    def acquire_wait(self, ttl: _Duration, timeout: _Duration) -> Call[Hlc]: ...
    def renew(self) -> Call[Hlc | None]: ...
    def release(self) -> Call[bool]: ...
    def holder(self) -> Call[bytes | None]: ...
    def __aenter__(self) -> Call[AsyncLease]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...

@final
class LockGuard:
    """A held lock: ``token`` fences the writes it protects."""

    @property
    def token(self) -> Hlc: ...
    @property
    def held(self) -> bool: ...
    def release(self) -> bool: ...
    def __enter__(self) -> LockGuard: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...

@final
class AsyncLockGuard:
    """A held lock (asyncio)."""

    @property
    def token(self) -> Hlc: ...
    @property
    def held(self) -> bool: ...
    def release(self) -> Call[bool]: ...
    def __aenter__(self) -> Call[AsyncLockGuard]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...

@final
class Lock:
    """A lock (blocking): ``with lock.acquire(ttl, timeout) as guard:``.

    An empty ``name`` or ``holder`` raises ``InvalidArgument``; ``session_id`` makes the holder
    ``holder:session_id``.
    """

    def __new__(
        cls, client: Client, name: _Bytes, holder: _Bytes, *, session_id: _Bytes | None = None
    ) -> Lock: ...
    @property
    def name(self) -> bytes: ...
    def acquire(self, ttl: _Duration, timeout: _Duration) -> LockGuard:
        """Takes the lock for ``ttl``, waiting up to ``timeout`` for it.

        Raises ``mqstate.TimeoutError`` (also a ``builtins.TimeoutError``) if the lock could
        not be had within ``timeout``.
        """
    def holder(self) -> bytes | None: ...
    def edit(
        self,
        key: _Bytes,
        ttl: _Duration,
        timeout: _Duration,
        f: Callable[[bytes | None], _Bytes | None],
    ) -> bytes | None:
        """A fenced read-modify-write under the lock: ``f(old)`` gives the new value (None
        deletes the key); an exception raised by ``f`` writes nothing and propagates. The lock
        is released in every case; ``mqstate.TimeoutError`` if it could not be had in time.
        ``f`` is a plain function (``TypeError`` if it returns an awaitable: use
        ``AsyncLock.edit`` for a coroutine function)."""

@final
class AsyncLock:
    """A lock (asyncio): ``async with lock.acquire(ttl, timeout) as guard:``."""

    def __new__(
        cls,
        client: AsyncClient,
        name: _Bytes,
        holder: _Bytes,
        *,
        session_id: _Bytes | None = None,
    ) -> AsyncLock: ...
    @property
    def name(self) -> bytes: ...
    def acquire(self, ttl: _Duration, timeout: _Duration) -> Pending[AsyncLockGuard]:
        """``await`` it for the guard; raises ``mqstate.TimeoutError`` if the lock could not
        be had within ``timeout``."""
    def holder(self) -> Call[bytes | None]: ...
    def edit(
        self,
        key: _Bytes,
        ttl: _Duration,
        timeout: _Duration,
        f: Callable[[bytes | None], _Bytes | None | Awaitable[_Bytes | None]],
    ) -> Call[bytes | None]:
        """``Lock.edit`` for asyncio. ``f`` may be a coroutine function (``async def``): its
        result is awaited on the running loop while the lock is held, and may itself await
        the client. A plain function works too."""

@final
class LeaderElection:
    """Leader election (blocking): the leader holds the election's lease, renewed for it."""

    def __new__(
        cls,
        client: Client,
        election: _Bytes,
        candidate: _Bytes,
        *,
        renew_fraction: float = 0.5,
    ) -> LeaderElection: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def token(self) -> Hlc | None: ...
    def campaign(self, term: _Duration, timeout: _Duration) -> Hlc: ...
    def try_campaign(self, term: _Duration) -> Hlc | None: ...
    def resign(self) -> bool: ...
    def leader(self) -> bytes | None: ...
    def events(self) -> LeadershipEvents: ...
    def __enter__(self) -> LeaderElection: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...

@final
class AsyncLeaderElection:
    """Leader election (asyncio)."""

    def __new__(
        cls,
        client: AsyncClient,
        election: _Bytes,
        candidate: _Bytes,
        *,
        renew_fraction: float = 0.5,
    ) -> AsyncLeaderElection: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def token(self) -> Hlc | None: ...
    def campaign(self, term: _Duration, timeout: _Duration) -> Call[Hlc]: ...
    def try_campaign(self, term: _Duration) -> Call[Hlc | None]: ...
    def resign(self) -> Call[bool]: ...
    def leader(self) -> Call[bytes | None]: ...
    def events(self) -> Pending[LeadershipEvents]: ...
    def __aenter__(self) -> Call[AsyncLeaderElection]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Call[bool]: ...

# The test tooling below (LocalServer, _SilentBroker, _FaultProxy, _bench_*, _panicking_call,
# LocalIotHub) is in the module only when it is built with the `testing` cargo feature (as
# scripts/test-python builds it, and stubtest checks it); the released wheel has none of it.

@final
class LocalServer:
    """A local state store (embedded MQTT5 broker + store) in this process, on 127.0.0.1."""

    def __new__(
        cls,
        *,
        port: int = 0,
        max_keys: int | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        persist: Literal["all", "requested"] = "all",
        username: str | None = None,
        password: str | None = None,
    ) -> LocalServer:
        """With ``data_dir``, keys persist there (``persist``: every key, or only those SET
        with ``persist=True``) and survive a restart on the same directory. With ``username``
        and ``password``, the server is secured: TLS (see ``tls_url``, ``ca_file``) and that
        one user."""
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:PORT``."""

    @property
    def tls_port(self) -> int | None:
        """The TLS listener's port when started with ``username`` and ``password``."""

    @property
    def tls_url(self) -> str | None:
        """``mqtts://localhost:TLS_PORT`` when secured."""

    @property
    def ca_file(self) -> str | None:
        """The generated CA certificate (PEM) to trust when secured."""

    @property
    def running(self) -> bool: ...
    def stop(self) -> None: ...
    def __enter__(self) -> LocalServer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...

@final
class _SilentBroker:
    """Test-only: a broker with no state store behind it (requests stay unanswered)."""

    def __new__(cls) -> _SilentBroker: ...
    @property
    def url(self) -> str: ...
    def stop(self) -> None: ...

@final
class _FaultProxy:
    """Test-only: the Rust fault-injection TCP proxy (127.0.0.1, a free port) to
    ``127.0.0.1:upstream_port``."""

    def __new__(cls, upstream_port: int) -> _FaultProxy: ...
    @property
    def port(self) -> int: ...
    def drop_connections(self) -> None: ...
    def set_refusing(self, refusing: bool) -> None: ...
    def set_stalled(self, stalled: bool) -> None: ...
    def set_delay(self, seconds: float) -> None: ...
    def cut_next_packet(self) -> None: ...
    def disconnect_on(self, kind_name: str, direction: str) -> None:
        """``direction``: ``"to_broker"`` or ``"to_client"``."""

    def reject_next(self, kind_name: str) -> None: ...
    @property
    def faults_applied(self) -> int: ...
    def stop(self) -> None: ...

def _bench_rust_get(url: str, n: int, depth: int, key: str = "mqstate-bench") -> float:
    """Benchmark helper: GETs per second of a Rust client, ``depth`` in flight."""

def _bench_rust_blocking_get(url: str, n: int, key: str = "mqstate-bench") -> float:
    """Benchmark helper: GETs per second of a Rust blocking client, one at a time."""

def _panicking_call(message: str) -> Awaitable[None]:
    """Test helper: an awaitable whose Rust future panics with ``message``."""


_Properties = list[tuple[str, str | None]]

@final
class C2dMessage:
    """A received cloud-to-device message: ``complete()``, or over AMQP ``reject()`` or
    ``abandon()``, settles it."""

    @property
    def payload(self) -> bytes: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def user_id(self) -> str | None: ...
    @property
    def to(self) -> str | None: ...
    @property
    def expiry_time(self) -> str | None: ...
    @property
    def content_type(self) -> str | None: ...
    @property
    def content_encoding(self) -> str | None: ...
    @property
    def ack(self) -> str | None: ...
    @property
    def properties(self) -> _Properties:
        """Application properties in order; a ``None`` value is a null property."""

    @property
    def other_system_properties(self) -> _Properties: ...
    @property
    def topic(self) -> str: ...
    @property
    def is_redelivery(self) -> bool: ...
    @property
    def delivery_count(self) -> int | None:
        """Over AMQP, the hub's earlier deliveries of this message (0 first); ``None`` over MQTT."""

    def complete(self) -> None: ...
    def reject(self) -> None:
        """AMQP: dead-letters the message; raises :class:`mqstate.NotSupported` over MQTT."""

    def abandon(self) -> None:
        """AMQP: the hub delivers it again; raises :class:`mqstate.NotSupported` over MQTT."""

@final
class Messages:
    def __iter__(self) -> Messages: ...
    def __next__(self) -> C2dMessage | None: ...

@final
class AsyncMessages:
    def __aiter__(self) -> AsyncMessages: ...
    def __anext__(self) -> Call[C2dMessage]: ...

@final
class DeviceClient:
    """A blocking IoT Hub device client; the constructor connects."""

    def __new__(
        cls,
        connection_string: str,
        *,
        transport: Literal["mqtt", "amqp", "amqp-ws"] | str | None = None,
        host: str | None = None,
        port: int | None = None,
        tls: bool | None = None,
        ca_file: _Path | None = None,
        cert_file: _Path | None = None,
        key_file: _Path | None = None,
        token_lifetime: float | datetime.timedelta | None = None,
        receive_buffer: int | None = None,
        keep_alive: float | datetime.timedelta | None = None,
        operation_timeout: float | datetime.timedelta | None = None,
        connect_timeout: float | datetime.timedelta | None = None,
    ) -> DeviceClient: ...
    @property
    def device_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def stats(self) -> dict[str, int]: ...
    def receive(self, timeout: float | datetime.timedelta | None = None) -> C2dMessage | None: ...
    def messages(self) -> Messages: ...
    def send_event(
        self,
        payload: bytes | str,
        properties: dict[str, str | None] | _Properties | None = None,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
    ) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> DeviceClient: ...
    def __exit__(self, *exc_info: object) -> bool: ...

@final
class AsyncDeviceClient:
    """An asyncio IoT Hub device client: ``await AsyncDeviceClient.connect(cs)``."""

    @staticmethod
    def connect(
        connection_string: str,
        *,
        transport: Literal["mqtt", "amqp", "amqp-ws"] | str | None = None,
        host: str | None = None,
        port: int | None = None,
        tls: bool | None = None,
        ca_file: _Path | None = None,
        cert_file: _Path | None = None,
        key_file: _Path | None = None,
        token_lifetime: float | datetime.timedelta | None = None,
        receive_buffer: int | None = None,
        keep_alive: float | datetime.timedelta | None = None,
        operation_timeout: float | datetime.timedelta | None = None,
        connect_timeout: float | datetime.timedelta | None = None,
    ) -> Pending[AsyncDeviceClient]: ...
    @property
    def device_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def stats(self) -> dict[str, int]: ...
    def receive(self) -> Call[C2dMessage]: ...
    def messages(self) -> AsyncMessages: ...
    def send_event(
        self,
        payload: bytes | str,
        properties: dict[str, str | None] | _Properties | None = None,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
    ) -> Call[None]: ...
    def close(self) -> Call[None]: ...
    def __aenter__(self) -> Call[AsyncDeviceClient]: ...
    def __aexit__(self, *exc_info: object) -> Call[bool]: ...

# With the `testing` cargo feature only (see LocalServer).
@final
class LocalIotHub:
    """A local IoT Hub in this process (plain TCP device endpoint on 127.0.0.1)."""

    def __new__(
        cls,
        *,
        lock_timeout: float | datetime.timedelta | None = None,
        max_delivery_count: int | None = None,
        device_tls: bool = False,
    ) -> LocalIotHub: ...
    @property
    def port(self) -> int: ...
    @property
    def amqp_port(self) -> int: ...
    @property
    def https_port(self) -> int: ...
    @property
    def ca_pem(self) -> str | None: ...
    def feedback(self, message_id: str) -> str | None: ...
    def dead_lettered(self, device_id: str) -> int: ...
    def add_device(self, device_id: str) -> str:
        """Registers a device; returns its connection string (connect with port=, tls=False)."""

    def add_x509_device(self, device_id: str, thumbprint: str) -> str:
        """Registers a self-signed X.509 device by its certificate's thumbprint (hex); returns
        its connection string (x509=true)."""

    def send(
        self,
        device_id: str,
        payload: bytes | str,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        user_id: str | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
        properties: _Properties | None = None,
        ack: str | None = None,
    ) -> None: ...
    def queue_depth(self, device_id: str) -> int: ...
    def completed(self, device_id: str) -> int: ...
    def telemetry(self, device_id: str) -> list[tuple[bytes, _Properties, _Properties]]: ...
    def stop(self) -> None: ...
    def __enter__(self) -> LocalIotHub: ...
    def __exit__(self, *exc_info: object) -> bool: ...
