"""What the edits cost: the model as opened against the model as edited, split by kind of edit.

"Before" is the model as opened: no user group and every tensor int8
(``simulate_session(session, baseline=True)``); "after" is the session as edited.  The change
between them is the price of the edits, and it splits exactly into

- **sharing**: the groups (rescales removed or moved), the edited model at int8 against the opened one;
- **precision**: the int16 and float tensors, priced on top of the groups
  (``PerfResult.precision.delta_us``, :mod:`qtquant.perf.precision`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EditPrice", "edit_price"]


def _us(x: float) -> str:
    return f"{x:+.1f} µs" if abs(x) < 1000 else f"{x / 1000:+.3f} ms"


@dataclass(frozen=True)
class EditPrice:
    """µs the edits add to the latency (negative: they save time), and its two parts."""

    total_us: float
    sharing_us: float
    precision_us: float

    @property
    def parts(self) -> tuple[tuple[str, float], ...]:
        """(kind, µs) of the kinds of edit present; both when both are, else the one there is."""
        return tuple((k, v) for k, v in (("sharing", self.sharing_us), ("precision", self.precision_us))
                     if abs(v) > 1e-9)

    def text(self) -> str:
        """"+628.9 µs (sharing −6.1 µs, precision +635.0 µs)"; the breakdown only when both kinds are present."""
        head = _us(self.total_us)
        parts = self.parts
        if len(parts) > 1:
            head += " (" + ", ".join(f"{k} {_us(v)}" for k, v in parts) + ")"
        elif parts:
            head += f" ({parts[0][0]})"
        return head

    def to_dict(self) -> dict:
        return {"total_us": self.total_us, "sharing_us": self.sharing_us, "precision_us": self.precision_us}


def edit_price(before, after) -> EditPrice:
    """The price of the edits between ``before`` (the model as opened) and ``after`` (as edited),
    both :class:`~qtquant.perf.PerfResult`."""
    cost = after.precision
    precision_us = float(cost.board_us) if cost is not None else 0.0
    # On the board: a node kept in float leaves the BPU's static estimate and runs on the CPU.
    total = float(after.board_us - before.board_us)
    return EditPrice(total, total - precision_us, precision_us)
