"""The price of the edits: "before" is the model as opened (no groups, every tensor int8), and the
change splits into what sharing and what precision cost (issue 53)."""

import json

import pytest

from qtquant.app.commands import ShareCommand
from qtquant.cli import main
from qtquant.perf import simulate_session
from qtquant.perf.price import edit_price


def test_before_is_the_model_as_opened_whatever_the_precision(session):
    opened = simulate_session(session).board_us
    session.set_precision(["h"], "float")
    before = simulate_session(session, baseline=True)
    after = simulate_session(session)
    assert before.board_us == pytest.approx(opened)
    # Priced on the board: the float node leaves the static estimate for the CPU.
    assert after.board_us > before.board_us and after.total_us < before.total_us
    price = edit_price(before, after)
    assert price.total_us == pytest.approx(after.board_us - before.board_us)
    assert price.precision_us == pytest.approx(price.total_us) and price.sharing_us == pytest.approx(0.0)


def test_sharing_and_precision_each_have_their_price(session):
    before = simulate_session(session, baseline=True)
    cat = next(c for c in session.concats() if c.rescales)
    ShareCommand(tensors=tuple(t for t in session.graph.nodes[cat.node].inputs if t)).do(session)
    shared = simulate_session(session)
    session.set_precision(["h"], "int16")
    both = simulate_session(session)
    price = edit_price(before, both)
    assert price.sharing_us == pytest.approx(shared.board_us - before.board_us) and price.sharing_us < 0
    assert price.precision_us == pytest.approx(both.board_us - shared.board_us) and price.precision_us > 0
    assert price.total_us == pytest.approx(price.sharing_us + price.precision_us)
    assert "sharing" in price.text() and "precision" in price.text()


def test_perf_cli_keep_float_shows_before_and_after(det_path, capsys):
    rc = main(["perf", det_path, "--calib-count", "2", "--keep-float", "neck", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    before, after = doc["before"]["summary"]["board_latency_ms"], doc["after"]["summary"]["board_latency_ms"]
    assert after > before
    assert doc["after"]["summary"]["latency_ms"] < doc["before"]["summary"]["latency_ms"]  # off the BPU
    assert "precision" not in doc["before"]
    assert doc["price"]["precision_us"] == pytest.approx((after - before) * 1000)
    assert doc["price"]["sharing_us"] == pytest.approx(0.0, abs=1e-6)
    rc = main(["perf", det_path, "--calib-count", "2", "--int16", "neck"])
    out = capsys.readouterr().out
    assert "as opened" in out and "price of the edits" in out and "(precision)" in out


def test_sqnr_before_is_the_model_as_opened(session):
    """A precision edit shows its own SQNR change: "before" is every tensor int8 (issue 53)."""
    from qtquant.fidelity.measure import measure_session

    opened = measure_session(session)
    session.set_precision(["h"], "float")
    edited = measure_session(session)
    for o in edited.outputs:
        assert edited.before[o].headline.sqnr_db == pytest.approx(opened.after[o].headline.sqnr_db)
    assert any(abs(edited.after[o].headline.sqnr_db - edited.before[o].headline.sqnr_db) > 0.01
               for o in edited.outputs)


def test_fix_prices_the_board_as_deployed(det_path, tmp_path, capsys):
    """``fix`` takes the board estimate's deployment facts as ``perf`` does: a faster BPU clock lowers the
    board latency and leaves the static estimate; an output left to the application converts nothing."""
    def numbers(*extra):
        out = tmp_path / "fixed.onnx"
        assert main(["fix", det_path, "--calib-count", "2", "-o", str(out), "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["summary"]["after"]

    plain = numbers()
    fast = numbers("--board-bpu-ghz", "2")
    assert fast["latency_ms"] == pytest.approx(plain["latency_ms"])
    assert fast["board_latency_ms"] < plain["board_latency_ms"]
    ints = numbers("--int-outputs", "boxes")
    assert ints["latency_ms"] == pytest.approx(plain["latency_ms"])
    assert ints["board_latency_ms"] < plain["board_latency_ms"]
    assert main(["fix", det_path, "--calib-count", "2", "-o", str(tmp_path / "x.onnx"), "--board-bpu-ghz", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--board-bpu-ghz must be a clock in GHz above 0" in err and "\n" not in err
