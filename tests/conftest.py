"""Shared fixtures for every test.  No Qt here: the tests outside ``tests/gui`` run without PySide6.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml), so ``from builders import ...``
works from any folder below it.
"""
