"""Fault scenarios through the Rust fault-injection proxy (the one the Rust suite uses):
drop, stall, cut mid-packet, delay, disconnect on PUBLISH, rejected PUBACK. Every request ends
with an answer or a typed error, and the client (and its observation) work again after."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

import mqstate
from mqstate._native import _FaultProxy
from mqstate.testing import LocalServer

TYPED = (mqstate.TimeoutError, mqstate.Disconnected, mqstate.ConnectionFailed)


@pytest.fixture
def proxy(server: LocalServer) -> Iterator[_FaultProxy]:
    p = _FaultProxy(server.port)
    try:
        yield p
    finally:
        p.stop()


def _until_answered(client: mqstate.Client, key: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            client.get(key)
            return
        except TYPED:
            assert time.monotonic() < deadline, "the client did not recover"
            time.sleep(0.05)


def _next_value(changes: mqstate.Observation, value: bytes, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no notification {value!r}"
        try:
            n = changes.recv(timeout=left)
        except TYPED:
            continue  # an error item (a retry notice) is informative only
        assert n is not None, "the observation ended"
        if n.value == value:
            return


FAULTS: dict[str, tuple[Callable[[_FaultProxy], None], Callable[[_FaultProxy], None]]] = {
    "drop": (lambda p: p.drop_connections(), lambda p: None),
    "stall": (lambda p: p.set_stalled(True), lambda p: p.set_stalled(False)),
    "delay": (lambda p: p.set_delay(0.05), lambda p: p.set_delay(0)),
    "cut": (lambda p: p.cut_next_packet(), lambda p: None),
    "disconnect_on_publish": (lambda p: p.disconnect_on("publish", "to_broker"), lambda p: None),
    "reject_puback": (lambda p: p.reject_next("puback"), lambda p: None),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault(server: LocalServer, proxy: _FaultProxy, key: str, fault: str) -> None:
    inject, heal = FAULTS[fault]
    with (
        mqstate.Client(port=proxy.port, host="127.0.0.1", request_timeout=2) as client,
        mqstate.Client(server.url) as writer,
    ):
        client.set(key, "start")
        with client.observe(key) as changes:
            inject(proxy)
            for i in range(4):
                try:
                    client.set(f"{key}/{i}", "x")
                except TYPED:
                    pass
            heal(proxy)
            _until_answered(client, key)
            writer.set(key, "healed")
            _next_value(changes, b"healed")


def test_bad_fault_arguments_are_typed_errors(proxy: _FaultProxy) -> None:
    with pytest.raises(mqstate.InvalidArgument, match="unknown packet kind"):
        proxy.reject_next("pingreq")
    with pytest.raises(mqstate.InvalidArgument, match="unknown direction"):
        proxy.disconnect_on("publish", "sideways")
