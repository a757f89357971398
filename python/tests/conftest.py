"""Fixtures: a local state store (the way a user's own suite would start one), clients on it,
and a broker with no state store behind it (for timeouts and cancellation)."""

from __future__ import annotations

import json
import sys
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

import mqstate
from mqstate._native import _SilentBroker
from mqstate.testing import LocalServer

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "vectors"


@pytest.fixture(scope="session")
def server() -> Iterator[LocalServer]:
    """One local state store for the whole session (127.0.0.1, a free port)."""
    with LocalServer() as s:
        yield s


@pytest.fixture
def client(server: LocalServer) -> Iterator[mqstate.Client]:
    with mqstate.Client(server.url) as c:
        yield c


@pytest.fixture
def silent_broker() -> Iterator[_SilentBroker]:
    broker = _SilentBroker()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A key no other test uses."""
    return f"test/{request.node.name}"


def vectors(name: str) -> Any:
    with open(VECTORS / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many shared behaviour scenarios and steps ran (tests/scenarios), per API."""
    module = sys.modules.get("test_scenarios")
    counts: dict[str, list[int]] = getattr(module, "COUNTS", {})
    for mode, (scenarios, steps) in sorted(counts.items()):
        terminalreporter.write_line(
            f"python {mode}: {scenarios} scenarios, {steps} steps passed (tests/scenarios)"
        )
