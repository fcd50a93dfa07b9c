"""The desktop app (PySide6).  The only package in qtquant that imports Qt.

Entry points: :func:`qtquant.gui.window.app.run_app` (``qtquant [MODEL]``) and
:func:`qtquant.gui.window.shot.take_screenshot` (``qtquant screenshot``).
"""

import sys

__all__ = ["app", "shot"]


def _guard_none_refcount() -> None:
    """Work around PySide6 >= 6.12 on CPython < 3.12 dropping a reference to None.

    PySide6 6.12.0 returns ``None`` from every void method (``setPen``, ``update``, ...)
    without taking a reference, as if None were immortal -- which it only is from
    Python 3.12 on (PEP 683).  On 3.11 each call decrements None's refcount, and after a
    few thousand calls the interpreter aborts with "none_dealloc: deallocating None".
    Giving None a huge refcount makes it immortal in effect, exactly as 3.12 does.
    """
    if sys.version_info >= (3, 12):
        return
    try:
        from PySide6 import __version_info__ as v
    except ImportError:
        return
    if tuple(v[:2]) < (6, 12):
        return
    import ctypes

    ctypes.c_ssize_t.from_address(id(None)).value += 1 << 40


_guard_none_refcount()
