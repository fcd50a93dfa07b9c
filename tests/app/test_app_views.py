"""View-models built from a Session, headless: what the docks and the canvas show."""

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

from qtquant.app import Session
from qtquant.app.views import palette
from qtquant.app.views.concats import concat_rows, concat_status, model_info
from qtquant.app.views.groups import group_rows
from qtquant.app.views.looks import FADED_LOOK, NodeLook, compute_looks
from qtquant.app.views.perf import OPENED_NOTE, fidelity_basis, fidelity_html, perf_summary
from qtquant.quant.groups import share
from qtquant.base.vocab import Blank
from qtquant.perf import simulate_session
from qtquant.base.vocab import Overlay

HEX = re.compile(r"^#[0-9a-f]{6}$")


def _simulate(s):
    assert s.set_perf(simulate_session(s), s.revision, simulate_session(s, baseline=True))


def test_concat_rows_and_status(session):
    rows = concat_rows(session)
    assert [r.name for r in rows] == [c.node for c in session.concats()]
    r = max((r for r in rows if r.rescales), key=lambda r: r.ratio)  # the head, left in float, has none
    assert r.rescales > 0 and r.color == palette.mismatch_hex(r.ratio, r.rescales) and HEX.match(r.color)
    assert r.cells[0] == r.name and r.cells[2].endswith("×") and r.cells[5] == "—"  # no perf yet
    assert r.tooltip.splitlines()[0] == r.name and "scale" in r.tooltip  # the name first: a narrow list elides it
    assert r.sort_key(5) == -1.0 and r.sort_key(2) == r.ratio
    head = next(r for r in rows if r.name == "head")  # its ratio comes with no rescale: the tooltip says why
    assert head.info.export_float and head.rescales == 0 and "leaves the output in float" in head.tooltip
    assert "leaves the output in float" not in r.tooltip
    _simulate(session)
    assert any(row.gain_us for row in concat_rows(session))
    assert concat_status(session).startswith(f"{len(rows)} Concats, ")
    raw = Session(session.graph)  # not calibrated yet
    assert concat_rows(raw) == [] and concat_status(raw) == "Concat scales appear when calibration finishes."
    assert model_info(raw).calibration == "not calibrated yet"
    assert model_info(raw).concats.endswith("(analysis after calibration)")
    info = model_info(session)
    assert info.model == "det.onnx" and "mismatched" in info.concats and "policy union" in info.quantization


def test_model_info_says_calibration_and_check_counts(det_path):
    """Issue 20: "minmax on 5 samples" for 7 inputs, with no word about the 2 held back."""
    from qtquant.app import Options, open_model
    from qtquant.calib import CalibConfig

    s = open_model(det_path, options=Options(calib=CalibConfig(count=7, holdout=2)))
    s.run_calibration()
    info = model_info(s)
    assert info.calibration == "minmax, 7 samples + 2 held out (synthetic)"  # synthetic: extra ones
    assert info.calibration_tip == ("7 calibration samples from synthetic; the accuracy check runs on "
                                    "2 held-out samples")
    s = open_model(det_path, options=Options(calib=CalibConfig(count=4, holdout=0)))
    s.run_calibration()
    assert model_info(s).calibration == "minmax, 4 samples, in-sample check (synthetic)"


def test_perf_summary_tracks_changes_and_staleness(session):
    v = perf_summary(session)
    assert v.latency.text == "—" and v.chart == () and v.rescales.text.endswith("Concats")
    _simulate(session)
    v = perf_summary(session)
    assert " ms" in v.latency.text and v.latency.change is None and v.chart and not v.stale
    # how sure, from the march's fit: this march (the rescaling one, bayes) has no fitted figure
    assert "no fit figure like it" in v.latency.text and "board estimate" not in v.latency_tip
    assert v.board.text != "—" and "no figure of this kind in the fit" in v.board_tip
    assert v.note == ""
    share(session, ["c0_out", "c1_out", "cat1_out"])
    v = perf_summary(session)
    assert v.stale and v.note == "updating…"
    assert v.rescales.change is not None and v.rescales.change.good  # fewer rescales than unedited
    _simulate(session)
    v = perf_summary(session)
    assert not v.stale and v.note == OPENED_NOTE
    assert v.rescale_us.change is not None and v.rescale_us.change.color == "#2e7d32"
    assert v.rescale_us.html().endswith("</span>") and "−" in v.rescale_us.html()
    assert perf_summary(None).sqnr_html == "—"


