"""--ray ADDRESS: an address where no Ray cluster answers is a one-line error at once (Ray's own
connect retries for many minutes).  No Ray needed: the servers here are plain sockets."""

import socket
import threading
import time

import pytest

from qtquant.calib import rayrun
from qtquant.calib.rayrun import unreachable
from qtquant.base.errors import BadInputError


@pytest.fixture
def server():
    """``server(reply)``: a TCP server on this machine's loopback and node address that sends
    ``reply`` (None: nothing) to each connection; its port."""
    made = []

    def make(reply):
        s = socket.socket()
        s.bind(("0.0.0.0", 0))
        s.listen()
        made.append(s)

        def serve():
            while True:
                try:
                    c, _ = s.accept()
                except OSError:
                    return
                if reply is not None:
                    c.sendall(reply)
                made.append(c)

        threading.Thread(target=serve, daemon=True).start()
        return s.getsockname()[1]

    yield make
    for s in made:
        s.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _AuthError(Exception):
    """Stands for ray.exceptions.AuthenticationError (a RayError, not a RuntimeError)."""


def _fake_ray(first, second=None):
    """A Ray whose ray.init(address="auto") raises ``first`` and whose local start raises ``second``."""

    class FakeRay:
        inits = []

        @staticmethod
        def is_initialized():
            return False

        @classmethod
        def init(cls, **kw):
            cls.inits.append(kw.get("address"))
            err = first if kw.get("address") == "auto" else second
            if err is not None:
                raise err

    return FakeRay


def test_a_closed_port_is_a_one_line_error_without_ray():
    port = _closed_port()
    why = unreachable(f"127.0.0.1:{port}")
    assert why.startswith("nothing answers there (") and "ray status" in why
    assert unreachable(f"ray://127.0.0.1:{port}").startswith("nothing answers there")


def test_connect_refuses_before_ray_tries(monkeypatch):
    FakeRay = _fake_ray(None)
    monkeypatch.setattr(rayrun, "_ray", lambda: FakeRay)
    port = _closed_port()
    with pytest.raises(BadInputError, match=rf"cannot connect to the Ray cluster at 127.0.0.1:{port}: nothing answers"):
        rayrun.connect(f"127.0.0.1:{port}")
    assert FakeRay.inits == []


def test_a_web_server_is_named_as_such(server):
    port = server(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert "web server (the Ray dashboard's port?)" in unreachable(f"127.0.0.1:{port}")


def test_a_server_that_says_nothing_times_out(server):
    port = server(None)
    t = time.perf_counter()
    why = unreachable(f"127.0.0.1:{port}", timeout=0.5)
    assert why.startswith("nothing answered within 0.5 s")
    assert time.perf_counter() - t < 5


def test_a_grpc_server_passes_and_other_protocols_do_not(server):
    settings = bytes((0, 0, 0, 4, 0, 0, 0, 0, 0))  # what an HTTP/2 server sends first
    assert unreachable(f"127.0.0.1:{server(settings)}") == ""
    assert "not a Ray cluster" in unreachable(f"127.0.0.1:{server(b'220 smtp ready' + bytes(9))}")


def test_addresses_that_are_not_host_and_port_are_left_to_ray():
    assert unreachable("auto") == unreachable("local") == unreachable("my-cluster") == ""


def test_auto_starts_a_local_instance_or_says_in_one_line_why_not(monkeypatch):
    """``--ray auto``: no cluster found starts a local one; a cluster that refuses this process
    (its token) and a local start that fails are one-line errors, never a traceback."""
    ok = _fake_ray(ConnectionError("Could not find any running Ray instance"))
    monkeypatch.setattr(rayrun, "_ray", lambda: ok)
    assert rayrun.connect("auto") is True and ok.inits == ["auto", None]
    monkeypatch.setattr(rayrun, "_ray", lambda: _fake_ray(_AuthError("RPC error: InvalidAuthToken: missing\nmore")))
    with pytest.raises(BadInputError, match=r"^cannot connect to the Ray cluster on this machine: RPC error: "
                                            r"InvalidAuthToken: missing$"):
        rayrun.connect("auto")
    failing = _fake_ray(ConnectionError("none"), RuntimeError("Failed to start GCS."))
    monkeypatch.setattr(rayrun, "_ray", lambda: failing)
    with pytest.raises(BadInputError, match=r"^cannot start a local Ray instance: Failed to start GCS\.$"):
        rayrun.connect("auto")


def test_rays_notice_that_it_turned_authentication_on_is_dropped_and_its_warning_that_it_is_off_kept():
    import logging

    rayrun.quiet_auth_notice()
    rayrun.quiet_auth_notice()  # once is enough: no second filter
    log = logging.getLogger(rayrun._AUTH_LOGGER)
    assert sum(isinstance(f, rayrun._AuthNotice) for f in log.filters) == 1

    def record(msg):
        return logging.LogRecord(log.name, logging.WARNING, __file__, 1, msg, None, None)

    assert not log.filter(record("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled"))
    assert log.filter(record("Token authentication is disabled for this Ray cluster. Anyone with network access"))
