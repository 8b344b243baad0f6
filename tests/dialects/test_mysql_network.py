"""readyq's own PyMySQL connections carry TCP keepalives and a user timeout, as its libpq
connections do: a connection whose server vanished behind a cut network ends within
seconds instead of waiting for a reply for ever."""

from __future__ import annotations

import socket

import pytest
import sqlalchemy as sa

from readyq.dialects.mysql import TCP_USER_TIMEOUT_MS, network_socket

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_KEEPIDLE"), reason="the platform has no TCP keepalive settings"
)


def test_the_socket_probes_a_silent_peer_and_gives_up_on_unacknowledged_data(
    db: str, dialect_name: str
) -> None:
    if dialect_name != "mariadb":
        pytest.skip("MySQL and MariaDB's driver")
    url = sa.make_url(db)
    sock = network_socket(url.host or "127.0.0.1", url.port or 3306, 5)
    try:
        opt = sock.getsockopt
        assert opt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert opt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
        assert opt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
        assert opt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
        assert opt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == TCP_USER_TIMEOUT_MS
        assert sock.recv(4)  # the server's greeting: a working connection
    finally:
        sock.close()
