"""The options that choose how model outputs are exported and measured (fix, analyze)."""

from __future__ import annotations

from ..quant.outputs import OutputMode

__all__ = ["add_output_options", "output_mode_from_args"]


def add_output_options(p) -> None:
    o = p.add_argument_group("model outputs").add_mutually_exclusive_group()
    o.add_argument("--float-outputs", action="store_true",
                   help="leave every model output in float (no Q/DQ on them)")
    o.add_argument("--quantize-outputs", action="store_true",
                   help="force every model output to int8, even an output Concat whose members cannot share "
                        "one scale (by default such an output stays float and its inputs keep their scales)")


def output_mode_from_args(args) -> OutputMode:
    if getattr(args, "float_outputs", False):
        return OutputMode.FLOAT
    if getattr(args, "quantize_outputs", False):
        return OutputMode.QUANTIZE
    return OutputMode.AUTO
