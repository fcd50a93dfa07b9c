"""The figures qtquant prints measure the exported file's integer program exactly, whatever the CPU's
int8 kernels (qtquant.model.int8path): on AVX2 without VNNI onnxruntime's default u8s8 kernels add byte
products in saturating 16-bit pairs, and a report says so, with both figures.

The tests marked ``int8host`` also run in CI under ``qemu-x86_64 -cpu Haswell`` (AVX2, no VNNI), so both
kinds of host are covered on whatever machine CI has."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from builders import saturating_conv_model, save
from qtquant.app import open_model
from qtquant.cli import main
from qtquant.export.qdq import build_qdq_model
from qtquant.fidelity.measure import _host_default_line, measure_session, sqnr_db
from qtquant.fidelity.report import OutputFidelity
from qtquant.model.int8path import EXACT_INT8_ENTRY, host_int8_path
from qtquant.fidelity.metrics import Figure
from qtquant.model.runtime import make_session, quiet_options


def test_the_probe_measures_the_host():
    p = host_int8_path()
    assert p.isa and p.entry_exact  # every CPU onnxruntime's precision mode covers (x86 AVX2+, ARM)
    assert p.isa in p.kernels_text
    assert ("saturate" in p.kernels_text) is (not p.default_exact)
    def entry(so):
        try:
            return so.get_session_config_entry(EXACT_INT8_ENTRY[0])
        except Exception:  # onnxruntime raises for an entry that is not set
            return None

    # the entry only where this CPU needs it (elsewhere it would swap exact kernels for slower ones)
    assert entry(quiet_options()) == (None if p.default_exact else EXACT_INT8_ENTRY[1])
    assert entry(quiet_options(exact_int8=False)) is None


def _pairs_overflow(model: onnx.ModelProto, x_q: np.ndarray) -> bool:
    """Whether some neighbouring u8×s8 pair of the Conv overflows int16 (the activations shifted to u8)."""
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    w = next(v for v in init.values() if v.dtype == np.int8 and v.ndim == 4)[:, :, 0, 0].astype(np.int32)
    a = x_q.astype(np.int32).transpose(0, 2, 3, 1).reshape(-1, w.shape[1]) + 128
    pairs = a[:, None, 0::2] * w[None, :, 0::2] + a[:, None, 1::2] * w[None, :, 1::2]
    return bool(np.abs(pairs).max() > 32767)


@pytest.mark.int8host
def test_a_saturating_export_measures_the_exact_figure(tmp_path):
    s = open_model(save(saturating_conv_model(), tmp_path / "sat.onnx"))
    s.run_calibration()
    fid = measure_session(s)
    model = build_qdq_model(s).model
    feeds = list(s.calibration.holdout)
    # the program is one that a saturating kernel gets wrong: some pair passes int16 on the check data
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    x_scale = float(onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == q.input[1])))
    x_q = np.clip(np.round(np.concatenate([f["x"] for f in feeds]) / x_scale), -128, 127)
    assert _pairs_overflow(model, x_q)
    # the exact figure: Q/DQ evaluated in float, no fused kernel at all
    ref = make_session(s.graph.model, s.graph.base_dir, level="disabled")
    exact = make_session(model, s.graph.base_dir, level="disabled")
    want = np.concatenate([ref.run(["y"], f)[0] for f in feeds])
    got = np.concatenate([exact.run(["y"], f)[0] for f in feeds])
    assert fid.after["y"].headline.sqnr_db == pytest.approx(sqnr_db(want, got), abs=0.01)
    assert fid.after["y"].headline.sqnr_db > 30
    assert host_int8_path().kernels_text in fid.runtime
    if host_int8_path().default_exact:
        assert fid.host_default == ""
    else:  # this CPU's default session computes something else: said, with both figures
        assert "this CPU (" in fid.host_default and f"{fid.after['y'].headline.sqnr_db:.2f} dB" in fid.host_default
        assert "session.x64quantprecision=1" in fid.host_default


@pytest.mark.int8host
def test_fix_prints_the_exact_figure_and_the_host_line(tmp_path, capsys):
    path = save(saturating_conv_model(), tmp_path / "sat.onnx")
    assert main(["fix", path, "-o", str(tmp_path / "out.onnx"), "--no-perf"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("SQNR y"))
    assert float(row.split()[-2]) > 30  # after: the exact program's figure
    assert ("onnxruntime's default int8 kernels saturate" in out) is (not host_int8_path().default_exact)
    assert "int8 on " in out  # the runtime line names the int8 path


def _fig(label, db):
    return Figure(label=label, sqnr_db=db, cosine=1.0, max_abs=0.0, samples=4)


def test_the_host_line_gives_both_figures_only_when_they_differ():
    p = host_int8_path()
    exact = {"y": OutputFidelity("y", _fig("y", 33.57), [])}
    moved = {"y": OutputFidelity("y", _fig("y", 14.51), [])}
    line = _host_default_line(p, exact, moved, ["y"])
    assert "y 14.51 dB where the exact program gives 33.57 dB" in line and p.isa in line
    assert _host_default_line(p, exact, {"y": OutputFidelity("y", _fig("y", 33.55), [])}, ["y"]) == ""


def test_the_performance_dock_says_when_this_cpus_default_kernels_differ():
    from qtquant.app.views.perf import fidelity_html, fidelity_tip
    from qtquant.fidelity.report import Fidelity

    side = {"y": OutputFidelity("y", _fig("y", 33.57), [])}
    fid = Fidelity(["y"], side, side, samples=4)
    assert "default int8 kernels differ" not in fidelity_html(fid)
    fid.host_default = _host_default_line(host_int8_path(), side, {"y": OutputFidelity("y", _fig("y", 14.51), [])},
                                          ["y"])
    assert "default int8 kernels differ, see tooltip" in fidelity_html(fid)
    assert "14.51 dB where the exact program gives 33.57 dB" in fidelity_tip(fid)
