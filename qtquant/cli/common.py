"""Options shared by the subcommands, and turning them into a :class:`~qtquant.app.Session`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..calib import CalibConfig
from ..calib.holdout import AUTO_HOLDOUT_FRACTION, AUTO_HOLDOUT_MIN, INT_TEXT, CalibConfigError
from ..base.errors import UsageError
from ..perf import MARCHES
from ..base.vocab import (COLOR_ORDERS, DEFAULT_AUTO_SHARE_MAX_BITS_LOST, DEFAULT_CALIB_COUNT,
                          DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST, DEFAULT_MARCH, DEFAULT_OBSERVER, DEFAULT_PERCENTILE,
                          DEFAULT_POLICY, DEFAULT_SCHEME, DEFAULT_SEARCH_BUDGET_S, LAYOUTS, OBSERVERS, PIXEL_RANGES,
                          RESIZE_MODES, SCHEME_NAMES, SYNTHETIC, Policy, Scheme)

__all__ = ["add_common", "options_from_args", "open_session", "open_stack", "read_paths", "precision_from_args",
           "auto_share_from_args", "OBSERVERS", "MARCHES"]


def add_common(p: argparse.ArgumentParser, *, model: bool = True, sharing: bool = True) -> None:
    """``sharing``: the sharing, target and precision options (``calibrate`` has no use for them, so
    it does not take them: given there, they are refused rather than ignored)."""
    if model:
        p.add_argument("model", metavar="MODEL", help="ONNX model (float or QDQ-quantized)")
    g = p.add_argument_group("model and calibration")
    g.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x640x640",
                   help="fix a dynamic input shape (repeatable, or several separated by commas: "
                        "input=1x512,state=2x1x128)")
    g.add_argument("--cut", default=None, metavar="TENSOR[,TENSOR...]",
                   help="work on the subgraph that ends at these tensors (they become the outputs; the inputs "
                        "stay), e.g. a detector cut before its CPU-side decode")
    g.add_argument("--calib", default=SYNTHETIC, metavar=f"PATH|{SYNTHETIC}",
                   help=f"calibration data: an image folder, .npy/.npz file or folder, or '{SYNTHETIC}'")
    g.add_argument("--calib-count", type=int, default=DEFAULT_CALIB_COUNT, metavar="N",
                   help=f"calibration samples (default {DEFAULT_CALIB_COUNT})")
    g.add_argument("--holdout", type=_holdout_arg, default=None, metavar="N|FRACTION",
                   help=f"samples held back from calibration for the fidelity check: a count (0 = check "
                        f"in-sample on the calibration samples) or a fraction such as 0.2; default auto = "
                        f"{AUTO_HOLDOUT_FRACTION * 100:g}%% from {AUTO_HOLDOUT_MIN} samples on, else in-sample")
    # (None: not given, so a statistics file's own observer stands; see statsfile.RANGE_FIELDS)
    g.add_argument("--observer", choices=OBSERVERS, default=None,
                   help=f"range observer (default {DEFAULT_OBSERVER}, or a --stats file's)")
    g.add_argument("--search-budget", type=float, default=None, metavar="SECONDS",
                   help="time budget of --observer search-per-node's per-tensor walk (default "
                        f"{DEFAULT_SEARCH_BUDGET_S:g} s)")
    g.add_argument("--percentile", type=float, default=None,
                   help=f"percentile for --observer percentile (default {DEFAULT_PERCENTILE:g})")
    g.add_argument("--scheme", choices=SCHEME_NAMES, default=DEFAULT_SCHEME.short,
                   help="activation scheme: sym = int8 symmetric (Horizon, default), asym = uint8 asymmetric")
    g.add_argument("--seed", type=int, default=0, help="seed for shuffling and synthetic data")
    g.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="calibration worker processes (with --ray: Ray workers; default one per cluster CPU)")
    g.add_argument("--ray", default="", metavar="auto|ADDRESS",
                   help="calibrate on a Ray cluster (pip install 'qtquant[ray]'): auto = the running cluster, "
                        "else a local one; the calibration data must be on a filesystem every worker reads")
    g.add_argument("--stats", default=None, metavar="STATS",
                   help="use a statistics file from 'qtquant calibrate --stats-out' instead of calibrating")
    pre = p.add_argument_group("image preprocessing (for --calib IMAGE_FOLDER)")
    pre.add_argument("--resize", default=RESIZE_MODES[0], choices=RESIZE_MODES,
                     help="how images are fitted to the input size")
    pre.add_argument("--color", default=COLOR_ORDERS[0], choices=COLOR_ORDERS)
    pre.add_argument("--pixel-range", default=PIXEL_RANGES[0], choices=PIXEL_RANGES)
    pre.add_argument("--mean", default=None, metavar="R,G,B", help="per-channel mean, in the pixel range")
    pre.add_argument("--std", default=None, metavar="R,G,B", help="per-channel std, in the pixel range")
    pre.add_argument("--layout", default=LAYOUTS[0], choices=LAYOUTS)
    for title, options in _SHARING_GROUPS:
        if not sharing:  # (their defaults still: what the session is opened with)
            p.set_defaults(**{flag[2:].replace("-", "_"): kw["default"] for flag, kw in options})
            continue
        group = p.add_argument_group(title)
        for flag, kw in options:
            group.add_argument(flag, **kw)
    if sharing:
        p.add_argument("--max-bits-lost", action=_WhichThreshold, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _march_arg(text: str) -> str:
    """A bundled march's name, or a profile's path (which the open reads: a missing file is bad input)."""
    from ..perf.march import looks_like_path, unknown_march

    if text in MARCHES or looks_like_path(text):
        return text
    raise argparse.ArgumentTypeError(unknown_march(text))


# The sharing, target and precision options: (group title, [(flag, add_argument keywords)]).
_SHARING_GROUPS: tuple[tuple[str, list[tuple[str, dict[str, Any]]]], ...] = (
    ("sharing and target", [
        ("--march", dict(type=_march_arg, default=DEFAULT_MARCH,
                         help="BPU march: " + ", ".join(MARCHES) + " (or a profile file: --march-file)")),
        ("--march-file", dict(default=None, metavar="PROFILE.json", help="a march profile file of your own")),
        ("--plan", dict(default=None, metavar="PLAN.json", help="apply a sharing plan")),
        ("--policy", dict(choices=[p.value for p in Policy], default=DEFAULT_POLICY.value,
                          help=f"how a shared domain's range is chosen (default {DEFAULT_POLICY.value})")),
        ("--auto-share-max-bits-lost", dict(
            type=float, default=DEFAULT_AUTO_SHARE_MAX_BITS_LOST, metavar="BITS",
            help="auto-share shares a Concat when no member loses more than BITS bits of precision "
                 f"(default {DEFAULT_AUTO_SHARE_MAX_BITS_LOST:g})")),
        ("--float-output-max-bits-lost", dict(
            type=float, default=DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST, metavar="BITS",
            help="a model-output Concat whose members would lose more than BITS bits on one int8 scale stays "
                 "float, its inputs keeping their own scales (unless --float-outputs or --quantize-outputs; "
                 f"default {DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST:g})"))]),
    ("mixed precision (every other tensor is int8)", [
        ("--int16", dict(action="append", default=[], metavar="NAME",
                         help="quantize this node's output (or this tensor) to int16 (repeatable)")),
        ("--keep-float", dict(action="append", default=[], metavar="NAME",
                              help="keep this node (or the node producing this tensor) in float, on the CPU "
                                   "(repeatable)"))]))


class _WhichThreshold(argparse.Action):
    """``--max-bits-lost``: a usage error that names the two thresholds, so a command line that
    gives it says which one it means rather than having one of them changed unasked."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string}: say which threshold: --auto-share-max-bits-lost BITS (auto-share) or "
                     "--float-output-max-bits-lost BITS (which model-output Concats stay float)")


