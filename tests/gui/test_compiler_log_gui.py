"""A compile log opened beside the model in the app: File › Open Compile Log and a dropped .txt,
the compiler's scales in the session, its requantized inputs marked on the canvas apart from
qtquant's prediction, the Compiler-cosine overlay, the Concat list's Log column and the inspector."""

from __future__ import annotations

import onnx
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QMessageBox

from builders import branchy_concat_model
from guikit import open_settled, settle
from hblogs import LogSpec, render_compile_log
from qtquant.app.views.compiler import COMPILER_AGREE_EDGE, COMPILER_EDGE
from qtquant.base.vocab import Overlay

THRESHOLDS = {"x": 1.0, "relu0_out": 4.0, "pool0_out": 4.0, "cat_out": 4.0}


@pytest.fixture
def files(tmp_path):
    model = branchy_concat_model(chain=True)
    onnx.save(model, tmp_path / "m.onnx")
    spec = LogSpec(thresholds=THRESHOLDS, requantize=("conv1_out",), cosines={"conv2": 0.5, "cat": 0.7})
    (tmp_path / "hb_mapper_makertbin.txt").write_text(render_compile_log(model, spec))
    wide = LogSpec(thresholds=THRESHOLDS, requantize=("conv1_out",), input_shape=(1, 3, 32, 32))
    (tmp_path / "other_shape.log").write_text(render_compile_log(model, wide))
    (tmp_path / "junk.txt").write_bytes(b"\x00\x01 not a log")
    return tmp_path


def _drop(win, path):
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(path))])
    win.dropEvent(QDropEvent(QPointF(10, 10), Qt.CopyAction, md, Qt.LeftButton, Qt.NoModifier))


def test_file_menu_opens_a_log_and_everything_shows_it(qtbot, win, files, monkeypatch):
    open_settled(qtbot, win, files / "m.onnx")
    action = win.window_actions.by_name["open_compiler_log"]
    assert action.isEnabled() and action in win.menuBar().actions()[0].menu().actions()
    log_col = win.concat_list.model.HEADERS.index("Log")
    assert win.concat_list.table.isColumnHidden(log_col)  # no log: no Log column
    monkeypatch.setattr("qtquant.gui.window.compilerlogs.pick_open_file",
                        lambda *a: str(files / "hb_mapper_makertbin.txt"))
    events = []
    win.session.events.compiler_log.connect(events.append)
    action.trigger()
    s = win.session
    assert events and events[0] is s.compiler_log and s.compiler_scales
    # The compiler's threshold is the scale now.
    assert s.domains.scale_of("relu0_out") == pytest.approx(4.0 / 127)
    settle(qtbot, win)
    # Canvas: the compiler's requantized input is a dashed edge (conv1_out -> cat), apart from
    # qtquant's own solid prediction; cat carries a "log 1" badge.
    win.set_overlay(Overlay.MISMATCH)

    def edge(tensor, dst):
        return next(e for e in win.scene.edges if (e.tensor, e.dst) == (tensor, dst))

    qtbot.waitUntil(lambda: edge("conv1_out", "cat").pen().style() == Qt.DashLine, timeout=10000)
    assert edge("conv1_out", "cat").color.name() in (COMPILER_EDGE, COMPILER_AGREE_EDGE)
    assert edge("pool0_out", "cat").pen().style() != Qt.DashLine  # not requantized by the compiler
    assert "log 1" in win.scene.nodes["cat"].badge_texts
    # Model dock: what the scales rest on.
    assert "compile log: 4 scales" in win.model_info.fields["calibration"].text()
    # Concat list: the Log column.
    assert not win.concat_list.table.isColumnHidden(log_col)
    m = win.concat_list.model
    col = m.HEADERS.index("Log")
    row = next(i for i, r in enumerate(m.rows) if r.name == "cat")
    assert m.data(m.index(row, col)).startswith("1 ")
    assert "compile log: requantizes conv1_out" in m.data(m.index(row, 0), Qt.ToolTipRole)
    # Inspector: both lists.
    win.inspector.show_node("cat")
    text = win.inspector.compiler_label.text()
    assert win.inspector.compiler_label.isVisibleTo(win.inspector) and "Compiler requantizes" in text
    assert "conv1_out" in text and "qtquant predicts" in text
    # The cosine overlay: the log's lowest cosine is the darkest node, with its figure.
    win.set_overlay(Overlay.COSINE)
    qtbot.waitUntil(lambda: "cos 0.500" in win.scene.nodes["conv2"].badge_texts, timeout=10000)
    assert win.view.legend.title.startswith("Compiler cosine")
    assert win.scene.nodes["conv2"].fill != win.scene.nodes["conv2"].base_fill


