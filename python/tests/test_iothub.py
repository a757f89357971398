"""The IoT Hub device client (sync and asyncio) against the in-process local IoT Hub."""

from __future__ import annotations

import asyncio
import hashlib
import pathlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

import mqstate
from mqstate.iothub import AsyncDeviceClient, DeviceClient
from mqstate.testing import LocalIotHub

WAIT = 30.0


@pytest.fixture
def hub() -> Iterator[LocalIotHub]:
    with LocalIotHub(lock_timeout=2) as h:
        yield h


def connect(hub: LocalIotHub, device: str = "dev1") -> DeviceClient:
    cs = hub.add_device(device)
    return DeviceClient(cs, port=hub.port, tls=False)


def eventually(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_properties_null_empty_and_url_decoding(hub: LocalIotHub) -> None:
    with connect(hub) as client:
        assert client.state == "connected"
        hub.send(
            "dev1",
            b"\x00body",
            message_id="id 1/\u00e9",
            correlation_id="c&1",
            user_id="u=1",
            content_type="application/json",
            content_encoding="utf-8",
            properties=[("colour", "dark blue/&x=y"), ("nothing", None), ("empty", "")],
        )
        msg = client.receive(timeout=WAIT)
        assert msg is not None
        assert msg.payload == b"\x00body"
        assert msg.message_id == "id 1/\u00e9"
        assert msg.correlation_id == "c&1"
        assert msg.user_id == "u=1"
        assert msg.to == "/devices/dev1/messages/devicebound"
        assert msg.expiry_time is not None and msg.expiry_time.endswith("Z")
        assert msg.content_type == "application/json"
        assert msg.content_encoding == "utf-8"
        assert msg.properties == [("colour", "dark blue/&x=y"), ("nothing", None), ("empty", "")]
        assert not msg.is_redelivery
        assert hub.queue_depth("dev1") == 1
        msg.complete()
        eventually(lambda: hub.completed("dev1") == 1, "completed")
        with pytest.raises(mqstate.InvalidArgument):
            msg.complete()


def test_reject_and_abandon_are_not_supported(hub: LocalIotHub) -> None:
    with connect(hub) as client:
        hub.send("dev1", b"x", message_id="m1")
        msg = client.receive(timeout=WAIT)
        assert msg is not None
        for op in (msg.reject, msg.abandon):
            with pytest.raises(mqstate.NotSupported, match="not supported over MQTT"):
                op()
        msg.complete()


def test_uncompleted_message_is_redelivered_after_lock_timeout(hub: LocalIotHub) -> None:
    with connect(hub) as client:
        hub.send("dev1", b"x", message_id="again")
        first = client.receive(timeout=WAIT)
        second = client.receive(timeout=WAIT)
        assert first is not None and second is not None
        assert second.message_id == "again"
        assert second.is_redelivery
        second.complete()
        eventually(lambda: hub.queue_depth("dev1") == 0, "completed")


def test_out_of_order_completion_loses_nothing(hub: LocalIotHub) -> None:
    with connect(hub) as client:
        for i in range(5):
            hub.send("dev1", str(i), message_id=f"m{i}")
        msgs = [client.receive(timeout=WAIT) for _ in range(5)]
        assert [m.message_id for m in msgs if m] == [f"m{i}" for i in range(5)]
        for m in reversed(msgs[1:]):
            assert m is not None
            m.complete()
        time.sleep(0.3)
        assert hub.queue_depth("dev1") == 5  # held behind m0
        assert msgs[0] is not None
        msgs[0].complete()
        eventually(lambda: hub.queue_depth("dev1") == 0, "all completed")
        # Counted once the PUBACKs' write is flushed, which can come after the hub read them.
        eventually(lambda: client.stats["acknowledged"] == 5, "all acknowledged")


def test_offline_messages_arrive_and_iterator_ends_on_close(hub: LocalIotHub) -> None:
    cs = hub.add_device("dev2")
    DeviceClient(cs, port=hub.port, tls=False).close()
    for i in range(3):
        hub.send("dev2", b"offline", message_id=f"o{i}")
    client = DeviceClient(cs, port=hub.port, tls=False)
    seen = []
    for msg in client.messages():
        assert msg is not None
        seen.append(msg.message_id)
        msg.complete()
        if len(seen) == 3:
            client.close()
    assert seen == ["o0", "o1", "o2"]


def test_telemetry_and_errors(hub: LocalIotHub) -> None:
    with connect(hub) as client:
        client.send_event(
            bytes(range(256)),
            [("place", "a/b&c"), ("flag", None), ("empty", "")],
            message_id="t1",
        )
        [(body, system, props)] = hub.telemetry("dev1")
        assert body == bytes(range(256))
        assert ("$.mid", "t1") in system
        assert dict(props) == {"place": "a/b&c", "flag": None, "empty": ""}
        with pytest.raises(mqstate.InvalidArgument):
            client.send_event(b"x", {"$.mid": "no"})
    with pytest.raises(mqstate.AuthenticationFailed):
        DeviceClient(
            f"HostName=localhost;DeviceId=dev1;SharedAccessKey=d3Jvbmcga2V5;GatewayHostName=127.0.0.1",
            port=hub.port,
            tls=False,
        )
    with pytest.raises(mqstate.InvalidArgument, match="HostName"):
        DeviceClient("DeviceId=x;SharedAccessKey=abc=")


def test_asyncio_iterator_and_complete(hub: LocalIotHub) -> None:
    cs = hub.add_device("adev")

    async def main() -> list[str | None]:
        got: list[str | None] = []
        async with AsyncDeviceClient.connect(cs, port=hub.port, tls=False) as client:
            # A receive cancelled by a timeout does not lose the message it was about to take.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.receive(), 0.2)
            for i in range(3):
                hub.send("adev", b"a", message_id=f"a{i}")
            async for msg in client.messages():
                got.append(msg.message_id)
                msg.complete()
                if len(got) == 3:
                    break
            await client.send_event(b"hi", {"k": "v"})
        return got

    assert asyncio.run(main()) == ["a0", "a1", "a2"]
    eventually(lambda: hub.queue_depth("adev") == 0, "all completed")



# --- AMQP: complete, reject, abandon --------------------------------------------------------


@pytest.fixture
def amqp_hub() -> Iterator[LocalIotHub]:
    with LocalIotHub(lock_timeout=2, max_delivery_count=2) as h:
        yield h


def amqp_options(hub: LocalIotHub, tmp_path: pathlib.Path) -> dict[str, Any]:
    """Keyword options for the hub's AMQP endpoint (TLS, trusting its certificate)."""
    ca = tmp_path / "hub-ca.pem"
    pem = hub.ca_pem
    assert pem is not None
    ca.write_text(pem)
    return {"transport": "amqp", "port": hub.amqp_port, "ca_file": str(ca)}


def test_amqp_complete_reject_abandon_with_feedback(
    amqp_hub: LocalIotHub, tmp_path: pathlib.Path
) -> None:
    hub = amqp_hub
    cs = hub.add_device("dev1")
    with DeviceClient(cs, **amqp_options(hub, tmp_path)) as client:
        for mid in ("ok", "bad", "later"):
            hub.send("dev1", mid.encode(), message_id=mid, ack="full")
        seen: list[tuple[str | None, int | None]] = []
        settled = 0
        while settled < 3:
            msg = client.receive(timeout=WAIT)
            assert msg is not None
            seen.append((msg.message_id, msg.delivery_count))
            if msg.message_id == "bad":
                msg.reject()
                with pytest.raises(mqstate.InvalidArgument):
                    msg.complete()
            elif msg.message_id == "later" and msg.delivery_count == 0:
                msg.abandon()
                continue
            else:
                msg.complete()
            settled += 1
        assert ("later", 1) in seen
        eventually(lambda: hub.feedback("later") == "Success", "later completed")
        assert hub.feedback("ok") == "Success"
        eventually(lambda: hub.feedback("bad") == "Rejected", "bad rejected")
        stats = client.stats
        assert (stats["acknowledged"], stats["rejected"], stats["abandoned"]) == (2, 1, 1)


def test_amqp_over_websockets_rejects_and_abandons(
    amqp_hub: LocalIotHub, tmp_path: pathlib.Path
) -> None:
    hub = amqp_hub
    cs = hub.add_device("ws1")
    options = amqp_options(hub, tmp_path) | {"transport": "amqp-ws", "port": hub.https_port}
    with DeviceClient(cs, **options) as client:
        hub.send("ws1", b"no", message_id="ws-bad", ack="full")
        hub.send("ws1", b"later", message_id="ws-later", ack="full")
        counts: list[int | None] = []
        while len(counts) < 3:
            msg = client.receive(timeout=WAIT)
            assert msg is not None
            if msg.message_id == "ws-bad":
                msg.reject()
                counts.append(msg.delivery_count)
            elif msg.delivery_count == 0:
                msg.abandon()
                counts.append(0)
            else:
                msg.complete()
                counts.append(msg.delivery_count)
        assert sorted(c or 0 for c in counts) == [0, 0, 1]
        eventually(lambda: hub.feedback("ws-bad") == "Rejected", "rejected over amqp-ws")
        eventually(lambda: hub.feedback("ws-later") == "Success", "completed over amqp-ws")


def test_amqp_abandon_past_the_max_delivery_count_dead_letters(
    amqp_hub: LocalIotHub, tmp_path: pathlib.Path
) -> None:
    hub = amqp_hub
    cs = hub.add_device("dev1")
    with DeviceClient(cs, **amqp_options(hub, tmp_path)) as client:
        hub.send("dev1", b"x", message_id="x1", ack="negative")
        for count in (0, 1):
            msg = client.receive(timeout=WAIT)
            assert msg is not None and msg.delivery_count == count
            msg.abandon()
        eventually(lambda: hub.feedback("x1") == "DeliveryCountExceeded", "dead-lettered")
        assert hub.dead_lettered("dev1") == 1
        assert client.receive(timeout=0.3) is None


def test_amqp_settling_a_message_of_a_lost_connection_is_lock_lost(
    hub: LocalIotHub, tmp_path: pathlib.Path
) -> None:
    # The hub's default max delivery count: the second connection may take a delivery too.
    cs = hub.add_device("dev1")
    options = amqp_options(hub, tmp_path)
    with DeviceClient(cs, **options) as client:
        hub.send("dev1", b"k", message_id="kept")
        before = client.receive(timeout=WAIT)
        assert before is not None and before.delivery_count == 0
        # A second connection of the device makes the hub drop the first, which reconnects.
        DeviceClient(cs, **options).close()
        again = client.receive(timeout=WAIT)
        assert again is not None and again.message_id == "kept" and again.is_redelivery
        for settle in (before.complete, before.reject, before.abandon):
            with pytest.raises(mqstate.LockLost, match="has closed"):
                settle()
        again.complete()
        eventually(lambda: hub.completed("dev1") == 1, "completed once")


def self_signed_certificate(
    directory: pathlib.Path, cn: str
) -> tuple[pathlib.Path, pathlib.Path, str]:
    """A self-signed certificate for `cn` made with the openssl CLI: (cert, key, SHA-256 hex)."""
    cert, key = directory / f"{cn}.pem", directory / f"{cn}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        + ["-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={cn}"],
        check=True,
        capture_output=True,
    )
    der = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-outform", "DER"], check=True, capture_output=True
    ).stdout
    return cert, key, hashlib.sha256(der).hexdigest()


