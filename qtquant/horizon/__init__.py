"""Horizon (D-Robotics) toolchain files: the ``hb_mapper makertbin`` compile log, the board's
``hrt_model_exec model_info``, and how they map onto a model's graph (docs/compiler-log.md).

- :func:`qtquant.horizon.log.read_compile_log` -> :class:`~qtquant.horizon.log.CompileLog`: the node
  table, the ``HzRequantize`` rows, the static estimate, ``model_deps_info``;
- :func:`qtquant.horizon.modelinfo.read_model_info` -> the board's inputs and outputs;
- :func:`qtquant.horizon.match.match_compile_log` -> :class:`~qtquant.horizon.match.LogMatch`: the
  rows placed on a graph, the requantized tensors per Concat, the per-tensor thresholds
  (``infer=False``: printed thresholds only);
- :func:`qtquant.horizon.reconcile.reconcile_concats`: the compiler's requantize lists beside
  qtquant's Concat analysis.
"""
