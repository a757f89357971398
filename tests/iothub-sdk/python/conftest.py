"""Fixtures of the official-SDK tests: `mqstate serve` on the ports the SDKs hard-code.

The official SDKs connect to HTTPS 443 (registry), AMQPS 5671 (C2D, feedback) and MQTT 8883
(devices), so the hub listens on exactly those. scripts/test-iothub-sdk runs each test file in a
network namespace of its own (``unshare -rnm``), where the ports are free; tests within a file run
one after the other.

``start_hub(devices=..., args=...)`` starts a hub (stopped after the test); ``hub`` is one with
the defaults. A hub generates its certificate (``--iothub-tls --iothub-ca-out``), and the fixture
makes the Python SDKs trust it, changing nothing in them:

- the registry (msrest over requests): ``REQUESTS_CA_BUNDLE``, which requests reads at each
  request when ``verify`` is left at True, as msrest leaves it;
- uamqp (C2D sends): ``SSL_CERT_FILE``. ``uamqp/authentication/common.py`` adds
  ``self.cert_file or certifi.where()`` to its TLS context (azure-iot-hub passes no ``verify``,
  iothub_amqp_client.py, so certifi's bundle), and its OpenSSL TLS layer also loads OpenSSL's
  default verify paths, which SSL_CERT_FILE names; it is read at each connection. (Without it the
  handshake fails and the send ends in uamqp's "Authorization timeout.")
- the device SDK (azure-iot-device, MQTT): its own ``server_verification_cert`` option.

Environment: MQSTATE_BIN (default target/debug/mqstate), MQSTATE_SDK_LOG_DIR (hub output),
MQSTATE_SDK_PID_DIR (a file per running server, named after its pid, for the runner's cleanup),
MQSTATE_PY_VENV (a venv with mqstate's own Python binding, for the tests of its device client).
"""

from __future__ import annotations

import base64
import re
import os
import pathlib
import secrets
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = os.environ.get("MQSTATE_BIN", str(ROOT / "target" / "debug" / "mqstate"))
HOST = "localhost"
PORTS = {"https": 443, "amqps": 5671, "mqtts": 8883, "admin": 8880}
ADMIN_URL = f"http://127.0.0.1:{PORTS['admin']}"
T = TypeVar("T")


def call_within(seconds: float, what: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Calls fn in a daemon thread and fails the test if it takes longer than `seconds`.

    A hang inside an SDK (uamqp's send loop is C code that pytest-timeout's signal cannot
    interrupt) then fails the test quickly, naming the call; the stuck thread is left behind.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            error.append(e)

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"{what}: no answer within {seconds} s")
    if error:
        raise error[0]
    return result[0]


def new_key() -> str:
    """A random device key (base64 of 32 bytes), as IoT Hub generates them."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


def _can_connect(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _admin_ready() -> bool:
    try:
        with urllib.request.urlopen(f"{ADMIN_URL}/hub", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


class Hub:
    """A running `mqstate serve` with its IoT Hub on the SDKs' ports."""

    def __init__(self, workdir: pathlib.Path, name: str, devices: Sequence[str], args: Sequence[str]):
        workdir.mkdir(parents=True, exist_ok=True)
        self.host_name = HOST
        self.ports = PORTS
        self.admin_url = ADMIN_URL
        self.ca_file = workdir / "ca.pem"
        self.device_keys = {device: new_key() for device in devices}
        log_dir = pathlib.Path(os.environ.get("MQSTATE_SDK_LOG_DIR") or workdir)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log = log_dir / f"{name}-{os.getpid()}-{time.monotonic_ns()}.log"
        command = [
            BIN, "serve", "--no-dashboard",
            "--iothub-hostname", HOST,
            "--iothub-tls", "--iothub-ca-out", str(self.ca_file),
            "--iothub-port", str(PORTS["mqtts"]),
            "--iothub-https-port", str(PORTS["https"]),
            "--iothub-amqp-port", str(PORTS["amqps"]),
            "--iothub-admin-port", str(PORTS["admin"]),
        ]
        for device, key in self.device_keys.items():
            command += ["--iothub-device", f"{device}:{key}"]
        command += list(args)
        with open(self.log, "w") as out:
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")}
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        pid_dir = os.environ.get("MQSTATE_SDK_PID_DIR")
        self._pid_file = pathlib.Path(pid_dir) / str(self.process.pid) if pid_dir else None
        if self._pid_file:
            self._pid_file.touch()
        try:
            self._wait_ready()
            self.owner_connection_string = self.connection_string("iothubowner")
            self.service_connection_string = self.connection_string("service")
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        waiting: set[object] = {"certificate", "admin API", PORTS["https"], PORTS["amqps"], PORTS["mqtts"]}
        deadline = time.monotonic() + 20
        while waiting:
            if self.process.poll() is not None:
                raise RuntimeError(f"mqstate serve exited ({self.process.returncode}) before it was ready:\n{self.output()}")
            if "certificate" in waiting and self.ca_file.exists() and self.ca_file.stat().st_size > 0:
                waiting.discard("certificate")
            if "admin API" in waiting and _admin_ready():
                waiting.discard("admin API")
            if "admin API" not in waiting:
                for port in (PORTS["https"], PORTS["amqps"], PORTS["mqtts"]):
                    if port in waiting and _can_connect(port):
                        waiting.discard(port)
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"mqstate serve was not ready within 20 s (still waiting for {waiting}):\n{self.output()}")
            time.sleep(0.05)

    def connection_string(self, policy: str = "iothubowner") -> str:
        """`mqstate iothub connection-string --policy POLICY`, as a user would get it."""
        done = subprocess.run(
            [BIN, "iothub", "connection-string", "--policy", policy],
            env={**os.environ, "MQSTATE_IOTHUB_URL": ADMIN_URL},
            capture_output=True, text=True, timeout=15, check=True,
        )
        cs = done.stdout.strip().splitlines()[-1].strip()
        parts = dict(part.split("=", 1) for part in cs.split(";"))
        assert set(parts) == {"HostName", "SharedAccessKeyName", "SharedAccessKey"}, cs
        return cs

    def device_connection_string(self, device_id: str, key: str | None = None) -> str:
        return f"HostName={HOST};DeviceId={device_id};SharedAccessKey={key or self.device_keys[device_id]}"

    def output(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._pid_file:
            self._pid_file.unlink(missing_ok=True)


@pytest.fixture
def start_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Hub]]:
    hubs: list[Hub] = []

    def start(devices: Sequence[str] = (), args: Sequence[str] = ()) -> Hub:
        for running in hubs:  # one at a time: the ports are fixed
            running.stop()
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
        hub = Hub(tmp_path / f"hub{len(hubs)}", name, devices, args)
        hubs.append(hub)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(hub.ca_file))
        monkeypatch.setenv("SSL_CERT_FILE", str(hub.ca_file))
        return hub

    yield start
    for hub in hubs:
        hub.stop()


@pytest.fixture
def hub(start_hub: Callable[..., Hub]) -> Hub:
    return start_hub()


_exit_status = 0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Exits even when an SDK left a thread stuck (uamqp's keep-alive thread after a send that
    never completed is not a daemon, and would keep the interpreter alive for ever)."""
    stuck = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if stuck:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        print(f"exiting without waiting for SDK threads: {[t.name for t in stuck]}", file=sys.stderr, flush=True)
        os._exit(_exit_status)
