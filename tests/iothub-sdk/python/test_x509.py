"""X.509 devices with the official Python SDKs (docs/iothub.md, "X.509 devices"): the service SDK
(azure-iot-hub 2.7.0) registers a self-signed device by thumbprint (`create_device_with_x509`) and
a CA-signed one (`create_device_with_certificate_authority`, the CA given to the hub with
--iothub-ca-file) and sends C2D over AMQPS; the device SDK (azure-iot-device, MQTT over TLS)
connects with `create_from_x509_certificate` and receives it; a certificate that is not the
device's is refused. Certificates: openssl."""

from __future__ import annotations

import pathlib
import queue
import subprocess
from collections.abc import Callable

import pytest
from azure.iot.device import IoTHubDeviceClient, X509
from azure.iot.device.exceptions import ClientError, CredentialError
from azure.iot.hub import IoTHubRegistryManager

from conftest import Hub, call_within

pytestmark = pytest.mark.timeout(180)

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def self_signed(directory: pathlib.Path, name: str, cn: str, *extensions: str) -> tuple[pathlib.Path, pathlib.Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    extra = [arg for ext in extensions for arg in ("-addext", ext)]
    openssl("req", "-x509", *EC, "-days", "2", "-subj", f"/CN={cn}", *extra, "-keyout", str(key), "-out", str(cert))
    return cert, key


def signed_by(directory: pathlib.Path, ca: tuple[pathlib.Path, pathlib.Path], name: str, cn: str) -> tuple[pathlib.Path, pathlib.Path]:
    cert, key, csr, ext = (directory / f"{name}{suffix}" for suffix in (".pem", ".key", ".csr", ".ext"))
    openssl("req", *EC, "-subj", f"/CN={cn}", "-keyout", str(key), "-out", str(csr))
    ext.write_text("basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
            "-days", "2", "-extfile", str(ext), "-out", str(cert))
    return cert, key


def make_ca(directory: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    return self_signed(directory, name, name, "basicConstraints=critical,CA:TRUE",
                       "keyUsage=critical,keyCertSign,digitalSignature")


def sha256_thumbprint(cert: pathlib.Path) -> str:
    out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-fingerprint", "-sha256"],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1].replace(":", "")


def x509_device(hub: Hub, device_id: str, cert: tuple[pathlib.Path, pathlib.Path]) -> IoTHubDeviceClient:
    return IoTHubDeviceClient.create_from_x509_certificate(
        x509=X509(cert_file=str(cert[0]), key_file=str(cert[1])),
        hostname=hub.host_name,
        device_id=device_id,
        server_verification_cert=hub.ca_file.read_text(),
        connection_retry=False,
    )


def test_x509_devices_receive_c2d_and_a_wrong_certificate_is_refused(
    start_hub: Callable[..., Hub], tmp_path: pathlib.Path
) -> None:
    ca = make_ca(tmp_path, "x509-test-ca")
    hub = start_hub(args=["--iothub-ca-file", str(ca[0])])
    registry = IoTHubRegistryManager.from_connection_string(hub.owner_connection_string)
    own = self_signed(tmp_path, "self", "py-x509-self")
    created = call_within(20, "create_device_with_x509", registry.create_device_with_x509,
                          "py-x509-self", sha256_thumbprint(own[0]), None, "enabled")
    assert created.authentication.type == "selfSigned"
    created = call_within(20, "create_device_with_certificate_authority",
                          registry.create_device_with_certificate_authority, "py-x509-ca", "enabled")
    assert created.authentication.type == "certificateAuthority"
    signed = signed_by(tmp_path, ca, "signed", "py-x509-ca")

    for device_id, cert in (("py-x509-self", own), ("py-x509-ca", signed)):
        client = x509_device(hub, device_id, cert)
        messages: queue.Queue = queue.Queue()
        client.on_message_received = messages.put
        try:
            call_within(20, f"connect {device_id}", client.connect)
            call_within(20, "send_c2d_message", registry.send_c2d_message, device_id, f"to {device_id}", {})
            assert messages.get(timeout=15).data == f"to {device_id}".encode()
        finally:
            call_within(10, "shutdown", client.shutdown)

    wrong = (
        ("py-x509-self", self_signed(tmp_path, "impostor", "py-x509-self"), "another self-signed certificate"),
        ("py-x509-ca", signed_by(tmp_path, make_ca(tmp_path, "other-ca"), "untrusted", "py-x509-ca"),
         "a certificate of another CA"),
    )
    for device_id, cert, what in wrong:
        client = x509_device(hub, device_id, cert)
        try:
            with pytest.raises((CredentialError, ClientError)):
                call_within(30, f"connect with {what}", client.connect)
        finally:
            call_within(10, "shutdown", client.shutdown)
