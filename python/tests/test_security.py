"""The binding's TLS and user name/password options against a secured local server (TLS
listener with a generated CA, a password file)."""

from __future__ import annotations

import pytest

import mqstate
from mqstate.testing import LocalServer


def test_connects_over_tls_with_username_and_password() -> None:
    with LocalServer(username="alice", password="s3cret") as server:
        assert server.tls_url is not None and server.ca_file is not None
        with mqstate.Client(
            server.tls_url, ca_file=server.ca_file, username="alice", password="s3cret"
        ) as c:
            c.set("secured", "yes")
            assert c.get("secured") == b"yes"
        with pytest.raises(mqstate.Error):
            with mqstate.Client(
                server.tls_url,
                ca_file=server.ca_file,
                username="alice",
                password="wrong",
                connect_timeout=5,
            ):
                pass