def test_drop_a_log_and_the_shape_question(qtbot, win, files, prompts):
    open_settled(qtbot, win, files / "m.onnx")
    prompts["answers"] = [QMessageBox.No]
    _drop(win, files / "other_shape.log")
    qtbot.waitUntil(lambda: len(prompts["asked"]) == 1, timeout=5000)
    assert "1x3x32x32 in the log" in prompts["asked"][0][1]
    assert win.session.compiler_log is None
    prompts["answers"] = [QMessageBox.Yes]
    _drop(win, files / "other_shape.log")
    qtbot.waitUntil(lambda: win.session.compiler_log is not None, timeout=5000)
    assert win.session.compiler_log.shape_differs
    _drop(win, files / "hb_mapper_makertbin.txt")
    qtbot.waitUntil(lambda: not win.session.compiler_log.shape_differs, timeout=5000)


def test_a_bad_log_is_an_error_dialog(qtbot, win, files):
    open_settled(qtbot, win, files / "m.onnx")
    win.show_dialogs = False
    _drop(win, files / "junk.txt")
    qtbot.waitUntil(lambda: bool(win.errors), timeout=5000)
    title, message, _ = win.errors[-1]
    assert title == "Cannot use the compile log" and "not a text file" in message and "\n" not in message
    assert win.session.compiler_log is None


@pytest.mark.slow
def test_screenshot_with_a_compile_log(qtbot, files, capsys):
    """``qtquant screenshot --compiler-log``: the picture shows the compile log's dashed edges;
    a log of another shape is exit 3 unless --compiler-log-any-shape."""
    import numpy as np
    from PIL import Image

    from qtquant.app.views.compiler import COMPILER_AGREE_EDGE, COMPILER_EDGE
    from qtquant.cli import main

    out = files / "shot.png"
    assert main(["screenshot", str(files / "m.onnx"), "--compiler-log", str(files / "hb_mapper_makertbin.txt"),
                 "-o", str(out), "--overlay", "mismatch", "--select", "cat", "--size", "900x600",
                 "--calib-count", "3", "--canvas-only"]) == 0
    px = np.asarray(Image.open(out).convert("RGB")).reshape(-1, 3).astype(int)
    rgb = [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in (COMPILER_EDGE, COMPILER_AGREE_EDGE)]
    assert max((np.abs(px - c).sum(axis=1) < 30).sum() for c in rgb) > 30  # the dashed edge is drawn
    capsys.readouterr()
    assert main(["screenshot", str(files / "m.onnx"), "--compiler-log", str(files / "other_shape.log"),
                 "-o", str(out), "--calib-count", "2"]) == 3
    assert "1x3x32x32 in the log" in capsys.readouterr().err


def test_a_project_keeps_its_compile_log(qtbot, make_win, files, monkeypatch):
    """Saved with a compile log placed, a project reopens with it (the Concat list's Log column shows it);
    a log that went missing leaves the project opening without it, and the job log says why."""
    w = make_win()
    open_settled(qtbot, w, files / "m.onnx")
    monkeypatch.setattr("qtquant.gui.window.compilerlogs.pick_open_file",
                        lambda *a: str(files / "hb_mapper_makertbin.txt"))
    w.window_actions.by_name["open_compiler_log"].trigger()
    assert w.session.compiler_log is not None
    pp = files / "p.qtquant"
    assert w.projects.save_to(pp)
    qtbot.waitUntil(lambda: not w.jobs.active("statistics"), timeout=20000)
    again = make_win()
    assert again.open_project(pp, ask=False) is not None
    settle(qtbot, again)
    s = again.session
    assert s.compiler_log is not None and s.compiler_log.requantized == ("conv1_out",) and s.compiler_scales
    log_col = again.concat_list.model.HEADERS.index("Log")
    assert not again.concat_list.table.isColumnHidden(log_col)
    (files / "hb_mapper_makertbin.txt").rename(files / "moved.txt")
    third = make_win()
    assert third.open_project(pp, ask=False) is not None
    settle(qtbot, third)
    assert third.session.compiler_log is None and third.concat_list.table.isColumnHidden(log_col)
    assert any("compile log was not placed" in e for e in third.job_log.entries)
