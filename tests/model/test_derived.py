"""The derived state a graph carries (qtquant.model.derived): one store per graph, filled by the
exporter and the fidelity check, empty for a graph opened again."""

import copy
import pickle

from builders import branchy_concat_model
from qtquant.app import open_model
from qtquant.export import qdq, rescale, weights
from qtquant.model.derived import DerivedState, Slot
from qtquant.model.graph import graph_from_model


def test_a_slot_is_made_once_and_dropped_on_demand():
    made = []
    slot = Slot("test", lambda: made.append(1) or {"n": len(made)})
    store = DerivedState()
    first = store.get(slot)
    assert store.get(slot) is first and made == [1]
    store.drop(slot)
    assert store.get(slot) is not first and made == [1, 1]
    store.drop(Slot("never used", dict))  # no error


def test_a_pickled_or_deep_copied_store_starts_empty():
    slot = Slot("test", dict)
    store = DerivedState()
    store.get(slot)["kept"] = object()  # (not picklable as such: a lock, a session)
    for other in (pickle.loads(pickle.dumps(store)), copy.deepcopy(store)):
        assert other.get(slot) == {}
    assert "kept" in store.get(slot)


def test_each_graph_has_its_own_store_and_the_exporter_fills_it(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(branchy_concat_model().SerializeToString())
    s = open_model(str(path))
    s.run_calibration()
    g = s.graph
    qdq.build_qdq_model(s, record=True)
    assert g.derived.get(qdq.BASES) and g.derived.get(weights.WEIGHTS) and g.derived.get(rescale.BASES)
    again = graph_from_model(g.model)
    assert again.derived is not g.derived and not again.derived.get(qdq.BASES)
