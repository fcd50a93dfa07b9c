"""The canvas context menu's precision entries: Keep in float / int16 / int8 for the clicked node
(or every selected node), each one undoable edit (a ``SetPrecisionCommand`` on the one stack).

Only the menu lives here; what a name stands for (:func:`qtquant.quant.precision.resolve_name`) and
the edit itself (:class:`~qtquant.app.commands.SetPrecisionCommand`) are the core's and the app
layer's.
"""

from __future__ import annotations

from PySide6.QtGui import QActionGroup

from ...app.commands import SetPrecisionCommand
from ...base.errors import QtQuantError
from ...quant.precision import node_precision, resolve_name
from ...base.vocab import Precision

__all__ = ["add_precision_entries", "precision_targets", "ENTRY_TEXT"]

ENTRY_TEXT = {Precision.FLOAT: "Keep in float (CPU)", Precision.INT16: "int16", Precision.INT8: "int8"}


def precision_targets(session, names) -> list[str]:
    """The quantized tensors the nodes ``names`` stand for (names with none are left out)."""
    from ...app.scene import node_outputs

    out: list[str] = []
    g = session.graph
    for n in names:
        candidates = [n] if n in g.nodes else node_outputs(g, n)  # a canvas terminal stands for its tensor
        for c in candidates:
            try:
                out += resolve_name(g, c)
            except QtQuantError:
                continue
    return list(dict.fromkeys(out))


def add_precision_entries(menu, session, names, editor) -> list:
    """Append a "Precision" section to ``menu`` for ``names`` (the clicked node, or the selection);
    returns the actions added (none when no name has a quantized output)."""
    tensors = precision_targets(session, names)
    if not tensors:
        return []
    g = session.graph
    current = {session.options.precision.of(t) for t in tensors}
    menu.addSection("Precision")
    group = QActionGroup(menu)
    group.setExclusive(True)
    what = names[0] if len(names) == 1 else f"{len(names)} nodes"
    acts = []
    for p in (Precision.FLOAT, Precision.INT16, Precision.INT8):
        a = menu.addAction(ENTRY_TEXT[p])
        a.setCheckable(True)
        a.setChecked(current == {p})
        a.setData(p.value)
        group.addAction(a)
        label = f"Keep {what} in float" if p is Precision.FLOAT else f"{what}: {p.value}"
        a.triggered.connect(lambda _=False, p=p, label=label: editor.push(
            SetPrecisionCommand(tensors, p, label), refused="Precision not changed"))
        acts.append(a)
    if len(names) == 1 and names[0] in g.nodes:
        acts[0].setToolTip(f"now {node_precision(g, session.options.precision, g.nodes[names[0]]).label}")
    # A shared scale domain is one unit on the target: offer it whole when it is more than this node.
    if len(tensors) == 1 and session.ready:
        dm = session.domains
        did = dm.of.get(tensors[0])
        members = [t for t in dm.domains[did].members if g.is_quantized(t)] if did is not None else []
        if len(members) > 1:
            sub = menu.addMenu(f"Whole scale domain ({len(members)} tensors)")
            for p in (Precision.FLOAT, Precision.INT16, Precision.INT8):
                a = sub.addAction(ENTRY_TEXT[p])
                a.triggered.connect(lambda _=False, p=p: editor.push(
                    SetPrecisionCommand.for_domain(session, tensors[0], p,
                                                   f"Scale domain of {tensors[0]}: {p.value}"),
                    refused="Precision not changed"))
                acts.append(a)
    return acts
