"""A moved project finds its model, or lets the user locate it, checked by hash (issue 20)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QFileDialog, QMessageBox  # noqa: E402

from builders import edit_model, other_model  # noqa: E402
from guikit import open_settled, settle  # noqa: E402

CAT1 = ("br_a_out", "br_b_out", "br_c_out", "cat1_out")


@pytest.fixture
def saved(qtbot, make_win, tmp_path):
    """A project in projects/ whose model lives in models/ (apart: stored absolute)."""
    (tmp_path / "models").mkdir()
    (tmp_path / "projects").mkdir()
    model = edit_model(tmp_path / "models" / "edit.onnx")
    w = make_win()
    open_settled(qtbot, w, model)
    assert w.editor.share_nodes(["cat1"])
    pp = tmp_path / "projects" / "p.qtquant"
    assert w.projects.save_to(pp)
    qtbot.waitUntil(lambda: not w.jobs.active("statistics"), timeout=20000)
    return pp, model


def test_a_moved_model_is_located_and_saved_with_its_new_path(qtbot, make_win, prompts, saved, tmp_path,
                                                                monkeypatch):
    pp, model = saved
    new = tmp_path / "moved"
    new.mkdir()
    located = model.rename(new / "edit.onnx")
    picked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: (picked.append(a[2]) or str(located), "")))
    prompts["answers"] = [QMessageBox.Open]
    w = make_win()
    assert w.open_project(pp, ask=False) is not None
    settle(qtbot, w)
    assert prompts["asked"][0][0] == "Model not found" and "edit.onnx" in prompts["asked"][0][1]
    assert picked and picked[0].endswith("edit.onnx")
    assert w.session.graph.path == located and w.session.groups.as_lists() == [CAT1]
    assert w.projects.path == pp and w.projects.modified  # the new place is not saved yet
    assert w.projects.save()
    assert json.loads(pp.read_text())["model"] == str(located.resolve())
    assert not w.projects.modified


def test_a_different_file_is_refused_unless_the_user_says_so(qtbot, make_win, prompts, saved, tmp_path,
                                                             monkeypatch):
    pp, model = saved
    model.unlink()
    wrong = other_model(tmp_path / "wrong.onnx")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(wrong), "")))
    prompts["answers"] = [QMessageBox.Open, QMessageBox.No]
    w = make_win()
    assert w.open_project(pp, ask=False) is None
    assert [t for t, _ in prompts["asked"]] == ["Model not found", "Not the same model"]
    assert "SHA-256 differs" in prompts["asked"][1][1]
    assert w.session is None and not w.errors
    # Cancel at the first question: nothing opens, nothing is said twice
    prompts["answers"] = [QMessageBox.Cancel]
    assert w.open_project(pp, ask=False) is None and len(prompts["asked"]) == 3
