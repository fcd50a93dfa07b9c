"""One perf report: the window's Export writes the same HTML and CSV, byte for byte, as
``qtquant perf --report --csv`` for a cut, mixed-precision model (the header names the cut
and the precision choices in both)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from builders import branchy_concat_model, save  # noqa: E402
from qtquant.app import Options, open_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.cli import main  # noqa: E402
from qtquant.gui.window.exporting import ExportDialog, export_files  # noqa: E402
from qtquant.quant.precision import assignments_from_names  # noqa: E402

CUT = "conv0_out,cat_out"


def test_gui_perf_report_equals_the_cli_one(qtbot, tmp_path, capsys):
    path = save(branchy_concat_model(), tmp_path / "branchy.onnx")
    cli_html, cli_csv = tmp_path / "cli.perf.html", tmp_path / "cli.perf.csv"
    rc = main(["perf", path, "--calib-count", "2", "--cut", CUT, "--int16", "conv1", "--keep-float", "conv2",
               "--report", str(cli_html), "--csv", str(cli_csv)])
    capsys.readouterr()
    assert rc == 0

    s = open_model(path, options=Options(calib=CalibConfig(count=2)), cut=CUT)
    s.set_options(precision=assignments_from_names(s.graph, ["conv1"], ["conv2"], base=s.options.precision))
    s.run_calibration()
    dlg = ExportDialog(tmp_path / "gui", "branchy")
    qtbot.addWidget(dlg)
    for key in ("model", "plan", "overrides", "png"):
        dlg.checks[key].setChecked(False)
    rep = export_files(s.snapshot(), dlg.values())
    gui_html, gui_csv = tmp_path / "gui" / "branchy.perf.html", tmp_path / "gui" / "branchy.perf.csv"
    assert rep.written == [gui_html, gui_csv]

    html = gui_html.read_text(encoding="utf-8")
    assert "cut at 2 tensors (--cut)" in html  # the header the GUI's report once lacked
    assert "mixed precision: 1 int16 tensor(s), 1 kept in float" in html
    assert gui_html.read_bytes() == cli_html.read_bytes()
    assert gui_csv.read_bytes() == cli_csv.read_bytes()


def test_gui_export_report_equals_fix_report(qtbot, tmp_path, capsys):
    """With the model exported too, the header names its accuracy: ``qtquant fix --report`` and
    the window's Export still write the same bytes."""
    path = save(branchy_concat_model(), tmp_path / "branchy.onnx")
    cli_html = tmp_path / "cli.perf.html"
    rc = main(["fix", path, "--calib-count", "2", "--cut", CUT, "--int16", "conv1", "--keep-float", "conv2",
               "-o", str(tmp_path / "cli.onnx"), "--report", str(cli_html)])
    out = capsys.readouterr().out
    assert rc == 0 and f"wrote perf report {cli_html}" in out

    s = open_model(path, options=Options(calib=CalibConfig(count=2)), cut=CUT)
    s.set_options(precision=assignments_from_names(s.graph, ["conv1"], ["conv2"], base=s.options.precision))
    s.run_calibration()
    dlg = ExportDialog(tmp_path / "gui", "branchy")
    qtbot.addWidget(dlg)
    for key in ("plan", "overrides", "png"):
        dlg.checks[key].setChecked(False)
    rep = export_files(s.snapshot(), dlg.values())
    assert rep.accuracy and rep.accuracy.removeprefix("accuracy of the exported model ") in \
        cli_html.read_text(encoding="utf-8")
    assert (tmp_path / "gui" / "branchy.perf.html").read_bytes() == cli_html.read_bytes()


def test_gui_report_names_the_compile_log_as_the_cli_one(qtbot, tmp_path, capsys):
    """A compile log placed on the model: the header of the window's report says whose scales it runs
    on, as ``qtquant perf --compiler-log --report`` does (the export reads a snapshot: it carries the log)."""
    from hblogs import render_compile_log
    from qtquant.app.compilerlog import open_compile_log

    path = save(branchy_concat_model(chain=True), tmp_path / "branchy.onnx")
    (tmp_path / "hb.log").write_text(render_compile_log(branchy_concat_model(chain=True)))
    cli_html = tmp_path / "cli.perf.html"
    rc = main(["perf", path, "--calib-count", "2", "--int16", "conv1", "--compiler-log", str(tmp_path / "hb.log"),
               "--report", str(cli_html)])
    capsys.readouterr()
    assert rc == 0

    s = open_model(path, options=Options(calib=CalibConfig(count=2)))
    open_compile_log(s, tmp_path / "hb.log")
    s.set_options(precision=assignments_from_names(s.graph, ["conv1"], [], base=s.options.precision))
    s.run_calibration()
    dlg = ExportDialog(tmp_path / "gui", "branchy")
    qtbot.addWidget(dlg)
    for key in ("model", "plan", "overrides", "png"):
        dlg.checks[key].setChecked(False)
    export_files(s.snapshot(), dlg.values())
    html = (tmp_path / "gui" / "branchy.perf.html").read_text(encoding="utf-8")
    assert "compile log: compile log hb.log: the compiler&#39;s thresholds fix 5 of 6 observed tensors" in html
    assert html == cli_html.read_text(encoding="utf-8")
