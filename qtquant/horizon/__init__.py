"""Horizon (D-Robotics) toolchain files: the ``hb_mapper makertbin`` compile log, the board's
``hrt_model_exec model_info``, and how they map onto a model's graph."""
