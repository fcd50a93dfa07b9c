"""What the layers above calibration (fidelity, files, the app's use cases) read from a session
state: :class:`~qtquant.quant.state.QuantState` with the calibration as it is (its check samples,
notes and search) and the compile log placed on the graph.

The live :class:`~qtquant.app.session.Session` and its :class:`~qtquant.app.snapshot.Snapshot` both
meet it; a core function takes a ``SessionState`` and reads its attributes, never probing for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..quant.state import QuantOptions, QuantState

if TYPE_CHECKING:
    from ..horizon.match import LogMatch
    from .engine import CalibConfig, CalibrationResult

__all__ = ["SessionOptions", "SessionState"]


class SessionOptions(QuantOptions, Protocol):
    @property
    def calib(self) -> CalibConfig: ...


class SessionState(QuantState, Protocol):
    @property
    def options(self) -> SessionOptions: ...

    @property
    def calibration(self) -> CalibrationResult | None: ...

    @property
    def compiler_log(self) -> LogMatch | None: ...  # a compile log placed on the graph

    @property
    def compiler_ranges(self) -> dict[str, tuple[float, float]] | None: ...  # its thresholds, when they are the scales
