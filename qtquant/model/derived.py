"""What later stages work out from one loaded graph and keep for the next edit: the store on
:attr:`Graph.derived <qtquant.model.graphmodel.Graph.derived>`.

The exporter keeps the opset-converted base model, its quantized weights and the last full
build to patch; the fidelity check keeps its float run, kept activations and incremental
runner; the perf simulator keeps its per-layer costs, one simulator per march.  Each is worked
out from the graph and what its own keys say (the fidelity runs also check the calibration
they were made with), and each is what makes an edit in the app fast: the next build or check
reuses it instead of starting over.

Why the store sits on the graph: the graph is the one object every holder of this state shares.
The session owns it from load to close; the app hands a new snapshot to every check and
export, and those snapshots all read the session's graph (the fidelity child loads a graph of
its own, with a store of its own).  The state lives and dies with it, with no registry to clean
up, and a model opened again, or cut, is a new graph with an empty store.  The functions that fill it
take the graph already (``quantize_weight(graph, ...)``), so no front end passes a cache along.

One :class:`Slot` per kind of state, declared by the module that owns that state with its
type (``RUNS: Slot[RunCache] = Slot("fidelity runs", RunCache)``): this module knows none of them,
so the model layer imports nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

__all__ = ["Slot", "DerivedState"]

T = TypeVar("T")


class Slot(Generic[T]):
    """One kind of derived state: its name (for repr) and how to make it empty."""

    __slots__ = ("name", "make")

    def __init__(self, name: str, make: Callable[[], T]):
        self.name = name
        self.make = make

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class DerivedState:
    """The derived state of one graph, by :class:`Slot`.  Safe to share between threads the way
    a dict is: two threads asking for an empty slot at once get the same object."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[Slot[Any], Any] = {}

    def get(self, slot: Slot[T]) -> T:
        """The state of ``slot``, made empty on first use."""
        got = self._values.get(slot)
        if got is None:
            got = self._values.setdefault(slot, slot.make())
        return cast(T, got)  # (stored under its own slot)

    def drop(self, slot: Slot[Any]) -> None:
        """Forget ``slot``'s state (the next :meth:`get` starts empty)."""
        self._values.pop(slot, None)

    def __reduce__(self) -> tuple[type[DerivedState], tuple[()]]:
        # Recomputable, and may hold onnxruntime sessions: a pickled or deep-copied graph starts empty.
        return (DerivedState, ())
