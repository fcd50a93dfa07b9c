"""The fidelity check in a child process gives the in-process figures, caches, cancels, recovers."""

import threading

import pytest

from qtquant.base.errors import BadInputError, Cancelled, QtQuantError
from qtquant.fidelity.measure import measure_session
from qtquant.base import childproc
from qtquant.app import fidelity_worker
from qtquant.quant.domains import DomainMap
from qtquant.app.fidelity_worker import FidelityWorker
from qtquant.quant.groups import share, unshare
from qtquant.app import open_model


@pytest.fixture(scope="module")
def worker():
    w = FidelityWorker()
    yield w
    w.close()


def same(a, b):
    assert a.outputs == b.outputs and a.samples == b.samples and a.revision == b.revision
    for o in a.outputs:
        assert a.sqnr_db[o] == pytest.approx(b.sqnr_db[o], rel=1e-9, abs=1e-9)
        assert a.before_sqnr_db[o] == pytest.approx(b.before_sqnr_db[o], rel=1e-9, abs=1e-9)
        assert a.cosine[o] == pytest.approx(b.cosine[o], rel=1e-12)
    assert [(m.tensor, m.group) for m in a.members] == [(m.tensor, m.group) for m in b.members]
    for ma, mb in zip(a.members, b.members):
        assert ma.sqnr_db == pytest.approx(mb.sqnr_db) and ma.bits_lost == pytest.approx(mb.bits_lost)


def test_child_gives_the_in_process_figures_across_edits(worker, session):
    same(worker.measure(session.snapshot()), measure_session(session))
    share(session, ["box", "score"])
    snap = session.snapshot()
    share(session, ["c0_out", "c1_out", "cat1_out"])  # an edit after the snapshot does not reach it
    f = worker.measure(snap)
    assert f.revision == snap.revision != session.revision
    assert {m.tensor for m in f.members} == {"box", "score"}
    same(worker.measure(session), measure_session(session))
    unshare(session, session.groups.groups[0].id)
    same(worker.measure(session), measure_session(session))
    same(worker.measure(session, quantize_outputs=False), measure_session(session, quantize_outputs=False))


def test_a_new_model_or_calibration_is_loaded_into_the_child(worker, session, det_path):
    worker.measure(session)
    other = open_model(det_path)
    other.run_calibration()
    share(other, ["box", "score"])
    same(worker.measure(other), measure_session(other))
    session.run_calibration()  # a new CalibrationResult object: the child must reload it
    same(worker.measure(session), measure_session(session))


def test_needs_holdout(worker, det_path):
    with pytest.raises(BadInputError, match="held-back"):
        worker.measure(open_model(det_path))


def test_cancel_reaches_the_child_and_the_worker_stays_usable(worker, session):
    share(session, ["box", "score"])
    with pytest.raises(Cancelled):
        worker.measure(session, cancel=lambda: True)
    flag = threading.Event()
    calls = []

    def cancel():  # set once the request is in flight
        calls.append(1)
        if len(calls) == 2:
            flag.set()
        return flag.is_set()

    try:
        worker.measure(session, cancel=cancel)
    except Cancelled:
        pass  # or it finished before the flag reached it: both are fine
    same(worker.measure(session), measure_session(session))


def test_a_dead_child_is_reported_and_replaced(worker, session, monkeypatch):
    worker.measure(session)
    worker._child.process.kill()
    worker._child.process.join()
    f = worker.measure(session)  # restarted on the next request
    same(f, measure_session(session))

    # Killed mid-request (from the poll loop, so the request is in flight): one line, then usable.
    def kill_once():
        calls.append(1)  # call 1 is the check before sending
        if len(calls) >= 2 and not killed:
            killed.append(worker._child.process.pid)
            worker._child.process.kill()
        return False

    killed, calls = [], []
    monkeypatch.setattr(childproc, "POLL_S", 0.0001)  # the poll loop runs at once
    worker._loaded = None  # and the request is a reload, which takes some time
    with pytest.raises(QtQuantError, match="stopped unexpectedly") as e:
        worker.measure(session, cancel=kill_once)
    assert "\n" not in str(e.value) and killed
    same(worker.measure(session), measure_session(session))


def test_domain_maps_travel_in_small_parts(worker, session, monkeypatch):
    share(session, ["c0_out", "c1_out", "cat1_out"])
    fields = fidelity_worker._parts(session.domains)
    part = len(fields)  # the map's fields in one message, each big field in slices of this many entries
    frames = list(childproc._frames(("measure", fields), part))
    parts = [f for f, _ in frames if f[0] == "part"]
    assert len(parts) > 4 and all(len(f[2]) <= part for f in parts)
    rx = childproc._Receiver()
    got = [rx.feed(f, lambda: raw) for f, raw in frames][-1]
    assert got[0] == "end" and DomainMap(**got[1][1]) == session.domains
    monkeypatch.setattr(worker._child, "part", part)
    same(worker.measure(session), measure_session(session))


def test_the_child_collects_between_requests_with_the_model_frozen(session):
    """The app's collection policy (qtquant.app.gcpolicy) in the child: no automatic collection
    in the middle of a check (a full one walked the child's heap 19-25 ms), the loaded model left
    out of collections, and what the thresholds ask for collected after the reply (idle)."""
    import gc

    server = fidelity_worker._Server()  # in this process, as the child runs it
    cal = session.calibration
    try:
        server(("load", session.graph.model_bytes(), session.graph.path, session.graph.sha256,
                list(cal.holdout), False, dict(cal.ranges or {}), None), None)
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        gc.collect()
        assert not any(o is server.loaded.graph for o in gc.get_objects(2))  # frozen: out of the walks
        server.idle()
        assert server._collector is not None
    finally:
        gc.unfreeze()
        gc.enable()
