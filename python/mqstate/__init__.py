"""mqstate: a client for the MQTT5 state store of Azure IoT Operations.

Blocking::

    import mqstate

    with mqstate.Client("mqtt://127.0.0.1:1883") as client:
        client.set("door", "open")
        print(client.get("door"))  # b'open'

asyncio::

    async with mqstate.AsyncClient.connect("mqtt://127.0.0.1:1883") as client:
        await client.set("door", "open")
        print(await client.get("door"))

Keys and values are ``bytes`` or ``str`` (UTF-8); values come back as ``bytes``, versions as
:class:`Hlc`. Errors are :class:`Error` subclasses. Leases, locks and leader election:
:class:`Lease`, :class:`Lock`, :class:`LeaderElection` (and their ``Async`` twins). Listing keys:
``client.scan(pattern)`` (:class:`Scan`, :class:`AsyncScan`). Tests run a local state store with
the ``mqstate`` binary (``mqstate serve --port 0``); :mod:`mqstate.testing` runs one in-process in
a build with the ``testing`` cargo feature (not the released wheel).
"""

from ._errors import (
    AuthenticationFailed,
    ClockDrift,
    ConnectionFailed,
    Disconnected,
    Error,
    InvalidArgument,
    Lagged,
    LockLost,
    MalformedHlc,
    NotSupported,
    ServiceError,
    TimeoutError,
    UnexpectedPayload,
)
from ._native import (
    AsyncClient,
    AsyncLeaderElection,
    AsyncLease,
    AsyncLock,
    AsyncLockGuard,
    AsyncObservation,
    AsyncScan,
    Call,
    Client,
    Hlc,
    LeaderElection,
    LeadershipEvent,
    LeadershipEvents,
    Lease,
    LeaseEvent,
    LeaseEvents,
    Lock,
    LockGuard,
    Notification,
    Observation,
    Pending,
    Scan,
    SetOutcome,
    VdelOutcome,
    Versioned,
    __version__,
)

__all__ = [
    "AsyncClient",
    "AsyncLeaderElection",
    "AsyncLease",
    "AsyncLock",
    "AsyncLockGuard",
    "AsyncObservation",
    "AsyncScan",
    "AuthenticationFailed",
    "Call",
    "ClockDrift",
    "Client",
    "ConnectionFailed",
    "Disconnected",
    "Error",
    "Hlc",
    "InvalidArgument",
    "Lagged",
    "LeaderElection",
    "LeadershipEvent",
    "LeadershipEvents",
    "Lease",
    "LeaseEvent",
    "LeaseEvents",
    "Lock",
    "LockGuard",
    "LockLost",
    "MalformedHlc",
    "NotSupported",
    "Notification",
    "Observation",
    "Pending",
    "Scan",
    "ServiceError",
    "SetOutcome",
    "TimeoutError",
    "UnexpectedPayload",
    "VdelOutcome",
    "Versioned",
    "__version__",
]