def _holdout_arg(text: str):
    """The syntax only; the range is CalibConfig's to check (a usage error too, see
    :func:`calib_config_from_args`)."""
    t = text.strip().lower()
    if t == "auto":
        return None
    if INT_TEXT.fullmatch(t):
        return int(t)
    try:
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto, a count or a fraction such as 0.2, got {text!r}") from None


def calib_config_from_args(args) -> CalibConfig:
    """The calibration options as a :class:`CalibConfig`; a value it refuses is a usage error here
    (exit 2), where the same value in a project file is bad input."""
    if args.calib_count < 1:
        raise UsageError("--calib-count must be at least 1")
    if args.percentile is not None and (args.observer or DEFAULT_OBSERVER.value) != "percentile" \
            and not getattr(args, "stats", None):  # (a statistics file's own observer may be percentile)
        raise UsageError(f"--percentile applies to --observer percentile, not {args.observer or DEFAULT_OBSERVER}")
    try:
        return CalibConfig.from_dict(dict(
            source=args.calib, count=args.calib_count, observer=args.observer or DEFAULT_OBSERVER.value,
            percentile=DEFAULT_PERCENTILE if args.percentile is None else args.percentile,
            seed=args.seed, holdout=getattr(args, "holdout", None), jobs=args.jobs, ray=getattr(args, "ray", ""),
            resize=args.resize,
            color=args.color, pixel_range=args.pixel_range, mean=args.mean, std=args.std, layout=args.layout,
            scheme=args.scheme))
    except CalibConfigError as e:
        raise UsageError(str(e)) from None


