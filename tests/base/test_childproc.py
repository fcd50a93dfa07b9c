"""The child-process helper: messages in parts, progress, both cancellations, a dead child, errors."""

import os
import time

import pytest

from qtquant.base import childproc
from qtquant.base.errors import Cancelled, ModelError, QtQuantError, ShapeError


def _handle(request, link):
    """A child that echoes, reports progress, waits for a cancel, raises or dies on request."""
    kind, arg = request
    if kind == "echo":
        return arg
    if kind == "progress":
        for k in range(arg):
            link.progress(k)
        return arg
    if kind == "until-cancelled":
        while not link.cancelled():
            time.sleep(0.005)
        raise Cancelled("stopped as asked")
    if kind == "sleep":
        time.sleep(arg)
        return os.getpid()
    if kind == "raise":
        raise arg
    if kind == "die":
        os._exit(arg)
    return os.getpid()


class _Idling:
    """A handler object with an ``idle`` hook: it counts the calls made between requests."""

    def __init__(self):
        self.idled = 0

    def __call__(self, request, link):
        return self.idled

    def idle(self):
        self.idled += 1


def _round_trip(value, part):
    """The frames' (kind, entries) and the message rebuilt from them."""
    rx = childproc._Receiver()
    frames = list(childproc._frames(value, part))
    sizes = [(f[0], len(f[2]) if f[0] == "part" else raw is not None) for f, raw in frames]
    got = [rx.feed(f, lambda: raw) for f, raw in frames]  # (the receiver grows the first part of each)
    assert all(g is None for g in got[:-1]) and got[-1][0] == "end"
    return sizes, got[-1][1]


def test_big_containers_travel_in_parts_and_come_back_whole():
    big = {f"t{i}": (i, -i) for i in range(25)}
    value = ("measure", {"of": big, "same": big, "ids": list(range(12)), "n": 3}, b"x" * childproc._RAW_MIN)
    sizes, back = _round_trip(value, 4)
    # `big` goes once, though it is there twice; the long bytes raw, after the parts.
    assert sizes == [("part", 4)] * 6 + [("part", 1)] + [("part", 4)] * 3 + [("raw", True), ("end", False)]
    assert back == value and back[1]["of"] is back[1]["same"]
    small = {"a": [1, 2], "b": b"short"}
    assert _round_trip(small, 4) == ([("end", False)], small)


@pytest.fixture(scope="module")
def child():
    c = childproc.Child(_handle, name="qtquant-test", what="the test child", failed="test failed: {message}",
                        part=3)
    yield c
    c.close()


def test_persistent_child_replies_relays_progress_and_errors(child):
    assert child.ensure_running() and not child.ensure_running()
    pid = child.process.pid
    payload = {i: str(i) for i in range(10)}
    assert child.call(("echo", payload)) == payload
    seen = []
    assert child.call(("progress", 5), progress=seen.append) == 5 and seen == [0, 1, 2, 3, 4]
    with pytest.raises(ShapeError, match="^bad shape$"):
        child.call(("raise", ShapeError("bad shape")))
    with pytest.raises(QtQuantError, match=r"^test failed: ValueError: nope$") as e:
        child.call(("raise", ValueError("nope")))
    assert type(e.value) is QtQuantError
    assert child.call(("pid", None)) == pid  # the same child all along


def test_cooperative_cancel_reaches_the_child_and_keeps_it(child):
    pid = child.call(("pid", None))
    t0 = time.monotonic()
    with pytest.raises(Cancelled, match="stopped as asked"):
        child.call(("until-cancelled", None), cancel=lambda: time.monotonic() - t0 > 0.1)
    assert child.call(("pid", None)) == pid


def test_a_dead_child_is_one_line_and_replaced(child):
    with pytest.raises(QtQuantError, match=r"^the test child stopped unexpectedly \(exit code 7\)$"):
        child.call(("die", 7))
    assert child.process is None
    assert child.ensure_running()
    assert child.call(("pid", None)) == child.process.pid


def test_hard_cancel_and_timeout_kill_the_child():
    c = childproc.Child(_handle, name="qtquant-test-hard", what="the test child", hard_cancel="test cancelled")
    with pytest.raises(Cancelled, match="^test cancelled$"):
        c.call(("sleep", 30), cancel=lambda: c.alive)
    assert c.process is None and not any(p.name == "qtquant-test-hard" for p in childproc._ctx.active_children())
    with pytest.raises(ModelError, match=r"^the test child took over 0.5 s$"):
        childproc.run(_handle, ("sleep", 30), name="qtquant-test-once", what="the test child", error=ModelError,
                      timeout=0.5)
    assert not any(p.name == "qtquant-test-once" for p in childproc._ctx.active_children())


def test_run_all_gives_each_reply_in_order():
    kids = [childproc.Child(_handle, name=f"qtquant-test-{i}", what=f"test child {i}", once=True) for i in range(2)]
    got = []
    replies = childproc.run_all(kids, [("progress", 2), ("echo", "b")], progress=lambda i, v: got.append((i, v)))
    assert replies == [2, "b"]
    assert got == [(0, 0), (0, 1)]
    with pytest.raises(ShapeError):
        childproc.run_all([childproc.Child(_handle, name="qtquant-test-e", what="x", once=True)],
                          [("raise", ShapeError("s"))])


def _niceness(request, link):
    return os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no niceness here")
def test_children_run_at_the_niceness_asked_for(monkeypatch):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    monkeypatch.setattr(childproc, "NICENESS", min(19, mine + 5))
    assert childproc.run(_niceness, None, name="qtquant-test-nice", what="the test child") == min(19, mine + 5)
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # this process keeps its priority
    monkeypatch.setattr(childproc, "NICENESS", 0)
    assert childproc.run(_niceness, None, name="qtquant-test-nice", what="the test child") == mine


def test_a_handler_idle_hook_runs_after_each_reply():
    c = childproc.Child(_Idling(), name="qtquant-test", what="the test child")
    try:
        assert [c.call(None) for _ in range(3)] == [0, 1, 2]
    finally:
        c.close()


def test_a_submitted_request_is_answered_when_read_and_a_dropped_one_does_not_mix_with_the_next():
    child = childproc.Child(_handle, name="qtquant-test", what="the test child")
    try:
        reply = child.submit(("echo", "first"))
        assert reply.open
        assert reply.result() == "first" and not reply.open
        with pytest.raises(RuntimeError):
            reply.result()
        dropped = child.submit(("echo", "dropped"))
        dropped.discard()
        dropped.discard()  # a no-op once done
        assert child.call(("echo", "second")) == "second"
        failing = child.submit(("raise", ShapeError("no fit")))
        with pytest.raises(ShapeError, match="no fit"):
            failing.result()
        child.submit(("raise", ShapeError("unread"))).discard()  # an error dropped unread
        assert child.call(("echo", "third")) == "third"
    finally:
        child.close()
