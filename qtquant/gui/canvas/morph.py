"""Changing the canvas's items to a new view in place: what expanding or collapsing a block does.

Items of nodes and edges that stay are moved (a new position, a new route); only those that
appear or go are made or deleted, so expanding a 1,000-node block costs its own items, not
the graph's.  Looks of new items are applied by the next :meth:`GraphScene.apply_looks`
(their old looks are forgotten here); hulls are rebuilt by the presenter.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF

from ...app.scene import node_size
from .items import ITEM_CLASSES, LABEL_DX, LABEL_DY, OVERVIEW_MIN_NODES, EdgeItem, NodeItem, OverviewItem
from ..style import category_color

__all__ = ["morph_scene"]


def morph_scene(scene, spec) -> dict:
    lay = spec.layout
    names = [n.name for n in spec.nodes]
    want = set(names)
    node_looks, edge_looks, default = scene._applied
    node_looks, edge_looks = dict(node_looks), dict(edge_looks)
    hidden = scene.overview_active
    removed = [n for n in scene.nodes if n not in want]
    for n in removed:
        item = scene.nodes.pop(n)
        scene._pending_nodes.pop(item, None)
        node_looks.pop(n, None)
        scene.removeItem(item)
    added = 0
    for ns, (x, y) in zip(spec.nodes, lay.pos):
        item = scene.nodes.get(ns.name)
        if item is None:
            cls = ITEM_CLASSES.get(ns.kind, NodeItem)
            w, h = node_size(ns.kind)
            item = cls(ns.name, ns.title, ns.subtitle, w, h, category_color(ns.category), ns.kind)
            item.setPos(x, y)
            item.setVisible(not hidden)
            scene.addItem(item)
            scene.nodes[ns.name] = item
            node_looks.pop(ns.name, None)  # drawn plain: the next looks pass styles it
            added += 1
        elif item.pos() != QPointF(x, y):
            item.setPos(x, y)
    old = {(e.tensor, e.src, e.dst): e for e in scene.edges}
    edges = []
    for es, pts in zip(spec.edges, spec.routes):
        key = (es.tensor, names[es.src], names[es.dst])
        e = old.pop(key, None)
        if e is None:
            e = EdgeItem(es.tensor, key[1], key[2], pts)
            if default is not None:
                e.set_style(default)
            e.setVisible(not hidden)
            scene.addItem(e)
            edge_looks.pop((e.tensor, e.dst), None)
        else:
            e.set_points(pts)
        edges.append(e)
    for e in old.values():
        scene._pending_edges.pop(e, None)
        scene.removeItem(e)
    scene.edges = edges
    scene.edges_in.clear()
    scene.edges_out.clear()
    scene._edge_index = {}
    label_at: dict[str, tuple[float, float]] = {}
    for e in edges:
        scene.edges_out.setdefault(e.src, []).append(e)
        scene.edges_in.setdefault(e.dst, []).append(e)
        scene._edge_index.setdefault((e.tensor, e.dst), []).append(e)
        label_at.setdefault(e.tensor, (e.points[0][0] + LABEL_DX, e.points[0][1] + LABEL_DY))
    scene._applied = (node_looks, edge_looks, default)
    # Shape labels: those of tensors still drawn move to where their edges now are, the others
    # go; new ones are made now if labels show, else when they first do (making all of them
    # again cost ~30 ms a thousand).
    label_of = {es.tensor: es.label for es in spec.edges}
    made = {lab.tensor: lab for lab in scene.labels}
    labels, specs = [], []
    for t, (x, y) in label_at.items():
        lab = made.pop(t, None)
        if lab is not None and lab.text() == label_of[t]:
            if lab.pos() != QPointF(x, y):
                lab.setPos(x, y)
            labels.append(lab)
        else:
            if lab is not None:
                made[t] = lab
            specs.append((t, label_of[t], x, y))
    for lab in made.values():
        scene.removeItem(lab)
    scene.labels, scene._label_specs = labels, specs
    if scene._labels_visible and specs:
        scene._labels_visible = False
        scene.set_labels_visible(True)
    scene.emphasised = {n.name for n in spec.nodes if n.category == "concat"}
    m = 60
    scene.setSceneRect(QRectF(lay.left - m, lay.top - m, lay.width + 2 * m, lay.height + 2 * m))
    if scene.overview is not None:
        scene.removeItem(scene.overview)
        scene.overview = None
    if len(scene.nodes) >= OVERVIEW_MIN_NODES:
        scene.overview = OverviewItem(scene.sceneRect())
        scene.overview.setVisible(hidden)
        scene.addItem(scene.overview)
        scene.overview.rebuild(scene.nodes.values(), scene.edges)
    elif hidden:  # too few items left for the overview: show the items again
        scene.overview_active = False
        for it in scene.nodes.values():
            it.setVisible(True)
        for e in scene.edges:
            e.setVisible(True)
    scene.spec = spec
    return {"added": added, "removed": len(removed)}
