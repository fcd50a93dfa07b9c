"""Editing on the canvas and in the Groups dock: what is selected, what Share / Ungroup act on,
and the canvas context menu.

The context menu is built from sections (:attr:`CanvasEditing.menu_sections`): each is called
with the menu and the node right-clicked ("" for the background) and adds its entries; other
features append their own section instead of editing :meth:`CanvasEditing.show_context_menu`.

:class:`CanvasEditing` is given every widget it works with; the gestures themselves are
:class:`~qtquant.gui.window.editing.Editor`'s, which turns them into commands.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMenu
from shiboken6 import isValid

from ...app.scene.hierarchy import block_id
from ...app.scene import node_outputs
from .precisionmenu import add_precision_entries
from ..dialogs.share import ShareConfirmDialog

__all__ = ["CanvasEditing"]


class CanvasEditing(QObject):
    def __init__(self, relay, editor, scene, view, canvas, groups_panel, actions, parent=None):
        super().__init__(parent)
        self.relay, self.editor, self.scene, self.view = relay, editor, scene, view
        self.canvas, self.groups_panel, self.actions = canvas, groups_panel, actions
        self.context_menu: QMenu | None = None  # the last one shown (tests read it)
        self.confirm: ShareConfirmDialog | None = None  # the open share confirmation
        self.menu_sections = [self._hierarchy_section]  # called after the editing entries, in order
        self.menu_sections.append(self._precision_section)
        scene.selectionChanged.connect(self._selection_changed)
        view.nodesDropped.connect(self.drop)
        editor.proposed.connect(self.confirm_share)
        view.contextRequested.connect(self.show_context_menu)
        groups_panel.groupSelected.connect(self._group_selected)
        groups_panel.ungroupRequested.connect(editor.ungroup)
        groups_panel.removeMemberRequested.connect(editor.remove_member)
        for sig in (relay.sessionReplaced, relay.calibrated, relay.groupsChanged):
            sig.connect(self.update_actions)

    # -- gestures --------------------------------------------------------------------------------
    def drop(self, sources, target: str) -> bool:
        """A drop on the canvas.  A collapsed block holding one Concat stands for that Concat; a
        dragged block stands for the nodes whose outputs leave it."""
        s, m = self.relay.session, self.canvas.model
        if s is None:
            return False
        if m is not None:
            g = s.graph
            bid = block_id(target)
            if bid is not None:
                cs = [n for n in m.h.members(bid) if g.nodes[n].op_type == "Concat"]
                if len(cs) != 1:
                    self.editor.message.emit(f"{m.h.blocks[bid].label} holds {len(cs)} Concats: expand it and "
                                             f"drop on the one to join")
                    return False
                target = cs[0]
            out = []
            for n in sources:
                b = block_id(n)
                out += [n] if b is None else _leaving(g, m.h.members(b))
            sources = out
        return self.editor.drop(sources, target)

    def share_selection(self) -> bool:
        return self.editor.share_nodes(self.scene.selected_names())

    def confirm_share(self, plan) -> None:
        """Show what Share would do; Enter commits it, Escape changes nothing."""
        if self.confirm is not None:
            self.confirm.close()
            self.confirm.deleteLater()
        self.confirm = d = ShareConfirmDialog(plan, self.view.window())
        d.accepted.connect(lambda: self.editor.commit_plan(plan))
        d.finished.connect(self._refocus)  # the next key (Ctrl+Z) goes to the canvas again
        d.open()

    def _refocus(self, *_) -> None:
        if isValid(self.view):
            self.view.window().activateWindow()
            self.view.setFocus()

    def ungroup_ids(self) -> list[int]:
        s = self.relay.session
        if s is None:
            return []
        focus = self.canvas.group_focus
        if focus is not None and s.groups.get(focus) is not None:
            return [focus]
        return self.editor.groups_of_nodes(self.scene.selected_names())

    def ungroup_selection(self) -> bool:
        return self.editor.ungroup(self.ungroup_ids())

    def auto_share(self):
        return self.editor.auto_share()  # at the session's auto-share threshold

    # -- state -----------------------------------------------------------------------------------
    def update_actions(self, *_) -> None:
        s = self.relay.session
        self.actions.update_enabled(selection=s is not None and bool(self.scene.selected_names()),
                                    ungroup=bool(self.ungroup_ids()))

    def _selection_changed(self) -> None:
        if not isValid(self.scene):  # the window is being destroyed: the scene goes first
            return
        if self.scene.selected_names():  # a canvas selection replaces the group picked in the dock
            tree = self.groups_panel.tree
            blocked = tree.blockSignals(True)
            tree.clearSelection()
            tree.blockSignals(blocked)
            self.canvas.group_focus = None
            self.scene.hulls.highlight(None)
        self.update_actions()

    def _group_selected(self, gid: int) -> None:
        self.canvas.focus_group(None if gid < 0 else gid)
        self.update_actions()

    def _precision_section(self, menu, name: str) -> None:
        """Keep in float / int16 / int8 for the clicked node, or the whole selection."""
        selected = self.scene.selected_names()
        add_precision_entries(menu, self.relay.session, selected if len(selected) > 1 else [name] if name else [],
                              self.editor)

    def show_context_menu(self, name: str, global_pos) -> None:
        s = self.relay.session
        if s is None:
            return
        A = self.actions.by_name
        menu = QMenu(self.view)
        g = s.graph
        if len(self.scene.selected_names()) > 1:
            menu.addAction(A["share"])
        elif name in g.nodes and g.nodes[name].op_type == "Concat":
            # The key is shown, not bound: a second action on Ctrl+G would make the key ambiguous.
            shown = A["share"].shortcut().toString()
            menu.addAction(f"Share this Concat's inputs and output\t{shown}", self.share_selection)
        for t in node_outputs(g, name) if name else []:
            gr = s.groups.group_of(t)
            if gr is not None:
                menu.addAction(f"Remove {t} from group {gr.id}",
                               lambda gid=gr.id, t=t: self.editor.remove_member(gid, t))
        if self.ungroup_ids():
            menu.addAction(A["ungroup"])
        if not name or (name in g.nodes and g.nodes[name].op_type == "Concat"):  # not on a Mul: it shares Concats
            if menu.actions():
                menu.addSeparator()
            menu.addAction(A["autoshare"])
        for section in self.menu_sections:
            section(menu, name)
        if self.context_menu is not None:
            self.context_menu.deleteLater()
        self.context_menu = menu
        menu.popup(global_pos)

    def _hierarchy_section(self, menu: QMenu, name: str) -> None:
        m, A = self.canvas.model, self.actions.by_name
        if m is None or not name:
            return
        menu.addSeparator()
        if m.visible_block(name) is not None:
            menu.addAction(A["expand"])
            if m.h.blocks[m.visible_block(name)].blocks:
                menu.addAction("Expand everything inside", lambda: self.canvas.expand(name, deep=True))
        inner = m.enclosing(name)
        if inner is not None:
            menu.addAction(f"Collapse {m.h.blocks[inner].label}\t{A['collapse'].shortcut().toString()}",
                           lambda: self.canvas.collapse(name))


def _leaving(g, members) -> list[str]:
    """The members whose outputs are read outside ``members`` (a block's outputs)."""
    inside = set(members)
    return [n for n in members
            if any(c not in inside for t in g.nodes[n].outputs if t in g.tensors for c in g.tensors[t].consumers)
            or any(t in g.outputs for t in g.nodes[n].outputs)]
