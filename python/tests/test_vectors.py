"""The shared vectors (tests/vectors/*.json) that apply to the Python API: HLC parsing,
formatting, ordering and equality through `mqstate.Hlc`. (The codec, topic and clock vectors
exercise internals that the Python API does not expose; the Rust suite runs them on the same
code.)"""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest

import mqstate
from conftest import vectors
from mqstate.testing import LocalServer

HLC: Any = vectors("hlc")


def _id(case: dict[str, str]) -> str:
    return repr(case.get("text", case.get("lower", case.get("a"))))[:40]


@pytest.mark.parametrize("case", HLC["valid"], ids=_id)
def test_valid(case: dict[str, str]) -> None:
    for text in (case["text"], case["text"].encode()):
        h = mqstate.Hlc.parse(text)
        assert h.ms == int(case["ms"])
        assert h.counter == int(case["counter"])
        assert h.node_id == case["node_id"]
        assert str(h) == case["display"]
        assert mqstate.Hlc.parse(str(h)) == h
        assert mqstate.Hlc(h.ms, h.counter, h.node_id) == h
        assert eval(repr(h), {"Hlc": mqstate.Hlc}) == h
        assert pickle.loads(pickle.dumps(h)) == h


@pytest.mark.parametrize("case", HLC["malformed"], ids=_id)
def test_malformed(case: dict[str, str]) -> None:
    with pytest.raises(mqstate.MalformedHlc) as info:
        mqstate.Hlc.parse(case["text"])
    assert info.value.reason == case["reason"]
    assert isinstance(info.value, mqstate.InvalidArgument)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("case", HLC["ordering"], ids=_id)
def test_ordering(case: dict[str, str]) -> None:
    lower = mqstate.Hlc.parse(case["lower"])
    higher = mqstate.Hlc.parse(case["higher"])
    assert lower < higher and lower <= higher and higher > lower and higher >= lower
    assert lower != higher and not lower == higher
    assert max(higher, lower) is higher
    assert sorted([higher, lower]) == [lower, higher]


@pytest.mark.parametrize("case", HLC["equal"], ids=_id)
def test_equal(case: dict[str, str]) -> None:
    a = mqstate.Hlc.parse(case["a"])
    b = mqstate.Hlc.parse(case["b"])
    assert a == b and not a != b and a <= b and a >= b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


def test_constructor_checks() -> None:
    with pytest.raises(mqstate.InvalidArgument, match="':'"):
        mqstate.Hlc(1, 2, "a:b")
    with pytest.raises(OverflowError):
        mqstate.Hlc(-1, 0, "n")
    with pytest.raises(OverflowError):
        mqstate.Hlc(2**64, 0, "n")
    h = mqstate.Hlc(2**64 - 1, 2**64 - 1, "")
    assert str(h) == "18446744073709551615:18446744073709551615:"
    with pytest.raises(TypeError):
        mqstate.Hlc.parse(5)  # type: ignore[arg-type]
    assert mqstate.Hlc(1, 0, "n") != "000000000000001:00000:n"


# --- requests.json: every request the codec vectors encode, sent through the API -------------

REQUESTS: Any = vectors("requests")
REPLIES: Any = vectors("replies")


def _field(case: dict[str, Any], name: str) -> bytes | None:
    """A vector's byte string: `name` as text, or `name_hex` as base16."""
    if name in case:
        return None if case[name] is None else str(case[name]).encode("latin-1")
    if f"{name}_hex" in case:
        return bytes.fromhex(case[f"{name}_hex"])
    return None


def _scan_vector_through_the_api(case: dict[str, Any]) -> None:
    """A SCAN vector: its pattern listed through `Client.scan`. The API never takes a token
    (it is opaque, kept inside the scan), so a vector with one is a next page's request: sent
    when a listing spans pages, with the token the server gave."""
    pattern = _field(case, "pattern")
    assert pattern is not None and pattern.count(b"*") == 1
    assert not set(pattern) & set(b"?[]\\"), "one '*' and no other metacharacter"
    next_page = _field(case, "token") is not None
    count = 1200 if next_page else 3  # more than two pages of at most 500 keys
    keys = {pattern.replace(b"*", f"{i:04d}".encode()) for i in range(count)}
    with LocalServer() as server, mqstate.Client(server.url) as c:
        for k in sorted(keys):
            assert c.set(k, b"v").applied
        assert pattern[:1] not in (b"*", b"~")
        c.set(b"~" + pattern.replace(b"*", b""), b"other")  # does not match
        scan = c.scan(pattern)
        pages = 0
        listed: list[bytes] = []
        while (page := scan.next_page()) is not None:
            pages += 1
            listed.extend(page)
        assert len(listed) == count and set(listed) == keys
        assert pages >= 3 if next_page else pages >= 1


