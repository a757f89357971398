"""Requests the local hub does not serve fail fast with the official Python device SDK.

mqstate's hub serves cloud-to-device messages and telemetry, not device twins or direct methods.
A twin request (``get_twin()``, ``patch_twin_reported_properties()``) is answered on
``$iothub/twin/res/403/?$rid=...`` with IoT Hub's error body (errorCode 403010, what a hub
answers for an operation its tier does not offer); the SDK turns any status >= 300 into a
``ServiceError`` (azure/iot/device/iothub/pipeline/pipeline_stages_iothub.py, map_twin_error),
which the sync client raises as ``ClientError`` caused by it (sync_clients.py, handle_result).
Before, the hub closed the connection on the request and the SDK reconnected in a loop.

A direct-method subscription gets the SUBACK failure code 0x80; the SDK does not look at the
granted QoS (common/mqtt_transport.py, on_subscribe), so setting ``on_method_request_received``
succeeds silently and no method ever arrives. The connection stays up either way.

Connections are counted in the hub's log (``--log info``: one "device connected" line each).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from azure.iot.device import IoTHubDeviceClient
from azure.iot.device.exceptions import ClientError, ServiceError

from conftest import Hub

pytestmark = pytest.mark.timeout(120)

DEVICE = "py-twin"


def connections(hub: Hub, device_id: str) -> int:
    """How many MQTT connections of the device the hub accepted so far (its log)."""
    text = hub.log.read_text()
    return sum(
        1
        for line in text.splitlines()
        if "device connected" in line and re.search(rf"\bdevice={re.escape(device_id)}\b", line)
    )


def device_client(hub: Hub) -> IoTHubDeviceClient:
    return IoTHubDeviceClient.create_from_connection_string(
        hub.device_connection_string(DEVICE),
        server_verification_cert=hub.ca_file.read_text(),
    )


def wait_for(what: str, check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_get_twin_raises_at_once_and_the_sdk_does_not_reconnect(start_hub: Callable[..., Hub]) -> None:
    hub = start_hub(devices=[DEVICE])
    client = device_client(hub)
    try:
        client.connect()
        wait_for("the connection in the hub's log", lambda: connections(hub, DEVICE) == 1)

        started = time.monotonic()
        with pytest.raises(ClientError) as raised:
            client.get_twin()
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"get_twin took {elapsed:.1f} s to fail"
        cause = raised.value.__cause__
        assert isinstance(cause, ServiceError), repr(cause)
        assert "403" in str(cause), str(cause)

        started = time.monotonic()
        with pytest.raises(ClientError) as raised:
            client.patch_twin_reported_properties({"firmware": "1.0"})
        assert time.monotonic() - started < 5
        assert isinstance(raised.value.__cause__, ServiceError)

        # No reconnect loop: the hub kept the connection, the SDK stayed on it.
        time.sleep(3)
        assert client.connected
        count = connections(hub, DEVICE)
        assert count == 1, f"{count} connections (a reconnect loop?); hub log:\n{hub.output()}"
        assert "twin request refused" in hub.log.read_text()
    finally:
        client.shutdown()


def test_a_method_handler_is_accepted_silently_and_the_connection_stays(start_hub: Callable[..., Hub]) -> None:
    hub = start_hub(devices=[DEVICE])
    client = device_client(hub)
    try:
        client.connect()
        # The subscription to $iothub/methods/POST/# is refused (SUBACK 0x80); the SDK ignores it.
        client.on_method_request_received = lambda request: None
        wait_for(
            "the refused subscription in the hub's log",
            lambda: "subscription refused" in hub.log.read_text() and "$iothub/methods/POST/#" in hub.log.read_text(),
        )
        time.sleep(2)
        assert client.connected
        count = connections(hub, DEVICE)
        assert count == 1, f"{count} connections; hub log:\n{hub.output()}"
        # C2D still works on the same connection (telemetry too).
        client.send_message("still here")
        assert connections(hub, DEVICE) == 1
    finally:
        client.shutdown()