def _figure(label, db, no_signal="", blank=None):
    from qtquant.fidelity.metrics import Figure

    return Figure(label, db, None, None, 1, no_signal, blank)


def test_fidelity_line_escapes_names_and_colours_changes():
    out = lambda h: SimpleNamespace(headline=h, slices=[1])  # noqa: E731
    fid = SimpleNamespace(outputs=["a", "b"], samples=1, in_sample=True, findings=["x"], host_default="", sparse={},
                          after={"a": out(_figure("<a>", 30.0)), "b": out(_figure("b", math.inf))},
                          before={"a": out(_figure("<a>", 32.0)), "b": out(_figure("b", math.inf))})
    html = fidelity_html(fid)
    assert html.startswith("&lt;a&gt;: 30.0 dB") and "(−2.00 dB)" in html and "#c62828" in html
    assert "b: inf" in html and "1 finding(s)" in html
    assert fidelity_basis(fid) == "1 in-sample sample, worst slice"
    fid.after["b"] = out(_figure("b", math.nan, "no signal: constant", Blank.NO_SIGNAL))
    assert "b: <i>no signal</i>" in fidelity_html(fid) and "representative data" in fidelity_html(fid)
    fid.after["b"] = out(_figure("b", None, "identical: equals the float model's", Blank.IDENTICAL))
    assert "b: <i>identical</i>" in fidelity_html(fid) and "representative data" not in fidelity_html(fid)
    fid.after["b"] = out(_figure('{"1": "1_minute_timer", "2": "5_minute_timer"}', 47.0))  # openWakeWord's name
    assert '; …: "5_minute_timer"}: 47.0 dB' in fidelity_html(fid)  # the figure stays in view
    fid.after["b"] = out(_figure("b", -0.001))  # a destroyed output: 0.0 dB, never "-0.0", in red
    assert 'b: <span style="color:#c62828">0.0 dB</span>' in fidelity_html(fid) and "-0.0" not in fidelity_html(fid)
    # After an edit an unchanged figure says it was measured again: a muted (±0.00 dB), not nothing
    fid.after["a"] = out(_figure("<a>", 32.001))
    assert "(±0.00 dB)" in fidelity_html(fid, edited=True) and "(±0.00 dB)" not in fidelity_html(fid)
    fid.after["a"] = out(_figure("<a>", 30.0))
    fid.after["b"] = out(_figure("b", 9.96))  # under LOW_SQNR_DB (10): lost, in red; at 10.0 a plain figure
    assert 'b: <span style="color:#c62828">10.0 dB</span>' in fidelity_html(fid)
    fid.after["b"] = out(_figure("b", 10.0))
    assert fidelity_html(fid).endswith("; b: 10.0 dB <span style=\"color:#c62828\">1 finding(s), see tooltip</span>")
    from qtquant.fidelity.metrics import AgreementSums

    cls = AgreementSums()
    cls.add(np.array([3]), np.array([3]))
    fid.findings = []
    fid.after["b"] = out(cls.figure("b"))  # an integer output: its agreement, in plain text while all agree
    assert fidelity_html(fid).endswith("; b: 1/1 equal")
    cls.add(np.array([3]), np.array([4]))
    fid.after["b"] = out(cls.figure("b"))  # ... and in the colour of a loss once a class is wrong
    assert 'b: <span style="color:#c62828">1/2 equal</span>' in fidelity_html(fid)


