"""A device that prints each cloud-to-device message and settles it: over AMQP a message whose
body is "bad" is rejected (dead-lettered, `Rejected` feedback) and one whose body is "later" is
abandoned once (delivered again with delivery count 1); every other message is completed.

    mqstate serve --iothub-device dev1 --iothub-ca-out hub-ca.pem
    python python/examples/iothub_device.py "HostName=localhost;DeviceId=dev1;SharedAccessKey=..." \
        --host 127.0.0.1 --transport amqp --ca-file hub-ca.pem
    mqstate iothub send dev1 bad --ack full; mqstate iothub send dev1 later --ack full
    mqstate iothub feedback --once

Over MQTT (the default: `--port 8883 --plain` for the local hub's plain TCP endpoint) messages
can only be completed; `reject()` and `abandon()` raise `mqstate.NotSupported`.
"""

from __future__ import annotations

import argparse

from mqstate.iothub import C2dMessage, DeviceClient


def settle(msg: C2dMessage) -> str:
    """Rejects "bad", abandons "later" the first time, completes the rest; says what it did."""
    if msg.payload == b"bad":
        msg.reject()
        return "rejected"
    if msg.payload == b"later" and msg.delivery_count == 0:
        msg.abandon()
        return "abandoned"
    msg.complete()
    return "completed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("connection_string")
    parser.add_argument("--transport", default="mqtt", help="mqtt (default) or amqp")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--ca-file", help="PEM of the hub's CA (mqstate serve --iothub-ca-out)")
    parser.add_argument("--plain", action="store_true", help="plain TCP (local hub, MQTT)")
    args = parser.parse_args()
    with DeviceClient(
        args.connection_string,
        transport=args.transport,
        host=args.host,
        port=args.port,
        ca_file=args.ca_file,
        tls=False if args.plain else None,
    ) as client:
        print(f"connected as {client.device_id} over {args.transport}; waiting for messages")
        for msg in client.messages():
            if msg is None:
                break
            count = msg.delivery_count
            if args.transport == "mqtt":
                msg.complete()
                what = "completed"
            else:
                what = settle(msg)
            print(
                f"message {msg.message_id!r} (delivery count {count}): {msg.payload!r}"
                f" properties {msg.properties}: {what}"
            )


if __name__ == "__main__":
    main()
