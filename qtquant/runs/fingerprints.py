"""Fingerprints of a graph's tensors: what computes each one (its node, attributes, the values
of its initializers, not their names, and its inputs' fingerprints).  The incremental runner
(:mod:`qtquant.runs.incremental`) keeps the int8 tensors of earlier runs by fingerprint: a tensor whose
fingerprint is unchanged after an edit is not computed again."""

from __future__ import annotations

import functools
import hashlib

import onnx

from ..export.rewrite import raw_value_key

__all__ = ["fingerprints", "Fingerprinter", "value_key"]

def value_key(t: onnx.TensorProto) -> bytes:
    """The value of an initializer, not its name (a rebuilt model names its scales afresh)."""
    body = t.raw_data
    if not body:
        c = onnx.TensorProto()
        c.CopyFrom(t)
        c.name = ""
        body = c.SerializeToString()
    return raw_value_key(t.data_type, t.dims, body)


class Fingerprinter:
    """:func:`fingerprints` of one graph for any values of its initializers: each node's own part
    (op, attributes) and each initializer's digest are hashed once, an edit hashes its new values
    and the wiring only (the whole program's fingerprints cost 8 ms a time on yolov8n_320)."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.salt = salt = hashlib.sha1(repr(sorted((o.domain, o.version) for o in model.opset_import))
                                        .encode()).digest()
        self.base: dict[str, bytes] = {t.name: hashlib.sha1(salt + value_key(t)).digest() for t in g.initializer}
        for i in g.input:
            if i.name not in self.base:
                self.base[i.name] = hashlib.sha1(salt + b"input:" + i.name.encode()).digest()
        self.nodes = []
        for n in g.node:
            m = hashlib.sha1(salt)
            m.update(f"{n.domain}/{n.op_type}/{len(n.input)}".encode())
            for a in n.attribute:
                m.update(a.SerializeToString())
            self.nodes.append((m, tuple(n.input), tuple(n.output)))

    def __call__(self, values: dict[str, onnx.TensorProto] | None = None) -> dict[str, bytes] | None:
        """Tensor name -> fingerprint with ``values`` (initializer name -> tensor) in place of the
        graph's own; None when the nodes are out of topological order.

        From the graph's own fingerprints (computed once), only the nodes downstream of a value
        that differs are hashed again: an edit moves a few of yolov8n_320's program's ~600 nodes'
        inputs (the other nodes' fingerprints cannot change: their inputs' did not)."""
        own = self._own
        if own is None or any(name not in self.base for name in (values or ())):
            return self._full(values or {})
        h = dict(own)
        dirty = set()
        for name, t in (values or {}).items():
            d = hashlib.sha1(self.salt + value_key(t)).digest()
            if d != own[name]:
                h[name] = d
                dirty.add(name)
        if not dirty:
            return h
        for m0, inputs, outputs in self.nodes:
            if dirty.isdisjoint(inputs):
                continue
            m = m0.copy()
            for i in inputs:
                m.update(h[i] if i else b"-")
            d = m.digest()
            for k, o in enumerate(outputs):
                if o:
                    h[o] = hashlib.sha1(d + k.to_bytes(4, "little")).digest()
                    dirty.add(o)
        return h

    @functools.cached_property
    def _own(self) -> dict[str, bytes] | None:
        """The fingerprints with the graph's own values (None: nodes out of order)."""
        return self._full({})

    def _full(self, values) -> dict[str, bytes] | None:
        h = dict(self.base)
        for name, t in values.items():
            h[name] = hashlib.sha1(self.salt + value_key(t)).digest()
        for m0, inputs, outputs in self.nodes:
            m = m0.copy()
            for i in inputs:
                if not i:
                    m.update(b"-")
                    continue
                d = h.get(i)
                if d is None:
                    return None
                m.update(d)
            d = m.digest()
            for k, o in enumerate(outputs):
                if o:
                    h[o] = hashlib.sha1(d + k.to_bytes(4, "little")).digest()
        return h


def fingerprints(model: onnx.ModelProto) -> dict[str, bytes] | None:
    """Tensor name -> fingerprint of the computation producing it: its node, attributes,
    initializer values (not names) and inputs' fingerprints (None: nodes out of topological order)."""
    return Fingerprinter(model)()