def add_board_args(p) -> None:
    """The board estimate's deployment facts (perf/board.py): outputs left to the application, the BPU clock."""
    board = p.add_argument_group("board estimate")
    board.add_argument("--int-outputs", action="append", default=[], metavar="T1,T2,...",
                       help="model outputs the deployed model hands over as int32 with their scales (its Dequantize "
                            "removed, e.g. with hb_model_modifier -r) and the application dequantises: the board "
                            "estimate converts nothing on the CPU for them (repeatable)")
    board.add_argument("--board-bpu-ghz", type=float, default=None, metavar="GHZ",
                       help="the board's BPU clock, when it differs from the march's (the model zoo overclocks the "
                            "X5's BPU to 1.2 GHz for some of its tables): the board estimate's compute, vector and "
                            "per-op time scale with it, DDR time does not")


def board_clock_from_args(args) -> float:
    """``--board-bpu-ghz`` (0 when not given); a clock that is no positive number is a usage error."""
    import math

    ghz = getattr(args, "board_bpu_ghz", None)
    if ghz is None:
        return 0.0
    if not (math.isfinite(ghz) and ghz > 0):
        raise UsageError(f"--board-bpu-ghz must be a clock in GHz above 0, got {ghz:g}")
    return float(ghz)


def options_from_args(args):
    from ..app import Options
    from .output_options import output_mode_from_args

    # A --march-file is the march everywhere, its Concat output-scale rule included.
    march = getattr(args, "march_file", None) or args.march
    return Options(scheme=Scheme.parse(args.scheme),
                   policy=Policy(args.policy), march=march,
                   auto_share_max_bits_lost=args.auto_share_max_bits_lost,
                   float_output_max_bits_lost=args.float_output_max_bits_lost,
                   calib=calib_config_from_args(args), output_mode=output_mode_from_args(args),
                   int_outputs=tuple(t.strip() for a in (getattr(args, "int_outputs", None) or [])
                                     for t in a.split(",") if t.strip()),
                   board_bpu_ghz=board_clock_from_args(args))


def read_paths(args) -> list:
    """The files a command reads (model, --plan, --stats): no output may be written over them."""
    return [args.model, getattr(args, "plan", None), getattr(args, "stats", None), getattr(args, "compiler_log", None)]


def open_session(args, *, calibrate: bool = True, progress=None, keep_check_values: bool = False, opened=None):
    """:func:`open_stack`'s session (a command that does not edit it afterwards)."""
    return open_stack(args, calibrate=calibrate, progress=progress, keep_check_values=keep_check_values,
                      opened=opened).session


