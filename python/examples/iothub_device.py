"""A device that prints each cloud-to-device message and completes it.

    mqstate serve --iothub-device dev1
    python python/examples/iothub_device.py "HostName=...;DeviceId=dev1;SharedAccessKey=..." \
        --host 127.0.0.1 --port 8883 --plain
    mqstate iothub send dev1 hello -P colour=blue
"""

from __future__ import annotations

import argparse

from mqstate.iothub import DeviceClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("connection_string")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--plain", action="store_true", help="plain TCP (local hub)")
    args = parser.parse_args()
    options: dict[str, object] = {}
    if args.host:
        options["host"] = args.host
    if args.port:
        options["port"] = args.port
    if args.plain:
        options["tls"] = False
    with DeviceClient(args.connection_string, **options) as client:
        print(f"connected as {client.device_id}; waiting for messages")
        for msg in client.messages():
            if msg is None:
                break
            flag = " (redelivery)" if msg.is_redelivery else ""
            print(f"message {msg.message_id!r}{flag}: {msg.payload!r} properties {msg.properties}")
            msg.complete()


if __name__ == "__main__":
    main()
