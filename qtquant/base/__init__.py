"""Foundations every layer may use: the errors, the vocabulary (enums and defaults), text tables,
resource files, atomic file writing (:mod:`.fileio`), child processes and the garbage-collector pause.

This package imports nothing else of qtquant (a contract in pyproject.toml says so).
"""
