"""Issue 53's rough edges in the window, each through the real widgets."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")


from builders import branchy_concat_model, edit_model, save, synthetic_model  # noqa: E402
from guikit import open_settled, settle  # noqa: E402
from qtquant.app.scene.hierarchy import block_name  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402


def test_an_unreadable_photo_is_skipped_and_named_in_the_job_log(qtbot, make_win, tmp_path):
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    (folder / "broken.jpg").write_bytes(b"not an image")
    win = make_win(show_dialogs=False)
    win.open_model(save(branchy_concat_model(), tmp_path / "m.onnx"), calib=CalibConfig(source=str(folder), count=4))
    settle(qtbot, win)
    log = "\n".join(win.job_log.entries)
    assert "skipped unreadable image" in log and "broken.jpg" in log
    assert "up to 4 samples" in log  # the job says what it asked for, not a count it may not have
    assert win.session.calibration.samples == 3  # the three readable photos


def test_collapse_all_on_a_flat_model_says_why(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    win.actions_by_name["collapse_all"].trigger()
    assert "no module hierarchy" in win.statusBar().currentMessage()


def test_auto_share_is_offered_on_a_concat_not_on_a_mul(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx"))
    pos = win.view.mapToGlobal(win.view.rect().center())
    win.edits.show_context_menu("br_a", pos)
    assert not any("Auto-share" in a.text() for a in win.edits.context_menu.actions())
    win.edits.show_context_menu("cat1", pos)
    assert any("Auto-share" in a.text() for a in win.edits.context_menu.actions())
    win.edits.context_menu.close()


def test_auto_share_message_counts_in_words(qtbot, make_win, tmp_path):
    win = make_win()
    open_settled(qtbot, win, edit_model(tmp_path / "edit.onnx", k_e=0.6))
    rep = win.editor.auto_share(0.5)
    assert rep is not None
    msg = win.statusBar().currentMessage()
    assert "1 Concats" not in msg and "1 groups" not in msg


def test_collapse_keeps_the_block_selected_so_shift_e_walks_up(qtbot, make_win, big_model):
    win = make_win()
    open_settled(qtbot, win, big_model)
    B = block_name("/model.5")
    win.scene.clearSelection()
    win.scene.nodes[B].setSelected(True)
    win.actions_by_name["expand"].trigger()
    win.scene.nodes["/model.5/Concat"].setSelected(True)
    win.actions_by_name["collapse"].trigger()
    assert win.scene.selected_names() == [B]
    vis = win.view.mapToScene(win.view.viewport().rect()).boundingRect()
    assert vis.intersects(win.scene.nodes[B].sceneBoundingRect())


def test_fit_to_view_on_a_tall_graph_is_readable(qtbot, make_win, tmp_path):
    from qtquant.gui.graphview import FIT_MIN_ZOOM

    win = make_win()
    open_settled(qtbot, win, save(synthetic_model(400), tmp_path / "tall.onnx"))
    win.actions_by_name["fit"].trigger()
    assert win.view.zoom >= FIT_MIN_ZOOM
    vis = win.view.mapToScene(win.view.viewport().rect()).boundingRect()
    assert any(vis.intersects(it.sceneBoundingRect()) for it in win.scene.nodes.values())
