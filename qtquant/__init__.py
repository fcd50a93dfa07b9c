"""qtquant: find and fix Concat scale mismatches in INT8-quantized ONNX models.

The core (everything outside ``qtquant.gui``) never imports Qt.  ``qtquant.open_model(path)``
is the one way to open a model, float or QDQ-quantized: it returns a session.

The names below load on first use: ``import qtquant`` (for ``__version__``, or as the parent of
any submodule) imports neither onnx nor onnxruntime.
"""

__version__ = "0.1.0"

__all__ = ["QtQuantError", "Graph", "open_model", "__version__"]

# name -> (module, attribute), imported when first asked for
_LAZY = {
    "QtQuantError": ("qtquant.base.errors", "QtQuantError"),
    "Graph": ("qtquant.model.graphmodel", "Graph"),
    "open_model": ("qtquant.app.loader", "open_model"),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        value = getattr(import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
