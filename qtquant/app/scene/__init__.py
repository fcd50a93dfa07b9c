"""What the canvas draws and where, computed without Qt: the scene spec, its layered layout, the
module hierarchy and the view of it (which blocks are open)."""

from .hierarchy import BLOCK_PREFIX, Hierarchy, ViewState, build_hierarchy, constant_inputs, folded_nodes
from .layout import Layout, LayoutInput, layered_layout
from .spec import (BLOCK_H, BLOCK_W, INPUT_PREFIX, NODE_H, NODE_W, OUTPUT_PREFIX, TERM_H, TERM_W, SceneSpec,
                   layout_scene, node_outputs, node_size, scene_spec, shape_text, spread_ports)
from .view import SceneModel

__all__ = ["SceneSpec", "scene_spec", "layout_scene", "spread_ports", "shape_text", "node_size", "node_outputs",
           "Layout",
           "LayoutInput", "layered_layout", "INPUT_PREFIX", "OUTPUT_PREFIX", "NODE_W", "NODE_H", "TERM_W", "TERM_H",
           "BLOCK_W", "BLOCK_H", "BLOCK_PREFIX", "Hierarchy", "ViewState", "build_hierarchy", "folded_nodes",
           "constant_inputs", "SceneModel"]
