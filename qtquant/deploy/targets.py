"""The deploy targets, keyed by :class:`Target`, and :func:`deploy`, which writes one.

Each target module offers ``notes(facts)`` (the decisions it cannot state, before anything is
written, so ``strict`` can refuse them) and ``write(session, facts, out_dir, notes) -> Deployed``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ..base.errors import BadInputError
from ..base.vocab import Scheme
from .facts import DeployFacts, Deployed, NotExpressible

__all__ = ["Target", "TargetSpec", "TARGETS", "deploy", "output_dir"]


class Target(Enum):
    X5_QAT = "x5-qat"
    X5_PTQ = "x5-ptq"
    S100 = "s100"
    TENSORRT = "tensorrt"
    ORT = "ort"


@dataclass(frozen=True)
class TargetSpec:
    title: str  # what the app's Export dialog and the help show
    module: str  # the module under qtquant.deploy that writes it
    symmetric_only: bool  # scales with zero point 0 only (Horizon, TensorRT)

    def writer(self):
        return importlib.import_module(f".{self.module}", __package__)


TARGETS: dict[Target, TargetSpec] = {
    Target.X5_QAT: TargetSpec("RDK X5 QAT: horizon_plugin_pytorch qconfigs (Python)", "x5_qat", True),
    Target.X5_PTQ: TargetSpec("RDK X5 PTQ: hb_mapper YAML (node_info, run_on_cpu) + QDQ for calibration_type: load",
                              "x5_ptq", True),
    Target.S100: TargetSpec("S100 / nash: hb_compile quant_config JSON", "s100", False),
    Target.TENSORRT: TargetSpec("TensorRT: INT8 calibration cache", "tensorrt", True),
    Target.ORT: TargetSpec("onnxruntime: TensorQuantOverrides JSON", "ort", False),
}


def output_dir(path) -> Path:
    """``path`` as the folder the files go to: made, with its missing parents, if it does not exist."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise BadInputError(f"deploy output {p} is a file; give a folder")
    if not p.exists():
        try:
            p.mkdir(parents=True)
        except OSError as e:  # a parent that is a file, no permission, a read-only disk
            raise BadInputError(f"cannot make the deploy output folder {p}: {e.strerror or e}") from None
    return p


def deploy(session, target: Target | str, out_dir, *, strict: bool = False) -> Deployed:
    """Write ``target``'s files for the session's groups and precision map into ``out_dir``.

    ``strict``: a decision the target cannot state is an error (:class:`NotExpressible`) and
    nothing is written; otherwise it is a listed note in the files and the result."""
    try:
        target = Target(getattr(target, "value", target))
    except ValueError:
        raise BadInputError(f"unknown deploy target {target!r} (choose from "
                            f"{', '.join(t.value for t in Target)})") from None
    spec = TARGETS[target]
    facts = DeployFacts.from_session(session)
    if spec.symmetric_only and facts.scheme is not Scheme.SYMMETRIC_INT8:
        raise NotExpressible(f"{target.value} takes symmetric scales (zero point 0) only: use --scheme sym")
    mod = spec.writer()
    notes = mod.notes(facts)
    if strict and notes:
        more = f" (+{len(notes) - 1} more)" if len(notes) > 1 else ""
        raise NotExpressible(f"{target.value} cannot state {notes[0].line()}{more}")
    return mod.write(session, facts, output_dir(out_dir), notes)
