"""``--compiler-log LOG`` on analyze, fix, perf and accuracy: a Horizon ``hb_mapper makertbin`` log
read beside the model (docs/compiler-log.md)."""

from __future__ import annotations

__all__ = ["add_compiler_log_args", "read_log_from_args", "log_input_shapes", "print_log_text"]


def add_compiler_log_args(p) -> None:
    g = p.add_argument_group("compiler log (Horizon hb_mapper makertbin)")
    g.add_argument("--compiler-log", default=None, metavar="LOG",
                   help="the hb_mapper makertbin log of this model: its thresholds become the scales (the "
                        "compiler's calibration), and its requantize list, cosine similarities and static estimate "
                        "are shown beside qtquant's")
    g.add_argument("--compiler-log-any-shape", action="store_true",
                   help="accept a log compiled at another input shape (its thresholds are applied by name)")
    g.add_argument("--own-scales", action="store_true",
                   help="keep qtquant's calibrated scales; show the log beside them only")


def read_log_from_args(args):
    """The :class:`~qtquant.horizon.log.CompileLog` named by ``--compiler-log``, or None; read before
    the model so a bad log fails fast."""
    path = getattr(args, "compiler_log", None)
    if not path:
        if getattr(args, "compiler_log_any_shape", False) or getattr(args, "own_scales", False):
            from ..base.errors import UsageError

            raise UsageError("--compiler-log-any-shape and --own-scales go with --compiler-log")
        return None
    from ..horizon.log import read_compile_log

    return read_compile_log(path)


def log_input_shapes(args, log) -> list[str] | None:
    """The shapes to open the model at when none is given: the log's, for the inputs the model
    leaves dynamic (it opens at the size it was compiled at); None to open it as given (a fixed
    input of another size is then the match's one-line error)."""
    if log is None or args.input_shape or args.compiler_log_any_shape:
        return None
    from ..app.modelinputs import model_inputs

    dynamic = {n for n, dims in model_inputs(args.model) if not all(isinstance(d, int) for d in dims)}
    return [f"{n}={'x'.join(map(str, s))}" for n, s in zip(log.deps.input_names, log.deps.input_shapes)
            if n in dynamic] or None


def print_log_text(session, perf=None) -> None:
    from ..horizon.report import compiler_log_text

    text = compiler_log_text(session, perf)
    if text:
        print()
        print(text)
