"""File › Compare With…: a second file of the open model; the canvas, the Concat list and the
inspector show both sides, and an edit of the open model compares again."""

import pytest
from PySide6.QtCore import Qt

from builders import detector_model, save
from guikit import open_settled
from ortkit import ort_qdq_file
from qtquant.compare.live import compare_looks


@pytest.fixture
def pair(tmp_path):
    src = save(detector_model(), tmp_path / "det.onnx")
    return src, ort_qdq_file(src, str(tmp_path / "det_ort.onnx"))


def test_compare_with_a_second_file(qtbot, win, pair):
    src, other = pair
    open_settled(qtbot, win, src)
    a_cat1 = win.relay.concat("cat1").rescales
    win.comparison.open(other)
    qtbot.waitUntil(lambda: win.comparison.diff is not None, timeout=30000)
    d = win.comparison.diff
    assert d.b.name == "det_ort.onnx" and len(d.match.pairs) >= 10 and not d.match.only_a
    # the canvas: every Concat carries both counts, the unchanged nodes are faded
    win.scene.flush_looks()
    assert win.canvas.comparison is d
    looks = compare_looks(win.session.graph, d)
    cat1 = next(c for c in d.concats if c.a.node == "cat1")
    badge = looks.nodes["cat1"].badges[0].text
    assert badge == (f"A {cat1.a.rescales} → B {cat1.b.rescales}" if cat1.change else
                     f"{cat1.a.rescales} rescale(s), both")
    assert win.view.legend.title.startswith("Compare:")
    # the Concat list: the rescales column shows both sides
    m = win.concat_list.model
    col = m.HEADERS.index("Resc.")
    assert m.headerData(col, Qt.Horizontal) == "Resc. A→B"
    row = win.concat_list.row_of("cat1")
    text = m.data(m.index(row, col))
    assert text == (f"{a_cat1}→{cat1.b.rescales}" if a_cat1 != cat1.b.rescales else str(a_cat1))
    # the inspector: both sides of the selected Concat; selecting in the list selects on the canvas
    win.jump_to("cat1")
    win.scene.nodes["cat1"].setSelected(True)
    qtbot.waitUntil(lambda: win.inspector.node == "cat1")
    assert "Comparison with det_ort.onnx: rescales A" in win.inspector.notes.text()
    assert "scale A" in win.inspector.notes.text()
    # an edit of A compares again with the same B
    win.edits.auto_share()
    qtbot.waitUntil(lambda: win.comparison.diff is not d and win.comparison.diff is not None, timeout=20000)
    assert win.comparison.diff.b is d.b
    win.comparison.clear()
    assert win.canvas.comparison is None and m.headerData(col, Qt.Horizontal) == "Resc."
