"""The analysis fills nodes, tensors, domains and Concat records slot by slot, past their
__init__ (a big graph makes 10,000s of each): each must equal what its __init__ makes, with
every slot set, so a field added later and not filled in there fails here."""

import dataclasses

from builders import branchy_concat_model, detector_model
from qtquant.quant.concat import ConcatInfo, ConcatMember, analyze_concats
from qtquant.quant.domains import Domain, build_domains
from qtquant.model.graph import Node, Tensor, graph_from_model
from qtquant.base.vocab import ConcatScaleRule


def _ranges(graph):
    return {t: (-1.0 - k % 3, 1.0 + k % 4) for k, t in enumerate(graph.observed_tensors)}


def _slots(cls):
    return [s for c in cls.__mro__ for s in getattr(c, "__slots__", ())]


def test_nodes_and_tensors_equal_their_init_made_twins():
    g = graph_from_model(branchy_concat_model(chain=True))
    for n in g.nodes.values():
        values = {s: getattr(n, s) for s in _slots(Node)}  # AttributeError: a slot left unset
        twin = Node(n.name, n.op_type, n.inputs, n.outputs, None, n.domain, n.index, (), n._src)
        # the attributes may be decoded already (the channel check reads a Conv's): compared decoded
        assert n.attrs == twin.attrs
        values["_attrs"] = twin._attrs
        assert values == {s: getattr(twin, s) for s in _slots(Node)}
    for t in g.tensors.values():
        values = {s: getattr(t, s) for s in _slots(Tensor)}
        twin = Tensor(t.name, t.shape, t.elem_type, t.kind, t.producer, list(t.consumers))
        assert values == {s: getattr(twin, s) for s in _slots(Tensor)}


def test_domains_and_concat_records_equal_their_init_made_twins():
    g = graph_from_model(detector_model())
    for rule in ConcatScaleRule:
        dm = build_domains(g, _ranges(g), concat_rule=rule)
        singles = [d for d in dm.domains.values() if len(d.members) == 1]
        assert singles
        for d in dm.domains.values():
            assert d == Domain(**{f.name: getattr(d, f.name) for f in dataclasses.fields(Domain)})
        infos = analyze_concats(g, dm)
        assert infos
        for info in infos:
            for m in info.members():
                assert m == ConcatMember(**{f.name: getattr(m, f.name) for f in dataclasses.fields(ConcatMember)})
            assert info == ConcatInfo(**{f.name: getattr(info, f.name) for f in dataclasses.fields(ConcatInfo)})
