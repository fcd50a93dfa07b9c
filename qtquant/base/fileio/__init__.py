"""File plumbing every reader and writer shares: the one atomic writer and the schema helpers.

It depends on :mod:`qtquant.base.errors` only, so any layer (the statistics cache, march profiles,
plans, projects, exports) may use it.
"""

from .atomic import atomic_dir, atomic_file, atomic_write_bytes, atomic_write_text, check_output_path, commit

__all__ = ["atomic_dir", "atomic_file", "atomic_write_bytes", "atomic_write_text", "check_output_path", "commit"]
