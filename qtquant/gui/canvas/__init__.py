"""The graph canvas: the scene and its items, the view, overlays (minimap, legend, hulls) and canvas gestures."""
