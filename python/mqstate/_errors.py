"""The exceptions mqstate raises, and the one table from the core's stable error kinds to them.

Every exception is an :class:`Error`; its ``code`` is the core's stable kind string
(``"timeout"``, ``"service"``, ...), the same string the C, Node and Rust APIs expose.
"""

from __future__ import annotations

import builtins

__all__ = [
    "AuthenticationFailed",
    "ClockDrift",
    "ConnectionFailed",
    "Disconnected",
    "Error",
    "InvalidArgument",
    "Lagged",
    "LockLost",
    "MalformedHlc",
    "NotSupported",
    "ServiceError",
    "TimeoutError",
    "UnexpectedPayload",
]


class Error(Exception):
    """Base class of every error mqstate raises."""

    #: The stable kind of the error (the core's ``ErrorKind``), e.g. ``"timeout"``.
    code: str = "error"


class InvalidArgument(Error, ValueError):
    """The caller passed something the protocol cannot carry (an empty key, a zero expiry, ...).

    Nothing was sent.
    """

    code = "invalid_argument"


class MalformedHlc(InvalidArgument):
    """A string given to :meth:`mqstate.Hlc.parse` is not ``{ms}:{counter}:{node_id}``."""

    #: Why, as a stable code (``"too_few_parts"``, ``"invalid_ms"``, ...).
    reason: str

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class TimeoutError(Error, builtins.TimeoutError):
    """No response arrived within the request's timeout (also a built-in ``TimeoutError``)."""

    code = "timeout"


class Disconnected(Error, ConnectionError):
    """The connection is down or closed, and the request was not (or could not be) sent."""

    code = "disconnected"


class ConnectionFailed(Error, ConnectionError):
    """The connection could not be configured or established (bad URL, TLS files, refused...)."""

    code = "connection"


class ServiceError(Error):
    """The state store answered with an error (``-ERR text``)."""

    code = "service"
    #: The service error's stable name, e.g. ``"fencing_token_required"``; ``"unknown"`` for a
    #: text this version does not know.
    kind: str
    #: The exact text the server sent.
    text: str

    def __init__(self, message: str, kind: str, text: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.text = text


class UnexpectedPayload(Error):
    """A reply or notification was not one of the forms the protocol allows."""

    code = "unexpected_payload"


class ClockDrift(Error):
    """A version from the server is further ahead of the local clock than the allowed drift."""

    code = "clock_drift"


class Lagged(Error):
    """An observation's buffer overflowed: ``missed`` changes were dropped.

    The observation goes on (iterate again); ``get`` the key to resynchronise.
    """

    code = "lagged"
    #: How many changes were dropped.
    missed: int

    def __init__(self, message: str, missed: int) -> None:
        super().__init__(message)
        self.missed = missed


class AuthenticationFailed(Error, ConnectionError):
    """The server refused the credentials (wrong key or token, expired token, unknown device)."""

    code = "authentication"


class NotSupported(Error):
    """The operation does not exist for this protocol (IoT Hub's reject/abandon over MQTT)."""

    code = "not_supported"


class LockLost(Error):
    """An IoT Hub message can no longer be settled (completed, rejected, abandoned): the
    connection or link it arrived on closed, or the hub delivered it again after its lock timed
    out. Nothing was sent; the hub delivers the message again (settle that copy)."""

    code = "lock_lost"


#: The core's stable kind strings (``mqstate::ErrorKind::as_str``) to classes: the only place
#: they are mapped. A kind this version does not know becomes a plain :class:`Error`.
_BY_KIND: dict[str, type[Error]] = {
    "invalid_argument": InvalidArgument,
    "timeout": TimeoutError,
    "disconnected": Disconnected,
    "service": ServiceError,
    "unexpected_payload": UnexpectedPayload,
    "clock_drift": ClockDrift,
    "connection": ConnectionFailed,
    "lagged": Lagged,
    "authentication": AuthenticationFailed,
    "not_supported": NotSupported,
    "lock_lost": LockLost,
    # The binding's own kind: an HLC the caller gave does not parse.
    "malformed_hlc": MalformedHlc,
}


def _from_native(kind: str, message: str, detail: object) -> Error:
    """Builds the exception for an error of the native module (called from Rust)."""
    cls = _BY_KIND.get(kind, Error)
    error: Error
    if cls is ServiceError and isinstance(detail, tuple):
        error = ServiceError(message, str(detail[0]), str(detail[1]))
    elif cls is Lagged and isinstance(detail, int):
        error = Lagged(message, detail)
    elif cls is MalformedHlc and isinstance(detail, str):
        error = MalformedHlc(message, detail)
    elif cls in (ServiceError, Lagged, MalformedHlc):
        error = Error(message)
        error.code = kind
    else:
        error = cls(message)
        if cls is Error:
            error.code = kind
    return error


# Shown as `mqstate.TimeoutError` (where users import them from), not `mqstate._errors...`.
for _cls in (Error, *_BY_KIND.values()):
    _cls.__module__ = "mqstate"
del _cls
