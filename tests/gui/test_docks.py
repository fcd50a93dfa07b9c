"""Dock-level tests: a Session built headless and one widget wrapped with ``qtbot.addWidget``
(the napari way), without a window, a controller or background jobs.

The edits go through the session's command stack and the results are installed with
``session.set_perf`` / ``set_fidelity``, exactly what the window's controller does when a
job ends.  Each dock must refresh once per edit and update only its result part when a
result arrives.
"""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402

from builders import RESCALING_MARCH, detector_model, edit_model  # noqa: E402
from qtquant.app import Options, Session, open_model  # noqa: E402
from qtquant.app.commands import ShareCommand  # noqa: E402
from qtquant.app.views.palette import MISMATCH_BANDS  # noqa: E402
from qtquant.app.views.perf import OPENED_NOTE  # noqa: E402
from qtquant.app.views.perfdata import fidelity_measure, simulator  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.quant.concat import concat_members  # noqa: E402
from qtquant.gui.window.actions import OptionWidgets  # noqa: E402
from qtquant.gui.docks.panels import ConcatList, GroupsPanel, PerfSummary  # noqa: E402
from qtquant.gui.window.editing import Editor  # noqa: E402
from qtquant.model.graph import graph_from_model  # noqa: E402
from qtquant.gui.relay import SessionRelay  # noqa: E402

GREEN = MISMATCH_BANDS[0][2]


@pytest.fixture
def session(tmp_path):
    s = open_model(edit_model(tmp_path / "edit.onnx"),
                   options=Options(march=RESCALING_MARCH, calib=CalibConfig(count=4)))
    s.run_calibration()
    return s


@pytest.fixture
def counts(monkeypatch):
    """Calls of each dock's refresh and result updates (patched before a widget connects them)."""
    seen = Counter()

    def count(cls, name):
        orig = getattr(cls, name)

        def counted(self):
            seen[f"{cls.__name__}.{name}"] += 1
            return orig(self)

        monkeypatch.setattr(cls, name, counted)

    for cls, names in ((ConcatList, ("refresh",)), (GroupsPanel, ("refresh", "show_perf")),
                       (PerfSummary, ("refresh", "show_perf", "show_fidelity"))):
        for name in names:
            count(cls, name)
    return seen


def dock(qtbot, cls, session):
    relay = SessionRelay(session)
    w = cls(relay)
    qtbot.addWidget(w)
    w.resize(700, 320)
    w.show()
    w.refresh()  # a dock shows the session it is given at once; here it is given it before it exists
    return relay, w


def share_cat1(relay):
    s = relay.session
    assert relay.stack.push(ShareCommand(tuple(concat_members(s.graph, "cat1")), "cat1"))


def simulate(session):
    sim = simulator()
    snap = session.snapshot()
    assert session.set_perf(sim(snap), snap.revision, sim(snap, baseline=True))


def cells(table_model, row):
    return [table_model.index(row, c).data() for c in range(table_model.columnCount())]


# -- the Concat list ------------------------------------------------------------------------------------


def test_concat_list_rows_follow_edits_keep_the_selection_and_jump(qtbot, session, counts):
    relay, w = dock(qtbot, ConcatList, session)
    m = w.model
    assert [r.name for r in m.rows] == ["cat2", "cat1"]  # sorted by ratio: 8x, then 6x
    assert cells(m, w.row_of("cat1"))[:4] == ["cat1", "3", "6×", "2"]
    assert w.status.text().startswith("2 Concats, 2 mismatched, 3 rescales")
    w.select_name("cat1")
    counts.clear()
    share_cat1(relay)
    assert counts["ConcatList.refresh"] == 1  # one edit, one refresh
    r = w.row_of("cat1")
    assert cells(m, r)[3] == "0" and m.index(r, 0).data(Qt.DecorationRole) == QColor(GREEN)
    assert [i.row() for i in w.table.selectionModel().selectedRows()] == [r]  # still on cat1
    assert w.status.text().startswith("2 Concats, 1 mismatched, 1 rescales")
    with qtbot.waitSignal(w.nodeActivated) as hit:
        cell = w.table.visualRect(m.index(w.row_of("cat2"), 0))
        qtbot.mouseClick(w.table.viewport(), Qt.LeftButton, pos=cell.center())
    assert hit.args == ["cat2"]


