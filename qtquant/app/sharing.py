"""The auto-share use cases, each one command on the session's stack: by bits lost
(:func:`auto_share`: ``--auto-share``, the window's Auto-share) and by accuracy (:func:`share_by_accuracy`:
``--max-sqnr-drop``, the Sensitivity dock's "share what accuracy allows", which plans in a background job on
a snapshot and installs the plan with :func:`install_accuracy_share`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base.errors import BadInputError
from ..quant.outputs import OutputMode
from .commands import AutoShareCommand, CommandStack, SqnrShareCommand

if TYPE_CHECKING:
    from ..fidelity.accuracy.share import SqnrShareReport
    from ..base.fileio.paths import StrPath
    from ..quant.autoshare import AutoShareReport
    from ..quant.groups import GroupSet

__all__ = ["auto_share", "share_by_accuracy", "install_accuracy_share"]


def auto_share(stack: CommandStack, max_bits_lost: float | None = None) -> AutoShareReport:
    """Share every Concat whose members lose at most ``max_bits_lost`` bits (None: the session's
    ``auto_share_max_bits_lost``); returns the
    :class:`~qtquant.quant.autoshare.AutoShareReport` (a run that grouped nothing is no undo step)."""
    cmd = AutoShareCommand(max_bits_lost=None if max_bits_lost is None else float(max_bits_lost))
    stack.push(cmd)
    assert cmd.report is not None  # set by the command's apply (a refused one raised)
    return cmd.report


def install_accuracy_share(stack: CommandStack, max_sqnr_drop: float, report: SqnrShareReport,
                           groups: GroupSet) -> None:
    """Install the groups :func:`~qtquant.fidelity.accuracy.share.plan_sqnr_share` planned (``report``,
    ``groups``) as one command; ``report.groups`` then names the groups made."""
    stack.push(SqnrShareCommand(max_sqnr_drop=float(max_sqnr_drop), planned=groups.snapshot(), report=report))


def share_by_accuracy(stack: CommandStack, max_sqnr_drop: float, *, output_mode: OutputMode = OutputMode.AUTO,
                      march_file: StrPath | None = None) -> SqnrShareReport:
    """Plan the measured auto-share on ``stack.session`` now (``output_mode``, ``march_file``: as
    :func:`~qtquant.fidelity.accuracy.share.plan_sqnr_share` takes them) and install it; returns its report."""
    from ..fidelity.accuracy.share import plan_sqnr_share

    if stack.session is None:
        raise BadInputError("open a model first")
    planned: tuple[SqnrShareReport, GroupSet] = plan_sqnr_share(stack.session, max_sqnr_drop, output_mode=output_mode,
                                  march_file=march_file)
    rep, groups = planned
    install_accuracy_share(stack, max_sqnr_drop, rep, groups)
    return rep
