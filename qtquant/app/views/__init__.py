"""View-models: what each dock and the canvas show, as frozen dataclasses built from a Session.

Colours are plain ``"#rrggbb"`` strings and numbers come formatted, so the widgets only copy
them into Qt and everything here is tested headless.
"""