def test_concat_list_gain_column_updates_alone_when_a_simulation_arrives(qtbot, session, counts):
    relay, w = dock(qtbot, ConcatList, session)
    m = w.model
    assert cells(m, w.row_of("cat1"))[5] == "—"  # not simulated yet
    before = list(m.rows)
    counts.clear()
    simulate(session)
    assert counts["ConcatList.refresh"] == 0  # a result is not an edit: the rows stay, the gains fill in
    assert [r.name for r in m.rows] == [r.name for r in before]
    assert cells(m, w.row_of("cat1"))[5].endswith("s")  # "… µs"


def test_concat_list_float_output_threshold_is_its_own_control(qtbot, counts):
    """Above the table, the float-output threshold: the head Concat of a detector (scores next to
    pixel boxes, ~8.8 bits apart) feeds the model outputs and stays float (no rescale) until it is
    raised past that; the toolbar's auto-share threshold does not move the table at all."""
    s = Session(graph_from_model(detector_model()), Options(march=RESCALING_MARCH))
    s.run_calibration()
    relay, w = dock(qtbot, ConcatList, s)
    editor = Editor(relay)
    toolbar = OptionWidgets()  # the window wires both controls to the editor this way
    toolbar.thresholdChosen.connect(editor.set_threshold)
    w.floatOutputThresholdChosen.connect(editor.set_float_output_threshold)
    relay.optionsChanged.connect(lambda *_: w.show_options(relay.session.options))
    w.show_options(s.options)
    m = w.model

    def head():
        return cells(m, w.row_of("head"))

    assert w.float_output.value() == 1.0 and head()[3] == "0"
    before = [cells(m, r) for r in range(m.rowCount())]
    toolbar.bits.setValue(12.0)  # the auto-share threshold: an option, and no change to the table
    assert s.options.auto_share_max_bits_lost == 12.0 and relay.stack.undo_text == "Auto-share threshold: 12 bits"
    assert [cells(m, r) for r in range(m.rowCount())] == before
    counts.clear()
    w.float_output.setValue(12.0)
    assert counts["ConcatList.refresh"] == 1
    assert s.options.float_output_max_bits_lost == 12.0 and head()[3] == "1"
    assert relay.stack.undo_text == "Float-output threshold: 12 bits"
    relay.stack.undo()
    assert w.float_output.value() == 1.0 and head()[3] == "0"
    assert s.options.auto_share_max_bits_lost == 12.0  # the other threshold keeps its own value


def test_toolbar_threshold_typed_then_auto_share_shares_at_it(qtbot):
    """The toolbar's auto-share threshold typed but not entered counts when Auto-share runs (the
    window commits it first): one option step, then the auto-share at that threshold; the
    float-output threshold stays where it was."""
    s = Session(graph_from_model(detector_model()), Options(march=RESCALING_MARCH))
    s.run_calibration()
    relay = SessionRelay(s)
    editor = Editor(relay)
    toolbar = OptionWidgets()
    toolbar.show_options(s.options)
    toolbar.thresholdChosen.connect(editor.set_threshold)
    qtbot.addWidget(toolbar.bits)
    toolbar.bits.show()
    toolbar.bits.lineEdit().selectAll()
    qtbot.keyClicks(toolbar.bits.lineEdit(), "12")
    assert s.options.auto_share_max_bits_lost == 1.0  # typed, not entered
    toolbar.commit()
    rep = editor.auto_share()
    assert rep.max_bits_lost == 12.0 and "head" in rep.grouped
    assert relay.stack.texts() == ["Auto-share threshold: 12 bits", "Auto-share (≤ 12 bits)"]
    assert s.options.float_output_max_bits_lost == 1.0


# -- the perf summary ---------------------------------------------------------------------------------