@pytest.mark.parametrize("case", REQUESTS["encode"], ids=lambda c: c["name"])
def test_request_vectors_through_the_api(case: dict[str, Any]) -> None:
    if case["command"] == "SCAN":
        _scan_vector_through_the_api(case)
        return
    key = _field(case, "key")
    assert key is not None
    value = _field(case, "value")
    with LocalServer() as server, mqstate.Client(server.url) as c:
        command = case["command"]
        if command == "SET":
            assert value is not None
            condition = case.get("condition")
            expiry_ms = case.get("expiry_ms")
            outcome = c.set(
                key,
                value,
                nx=condition == "NX",
                nex=condition == "NEX",
                expiry=None if expiry_ms is None else expiry_ms / 1000,
            )
            assert outcome.applied
            if expiry_ms is None or expiry_ms >= 1000:
                assert c.get(key) == value
            else:  # a short PX: the key goes away by itself
                deadline = time.monotonic() + 5
                while c.get(key) is not None:
                    assert time.monotonic() < deadline, "the key did not expire"
                    time.sleep(0.02)
        elif command == "GET":
            assert c.get(key) is None
            c.set(key, b"\x00vector")
            assert c.get(key) == b"\x00vector"
        elif command == "DEL":
            assert c.delete(key) is False
            c.set(key, "x")
            assert c.delete(key) is True
        elif command == "VDEL":
            assert value is not None
            c.set(key, value + b"-other")
            assert c.vdel(key, value) == mqstate.VdelOutcome.VALUE_MISMATCH
            c.set(key, value)
            assert c.vdel(key, value) == mqstate.VdelOutcome.DELETED
        elif command == "KEYNOTIFY":
            with c.observe(key) as changes, mqstate.Client(server.url) as writer:
                if case["stop"]:
                    c.unobserve(key)
                    assert changes.recv(timeout=5) is None
                else:
                    writer.set(key, "notified")
                    change = changes.recv(timeout=5)
                    assert change is not None and change.key == key
                    assert change.value == b"notified"
        else:
            pytest.fail(f"a request vector this test does not know: {command}")


# --- replies.json: the service errors the local server can produce, through the API -----------

SERVICE_TEXT = {
    case["error"]["service"]: case["error"]["text"]
    for case in REPLIES["cases"]
    if case.get("error", {}).get("kind") == "service"
}


def test_service_error_vectors_through_the_api() -> None:
    raised: dict[str, mqstate.ServiceError] = {}

    def capture(call: Any) -> None:
        with pytest.raises(mqstate.ServiceError) as info:
            call()
        raised[info.value.kind] = info.value

    with LocalServer(max_keys=3) as server, mqstate.Client(server.url) as c:
        token = c.set("lease", "me", nex=True, expiry=30).version
        c.set("fenced", "v", fencing_token=token)
        capture(lambda: c.set("fenced", "w"))
        capture(lambda: c.delete("fenced", fencing_token=mqstate.Hlc(token.ms - 1, 0, "x")))
        capture(
            lambda: c.vdel("fenced", "v", fencing_token=mqstate.Hlc(token.ms + 3_600_000, 0, "x"))
        )
        c.set("third", "3")
        capture(lambda: c.set("fourth", "4"))
    assert set(raised) == {
        "fencing_token_required",
        "fencing_token_lower_version",
        "fencing_token_skew",
        "quota_exceeded",
    }
    for kind, error in raised.items():
        assert error.text == SERVICE_TEXT[kind], kind
        assert error.code == "service" and isinstance(error, mqstate.Error)
        assert SERVICE_TEXT[kind] in str(error)
