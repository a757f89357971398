"""MQTT and AMQP over WebSockets (issue 52) with the Python SDKs, on the hub's HTTPS port 443
(``wss://localhost/$iothub/websocket``): the device SDK with ``websockets=True`` (MQTT over
WebSockets, subprotocol ``mqtt``) receives a C2D message, which the registry manager sends with
``transport_type=TransportType.AmqpOverWebsocket`` (azure-iot-hub >= 2.7.0: uamqp's AMQP over
WebSockets, subprotocol ``AMQPWSB10``); each SDK then speaks to port 443 only."""

from __future__ import annotations

import queue
from collections.abc import Callable

import pytest
from azure.iot.device import IoTHubDeviceClient, Message as DeviceMessage
from azure.iot.hub import IoTHubRegistryManager
from uamqp import TransportType

from conftest import Hub, call_within

pytestmark = pytest.mark.timeout(120)


def test_amqp_over_websocket_send_reaches_the_mqtt_over_websocket_device(start_hub: Callable[..., Hub]) -> None:
    hub = start_hub(devices=["py-ws"])
    device = IoTHubDeviceClient.create_from_connection_string(
        hub.device_connection_string("py-ws"),
        server_verification_cert=hub.ca_file.read_text(),
        websockets=True,
    )
    messages: queue.Queue[DeviceMessage] = queue.Queue()
    device.on_message_received = messages.put
    registry = IoTHubRegistryManager.from_connection_string(
        hub.owner_connection_string, transport_type=TransportType.AmqpOverWebsocket
    )
    try:
        call_within(20, "device SDK connect (websockets=True)", device.connect)
        call_within(
            20,
            "send_c2d_message (AmqpOverWebsocket)",
            registry.send_c2d_message,
            "py-ws",
            "over websockets",
            {"messageId": "py-ws-1", "unit": "celsius"},
        )
        try:
            msg = messages.get(timeout=15)
        except queue.Empty:
            raise AssertionError(f"no message over MQTT/WS within 15 s; hub log:\n{hub.output()}") from None
        assert msg.data == b"over websockets"
        assert msg.message_id == "py-ws-1"
        assert msg.custom_properties == {"unit": "celsius"}
    finally:
        call_within(10, "device SDK shutdown", device.shutdown)
        call_within(10, "disconnect of the AMQP client", registry.amqp_svc_client.disconnect_sync)