def test_perf_summary_refreshes_once_per_edit_and_results_fill_their_part(qtbot, session, counts):
    relay, w = dock(qtbot, PerfSummary, session)
    v = w.values
    assert v["rescales"].text() == "3 in 2 Concats" and v["latency"].text() == "—" and not w.chart.rows
    simulate(session)
    assert " ms" in v["latency"].text() and " ms" in v["board"].text() and w.chart.rows and w.note.text() == ""
    latency = v["latency"].text()
    counts.clear()
    share_cat1(relay)
    assert counts == {"PerfSummary.refresh": 1}
    assert v["rescales"].text().startswith("1 in 1 Concats") and "was 3 in 2" in v["rescales"].text()
    assert w.note.text() == "updating…"  # the figures shown are the unedited model's
    simulate(session)
    assert counts == {"PerfSummary.refresh": 1, "PerfSummary.show_perf": 1}
    assert w.note.text() == OPENED_NOTE
    assert v["latency"].text() != latency and "−" in v["latency"].text()  # faster, in green
    fid = fidelity_measure()(session.snapshot())
    assert session.set_fidelity(fid, session.revision)
    assert counts["PerfSummary.show_fidelity"] == 1 and counts["PerfSummary.refresh"] == 1
    assert "y1:" in v["sqnr"].text() and v["sqnr"].toolTip()


def test_march_selector_says_what_the_user_chose(qtbot, session):
    relay, w = dock(qtbot, PerfSummary, session)
    with qtbot.waitSignal(w.marchChanged) as chosen:
        w.march.setCurrentText("nash-e")
    assert chosen.args == ["nash-e"]
    with qtbot.assertNotEmitted(w.marchChanged):  # showing the session's march is not a choice
        w.set_march("bayes-e")
    assert w.march.currentText() == "bayes-e"


# -- the groups panel -----------------------------------------------------------------------------------


def test_groups_panel_lists_a_share_keeps_its_items_for_results_and_follows_undo(qtbot, session, counts):
    relay, w = dock(qtbot, GroupsPanel, session)
    tree = w.tree
    assert tree.topLevelItemCount() == 0 and not w.hint.isHidden()
    counts.clear()
    share_cat1(relay)
    assert counts == {"GroupsPanel.refresh": 1}
    assert tree.topLevelItemCount() == 1 and w.hint.isHidden()
    top = tree.topLevelItem(0)
    assert top.text(1) == "4" and top.childCount() == 4
    assert [top.child(i).text(0) for i in range(4)] == ["br_a_out", "br_b_out", "br_c_out", "cat1_out"]
    gid = session.groups.group_of("cat1_out").id
    with qtbot.waitSignal(w.groupSelected) as picked:
        qtbot.mouseClick(tree.viewport(), Qt.LeftButton, pos=tree.visualItemRect(top).center())
    assert picked.args == [gid]
    if simulator() is not None:
        assert top.text(4) == "—"
        simulate(session)
        assert counts == {"GroupsPanel.refresh": 1, "GroupsPanel.show_perf": 1}
        assert tree.topLevelItem(0) is top and top.isSelected()  # the same item, still selected
        assert top.text(4).endswith("s") and w.rows[0].saved_us > 0
    with qtbot.waitSignal(w.groupSelected) as gone:
        relay.stack.undo()
    assert gone.args == [-1] and tree.topLevelItemCount() == 0 and not w.hint.isHidden()
    assert counts["GroupsPanel.refresh"] == 2  # the undo is the second edit


def test_groups_panel_context_menu_asks_for_edits(qtbot, session):
    relay, w = dock(qtbot, GroupsPanel, session)
    share_cat1(relay)
    gid = session.groups.group_of("cat1_out").id
    top = w.tree.topLevelItem(0)
    top.setExpanded(True)
    member = top.child(0)
    w._menu(w.tree.visualItemRect(member).center())
    acts = {a.text(): a for a in w.menu.actions()}
    w.menu.close()
    with qtbot.waitSignal(w.removeMemberRequested) as removed:
        acts["Remove br_a_out from the group"].trigger()
    assert removed.args == [gid, "br_a_out"]
    with qtbot.waitSignal(w.ungroupRequested) as ungroup:
        next(a for t, a in acts.items() if t.startswith("Ungroup")).trigger()
    assert ungroup.args == [[gid]]
    assert len(session.groups) == 1  # the dock only asks: the window's editor makes the edit
