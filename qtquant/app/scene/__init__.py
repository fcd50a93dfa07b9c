"""What the canvas draws and where, computed without Qt: the scene spec and its layered layout."""

from .layout import Layout, LayoutInput, layered_layout
from .spec import (INPUT_PREFIX, NODE_H, NODE_W, OUTPUT_PREFIX, TERM_H, TERM_W, SceneSpec, layout_scene, scene_spec,
                   shape_text, spread_ports)

__all__ = ["SceneSpec", "scene_spec", "layout_scene", "spread_ports", "shape_text", "Layout", "LayoutInput",
           "layered_layout", "INPUT_PREFIX", "OUTPUT_PREFIX", "NODE_W", "NODE_H", "TERM_W", "TERM_H"]
