"""The BPU perf simulator (DESIGN §4): MAC/byte counting, march profiles, per-layer costs.

Typical use::

    from qtquant.perf import simulate_session
    res = simulate_session(session)           # after the user's groups
    before = simulate_session(session, baseline=True)
    print(res.total_ms, res.fps, res.rescale_count, res.rescale_cost_by_concat())
"""

from ..base.errors import MarchError
from .costs import LayerCost
from .macs import macs_of, model_macs
from .march import MarchProfile, load_march, march_names
from .simulator import PerfResult, Simulator, simulate, simulate_session, warm_up

__all__ = ["simulate_session", "warm_up", "simulate", "Simulator", "PerfResult", "LayerCost", "MarchProfile",
           "load_march", "march_names", "march_choices", "MARCHES", "macs_of", "model_macs"]


def march_choices() -> tuple[str, ...]:
    """The bundled marches, the smallest BPU first (by the MAC rate one model gets), so a list
    reads from the entry board up; a profile that fails to load goes last, to fail when chosen."""
    def key(name):
        try:
            return 0, load_march(name).macs_per_s, name
        except MarchError:
            return 1, 0.0, name
    return tuple(sorted(march_names(), key=key))


MARCHES = march_choices()  # the --march choices and the GUI's list: one per profile in resources/marches
