"""``qtquant MODEL --input-shape ... --calib ...``: the command line's options reach the app (issue 20, item 3)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from builders import band_model  # noqa: E402
from guikit import settle  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.cli import main  # noqa: E402
from qtquant.quant.domains import Policy  # noqa: E402
from qtquant.gui.window import app as gui_app  # noqa: E402
from qtquant.gui.dialogs.modeldialog import OpenDialog  # noqa: E402
from qtquant.model.scales import Scheme  # noqa: E402


@pytest.fixture
def launched(monkeypatch):
    seen = {}

    def fake_run_app(model=None, **kw):
        seen.update(kw, model=model)
        return 0

    monkeypatch.setattr(gui_app, "run_app", fake_run_app)
    return seen


def test_every_common_option_reaches_the_app(launched, tmp_path):
    model = str(band_model(tmp_path / "m.onnx", dynamic=True))
    data = tmp_path / "calib.npy"
    np.save(data, np.zeros((3, 1, 3, 8, 8), np.float32))
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    assert main([model, "--input-shape", "x=1x3x8x8", "--calib", str(data), "--calib-count", "3",
                 "--observer", "percentile", "--scheme", "asym", "--march", "nash-e", "--policy", "max-input",
                 "--plan", str(plan), "--cut", "cat_red_out"]) == 0
    o = launched["options"]
    assert launched["model"] == model and launched["input_shapes"] == ["x=1x3x8x8"]
    assert launched["plan"] == str(plan) and launched["cut"] == "cat_red_out"
    assert (o.calib.source, o.calib.count, o.calib.observer) == (str(data), 3, "percentile")
    assert o.scheme is Scheme.parse("asym") and o.march == "nash-e" and o.policy is Policy("max-input")


def test_a_bad_option_is_one_line_before_any_window(launched, tmp_path, capsys):
    model = str(band_model(tmp_path / "m.onnx"))
    assert main([model, "--input-shape", "x=1xAx8x8"]) == 3
    assert main([model, "--plan", str(tmp_path / "none.json")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("qtquant: error:") for line in err)
    assert launched == {}
    assert main([model, "--stats", str(tmp_path / "s.npz")]) == 2  # refused, not silently ignored
    assert "--stats cannot be given when opening the app" in capsys.readouterr().err
    assert launched == {}
    with pytest.raises(SystemExit) as e:
        main([model, "--observer", "nonsense"])
    assert e.value.code == 2


def test_help_says_the_app_takes_the_options(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "qtquant MODEL.onnx [OPTIONS]" in out and "--input-shape" in out and "dialog is skipped" in out


def test_complete_options_open_without_the_dialog(qtbot, make_win, tmp_path, monkeypatch):
    """The old launch opened the dialog with 1x3x640x640 and synthetic data, ignoring both."""
    monkeypatch.setattr(OpenDialog, "exec", lambda self: pytest.fail("the dialog must not open"))
    model = band_model(tmp_path / "m.onnx", dynamic=True)
    data = tmp_path / "calib.npy"
    np.save(data, np.random.default_rng(0).normal(size=(4, 1, 3, 12, 12)).astype(np.float32))
    win = make_win()
    assert win.opener.launch(model, ["x=1x3x12x12"], CalibConfig(source=str(data), count=4))
    settle(qtbot, win)
    assert win.session.graph.input_shapes == {"x": (1, 3, 12, 12)}
    assert win.session.options.calib.source == str(data)


def test_incomplete_options_fill_the_dialog(qtbot, make_win, tmp_path, monkeypatch):
    shown = {}

    def exec_(self):
        shown.update(shape=self.shape_edits["x"].text(), source=self.source_path.text(),
                     observer=self.observer.currentText())
        return OpenDialog.Rejected

    monkeypatch.setattr(OpenDialog, "exec", exec_)
    model = band_model(tmp_path / "m.onnx", dynamic=True)
    win = make_win()
    assert not win.opener.launch(model, [], CalibConfig(source=str(tmp_path), observer="percentile"))
    assert shown["source"] == str(tmp_path) and shown["observer"] == "percentile"


def test_a_plan_given_at_launch_is_one_edit_on_the_stack(qtbot, make_win, tmp_path):
    """``qtquant MODEL --plan``: applied once the first calibration is in, as one command (the views
    refresh once for its groups; Undo takes it back)."""
    from builders import branchy_concat_model, save
    from qtquant.app import Options, open_model
    from qtquant.files.plan import save_plan

    model = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "m.onnx")
    s = open_model(model, options=Options(calib=CalibConfig(count=2)))
    s.run_calibration()
    s.groups.share(s, ["conv0_out", "conv1_out"])
    plan = save_plan(s, tmp_path / "p.plan.json")
    win = make_win()
    seen = []
    win.relay.groupsChanged.connect(lambda: seen.append("groups"))
    assert win.opener.launch(model, [], CalibConfig(count=3), plan=plan)
    settle(qtbot, win)
    assert win.session.groups.as_lists() == [("conv0_out", "conv1_out")]
    assert seen == ["groups"] and win.stack.texts() == ["Apply plan p.plan.json"]
    win.stack.undo()
    assert len(win.session.groups) == 0 and seen == ["groups"] * 2