def open_stack(args, *, calibrate: bool = True, progress=None, keep_check_values: bool = False, opened=None):
    """Open the model named in ``args`` (:func:`qtquant.app.opening.open_session`), calibrate when
    needed, apply --plan and --int16/--keep-float: returns the session's command stack, on which
    every edit is made (``stack.session`` is the session).
    ``keep_check_values``: a fidelity check follows (see :func:`qtquant.calib.calibrate`).
    ``opened(session)``: called once the model is open, before calibrating (work that needs no
    scales can start there, beside onnxruntime creating calibration's session)."""
    from ..app.commands import CommandStack
    from ..app.opening import OpenRequest, open_session as open_model_session
    from .compilerlog import log_input_shapes, read_log_from_args

    opts = options_from_args(args)
    log = read_log_from_args(args)
    explicit: frozenset[str] = frozenset()
    if getattr(args, "stats", None):
        from ..calib.statsfile import RANGE_FIELDS, explicit_data_fields

        given = {k for k in RANGE_FIELDS if getattr(args, k, None) is not None}  # named, even as the default
        explicit = frozenset(explicit_data_fields(opts.calib) - set(RANGE_FIELDS) | given)
    # (a model left dynamic opens at the log's input shape)
    request = OpenRequest(args.model, log_input_shapes(args, log) or args.input_shape, opts,
                          cut=getattr(args, "cut", None) or (), stats=getattr(args, "stats", None),
                          stats_explicit=explicit, compile_log=log,
                          log_any_shape=bool(getattr(args, "compiler_log_any_shape", False)),
                          log_scales=not getattr(args, "own_scales", False))

    def on_open(session):
        if session.compiler_log is not None:  # rows not placed: on stderr, so --json stays clean
            for u in session.compiler_log.unmatched:
                print(f"qtquant: warning: compile log: {u.describe()}", file=sys.stderr)
        precision_from_args(session, args)  # a typo fails before the slow calibration
        if opened is not None:
            opened(session)

    session = open_model_session(request, opened=on_open)
    stack = CommandStack(session)
    if not getattr(args, "stats", None) and calibrate and (
            not session.quantized_file or str(getattr(args, "calib", SYNTHETIC)) != SYNTHETIC):
        # A QDQ file keeps its own scales; data named with --calib gives the check its samples (its
        # float view the reference) and ranges to what the file left unquantized, as the app's Calibrate does.
        session.run_calibration(progress=progress, keep_check_values=keep_check_values)
    if getattr(args, "plan", None):
        from ..app.plans import apply_plan

        # Made for another file, cut, policy or scheme: applied, and said (on stderr, so --json stays clean).
        for w in apply_plan(stack, args.plan).warnings:
            print(f"qtquant: warning: {w}", file=sys.stderr)
    precision = precision_from_args(session, args)
    if precision is not None:  # on top of the plan's, one command
        from ..app.commands import SetOptionsCommand

        stack.push(SetOptionsCommand(precision=precision))
    search_from_args(session, args)  # measures the export as it will be written: after the plan and precision
    return stack


def auto_share_from_args(stack, args):
    """``--auto-share``: the auto-share (at the session's ``--auto-share-max-bits-lost``) as one command on
    ``stack``, as the window's Auto-share does; returns its report."""
    from ..app.sharing import auto_share

    return auto_share(stack)


def search_from_args(session, args) -> None:
    """``--observer search`` / ``search-per-node`` (or a statistics file made with one): choose the
    method(s) on the calibration just made or read, before the plan's groups."""
    from ..app.calibsearch import needs_search, search_calibration

    budget = getattr(args, "search_budget", None)
    if not needs_search(session.calibration):
        if budget is not None:
            raise UsageError("--search-budget applies to --observer search-per-node")
        return
    if budget is not None and not (budget >= 0):
        raise UsageError(f"--search-budget must be 0 s or more, got {budget}")
    kw = {} if budget is None else {"budget_s": budget}
    search_calibration(session, **kw)


def precision_from_args(session, args):
    """The precision map ``--int16`` / ``--keep-float`` (node or tensor names) make on top of the
    session's (the plan's), or None without them; an unknown name is a BadInputError (one line, exit 3)."""
    from ..quant.precision import assignments_from_names

    i16, fl = getattr(args, "int16", None) or [], getattr(args, "keep_float", None) or []
    if not (i16 or fl):
        return None
    return assignments_from_names(session.graph, i16, fl, base=session.options.precision)
