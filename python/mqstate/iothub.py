"""IoT Hub device client: receive cloud-to-device messages and send telemetry (MQTT 3.1.1 or
AMQP 1.0).

Blocking::

    from mqstate.iothub import DeviceClient

    with DeviceClient("HostName=...;DeviceId=dev1;SharedAccessKey=...") as client:
        for msg in client.messages():
            print(msg.message_id, msg.properties, msg.payload)
            msg.complete()          # nothing is acknowledged before this

asyncio::

    from mqstate.iothub import AsyncDeviceClient

    async with AsyncDeviceClient.connect(connection_string) as client:
        async for msg in client.messages():
            msg.complete()

Over AMQP (``transport="amqp"``, port 5671) a message can also be rejected or abandoned::

    with DeviceClient(connection_string, transport="amqp") as client:
        for msg in client.messages():
            if not msg.payload:
                msg.reject()        # dead-lettered: the sender gets Rejected feedback
            elif msg.delivery_count == 0:
                msg.abandon()       # delivered again, delivery_count 1
            else:
                msg.complete()

Keyword options: ``transport`` (``"mqtt"``, the default, or ``"amqp"``), ``host``, ``port``, ``tls``, ``ca_file``, ``cert_file``/``key_file`` (X.509),
``token_lifetime``, ``receive_buffer``, ``keep_alive``, ``operation_timeout``,
``connect_timeout``. Over MQTT completions are acknowledged in arrival order (MQTT requires
it): a message completed ahead of an earlier open one is held until that one is completed;
``reject()`` and ``abandon()`` raise :class:`mqstate.NotSupported` (IoT Hub has neither over
MQTT). Over AMQP each message is settled on its own, in any order. Delivery is at-least-once;
``msg.is_redelivery`` marks a message delivered before; settling a message whose connection
was lost raises :class:`mqstate.LockLost` (the hub delivers it again).
"""

from __future__ import annotations

from ._native import AsyncDeviceClient, AsyncMessages, C2dMessage, DeviceClient, Messages

__all__ = ["AsyncDeviceClient", "AsyncMessages", "C2dMessage", "DeviceClient", "Messages"]
