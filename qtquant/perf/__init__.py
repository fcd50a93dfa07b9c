"""The BPU perf simulator (DESIGN §4): MAC/byte counting, march profiles, per-layer costs.

Typical use::

    from qtquant.perf import simulate_session
    res = simulate_session(session)           # after the user's groups
    before = simulate_session(session, baseline=True)
    print(res.total_ms, res.fps, res.rescale_count, res.rescale_cost_by_concat())
"""

from .costs import LayerCost
from .macs import macs_of, model_macs
from .march import MarchProfile, load_march, march_names
from .simulator import PerfResult, Simulator, simulate, simulate_session

__all__ = ["simulate_session", "simulate", "Simulator", "PerfResult", "LayerCost", "MarchProfile",
           "load_march", "march_names", "macs_of", "model_macs"]