@pytest.mark.parametrize("transport", ["mqtt", "amqp"])
def test_an_x509_device_receives_with_its_certificate_and_another_is_refused(
    tmp_path: pathlib.Path, transport: str
) -> None:
    with LocalIotHub(device_tls=True) as hub:
        ca = tmp_path / "hub-ca.pem"
        pem = hub.ca_pem
        assert pem is not None
        ca.write_text(pem)
        cert, key, thumbprint = self_signed_certificate(tmp_path, "x1")
        cs = hub.add_x509_device("x1", thumbprint)
        assert "x509=true" in cs
        port = hub.port if transport == "mqtt" else hub.amqp_port
        options: dict[str, Any] = {"transport": transport, "port": port, "ca_file": str(ca)}
        with DeviceClient(cs, cert_file=cert, key_file=key, **options) as client:
            hub.send("x1", b"by certificate", message_id="c1", ack="full")
            msg = client.receive(timeout=WAIT)
            assert msg is not None and msg.payload == b"by certificate"
            msg.complete()
            eventually(lambda: hub.feedback("c1") == "Success", "completed")
            if transport == "amqp":
                hub.send("x1", b"refused", message_id="c2", ack="full")
                msg = client.receive(timeout=WAIT)
                assert msg is not None
                msg.reject()
                eventually(lambda: hub.feedback("c2") == "Rejected", "rejected")

        # A certificate that is not the device's: refused as IoT Hub refuses it.
        other_cert, other_key, _ = self_signed_certificate(tmp_path, "other")
        with pytest.raises(mqstate.AuthenticationFailed):
            DeviceClient(cs, cert_file=other_cert, key_file=other_key, **options)

        # The certificate needs its key, and x509=true needs the certificate: the core says so
        # before connecting.
        with pytest.raises(mqstate.InvalidArgument, match="both cert_file and key_file"):
            DeviceClient(cs, cert_file=cert, **options)
        with pytest.raises(mqstate.InvalidArgument, match="x509=true"):
            DeviceClient(cs, **options)