def test_group_rows(session):
    assert group_rows(session) == []
    g = share(session, ["c0_out", "c1_out", "cat1_out"])
    _simulate(session)
    (row,) = group_rows(session)
    assert row.id == g.id and row.title == f"group {g.id}" and row.color == palette.GROUP_COLORS[g.id % 8]
    assert [m.tensor for m in row.members] == ["c0_out", "c1_out", "cat1_out"]
    assert row.scale == pytest.approx(session.domains.scale_of("c0_out"))
    assert row.worst_bits is not None and row.worst_bits >= 0 and row.concats == ("cat1", "cat2")
    assert row.saved_us is not None and row.saved_us > 0
    assert row.cells[1] == "3" and "Concats: cat1" in row.tooltip
    m = row.members[0]
    assert m.own_scale == pytest.approx(session.baseline_domains.scale_of("c0_out"))
    assert m.cells[0] == "c0_out" and "produced by c0" in m.tooltip


def test_node_looks_per_mode(session):
    g = session.graph
    cs = session.concats()
    bad = next(c for c in cs if c.rescales)
    for mode in Overlay:
        looks = compute_looks(g, mode, cs, None)
        look = looks.nodes[bad.node]
        if mode != Overlay.BITS:  # there the fill is the bits lost
            assert look.fill == palette.mismatch_hex(bad.ratio, bad.rescales) and look.border_width == 2.0
        assert look.badges[-1].text == f"+{bad.rescales} rescale" and look.badges[-1].fg == "#ffffff"
        fed = next(m for m in bad.inputs if m.needs_rescale)
        assert HEX.match(looks.edges[(fed.tensor, bad.node)].color)
        assert looks.legend.mode == mode
    mm = compute_looks(g, Overlay.MISMATCH, cs)
    faded = [n for n, lk in mm.nodes.items() if lk.faded]
    assert faded and all(mm.nodes[n] is FADED_LOOK for n in faded)  # one shared frozen look
    assert mm.nodes[fed.producer] == NodeLook(border_width=2.0) and mm.edge_default.width == 1.0
    assert compute_looks(g, Overlay.LATENCY, cs).legend.title == "Latency: not simulated yet"
    lat = compute_looks(g, Overlay.LATENCY, cs, simulate_session(session))
    conv = lat.nodes[fed.producer]
    assert HEX.match(conv.fill) and conv.badges and "µs" in conv.badges[0].text
    assert conv.badges[0].text.split()[2] in ("cmp", "mem", "ovh")  # what bounds the layer
    bits = compute_looks(g, Overlay.BITS, cs)
    # a Concat's figure is its worst member's, and its badge says so (issue 20)
    assert bits.nodes[bad.node].badges[0].text.startswith("worst −") and bits.legend.hi == "≥ 8 bits"
    assert compute_looks(g, Overlay.NONE).nodes[bad.node].fill == palette.UNCALIBRATED  # no analysis yet


def test_the_concat_list_shows_the_part_of_a_name_that_tells_concats_apart():
    from qtquant.app.views.concats import concat_label

    # a YOLO's Concats all end in "/Concat": elided from the left, every row read "…/Concat"
    assert concat_label("/model.11/Concat") == "/model.11/…"
    assert concat_label("/model.22/Concat_3") == "/model.22/…_3"
    assert concat_label("attn/k_cat") == "attn/k_cat" and concat_label("/Concat") == "/Concat"
    from qtquant.app.views.fmt import distinct_parts

    # the inspector's tensors of /model.11/Concat come from three modules: no shared folder, still told apart
    assert distinct_parts(["/model.10/Resize_output_0", "/model.6/cv2/act/Mul_output_0",
                           "/model.11/Concat_output_0"]) == ["…Resize…", "…Mul…", "…Concat…"]
    assert distinct_parts(["conv_a_out", "conv_b_out"]) == ["conv_a_out", "conv_b_out"]  # flat names stay whole
