"""What the quantization rules read from a session state: the typed contract that the live
:class:`~qtquant.app.session.Session` and its frozen :class:`~qtquant.app.snapshot.Snapshot` both meet.

Read-only properties throughout: a core function reads a state, it never assigns to one (edits go
through the session's own methods).  :class:`qtquant.calib.state.SessionState` extends it with what
calibration adds (the result's check samples and notes, the compile log).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..base.vocab import Policy
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo
    from ..model.scales import Scheme
    from .concat import ConcatInfo
    from .domains import DomainMap
    from .groups import GroupSet
    from .outputs import OutputMode
    from .precision import PrecisionMap

__all__ = ["CalibSettings", "QuantOptions", "Ranges", "QuantState", "EditableState"]


class CalibSettings(Protocol):
    """The calibration settings the rules read (:class:`qtquant.calib.CalibConfig`)."""

    @property
    def percentile(self) -> float: ...

    @property
    def scheme(self) -> str: ...


class QuantOptions(Protocol):
    """A session's options (:class:`qtquant.app.options.Options`)."""

    @property
    def scheme(self) -> Scheme: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def march(self) -> str: ...

    @property
    def auto_share_max_bits_lost(self) -> float: ...

    @property
    def float_output_max_bits_lost(self) -> float: ...

    @property
    def calib(self) -> CalibSettings: ...

    @property
    def precision(self) -> PrecisionMap: ...

    @property
    def output_mode(self) -> OutputMode: ...

    @property
    def int_outputs(self) -> tuple[str, ...]: ...  # outputs the application dequantises (perf/board.py)

    @property
    def board_bpu_ghz(self) -> float: ...  # the board's BPU clock (0: the march's; perf/board.py)


class Ranges(Protocol):
    """A calibration as the rules read it (:class:`qtquant.calib.CalibrationResult`)."""

    @property
    def ranges(self) -> dict[str, tuple[float, float]]: ...

    def pooled_range(self, members: Iterable[str], percentile: float) -> tuple[float, float] | None: ...


class QuantState(Protocol):
    """One session state: the graph, its options, scales and groups, and the domain maps made of them."""

    @property
    def graph(self) -> Graph: ...

    @property
    def options(self) -> QuantOptions: ...

    @property
    def calibration(self) -> Ranges | None: ...

    @property
    def qdq(self) -> QdqInfo | None: ...  # what a QDQ file said, when the model came quantized

    @property
    def groups(self) -> GroupSet: ...

    @property
    def revision(self) -> int: ...

    @property
    def domains(self) -> DomainMap: ...

    @property
    def baseline_domains(self) -> DomainMap: ...  # without any user group

    @property
    def quantized_file(self) -> bool: ...

    @property
    def ready(self) -> bool: ...  # calibrated, or scales read from a QDQ file

    def domains_with(self, groups: Iterable[Sequence[str]]) -> DomainMap: ...

    def concats(self, baseline: bool = False) -> list[ConcatInfo]: ...

    def export_float(self, dm: DomainMap | None = None) -> frozenset[str]: ...


class EditableState(QuantState, Protocol):
    """The live session, whose groups an edit changes (a snapshot's never change)."""

    def groups_changed(self) -> None: ...  # after an edit of :attr:`groups`: listeners refresh
