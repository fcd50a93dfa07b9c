"""``qtquant screenshot MODEL -o OUT.png``: render the app offscreen once analysis finished."""

from __future__ import annotations

import os

from ..base.errors import BadInputError, UsageError
from ..base.vocab import OVERLAYS, Overlay

NAME = "screenshot"
HELP = "render the app window (or its canvas) for MODEL to a PNG, after calibration and simulation"


def add_arguments(p) -> None:
    from .common import add_common

    from .compilerlog import add_compiler_log_args

    add_common(p)
    add_compiler_log_args(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.png", help="PNG file to write")
    p.add_argument("--overlay", choices=OVERLAYS, default=Overlay.NONE.value,
                   help=f"canvas overlay (default {Overlay.NONE})")
    p.add_argument("--select", metavar="NODE", default=None, help="select this node, centre it and inspect it")
    p.add_argument("--size", default="1600x1000", metavar="WxH", help="window size in pixels (default 1600x1000)")
    p.add_argument("--canvas-only", action="store_true", help="render only the graph canvas")
    p.add_argument("--collapse", action="store_true",
                   help="show the module hierarchy collapsed to its top levels, whatever the graph's size")
    p.add_argument("--expand", action="append", default=[], metavar="BLOCK",
                   help="expand this block of the module hierarchy (a name path like /model.22; repeatable)")
    p.add_argument("--accuracy-top", type=int, default=None, metavar="N",
                   help="run the accuracy check first, measuring the N best candidates (the error overlay "
                        "runs it with 8)")
    p.add_argument("--error-local", action="store_true", help="error overlay: colour by local SQNR")
    p.add_argument("--max-sqnr-drop", type=float, default=None, metavar="DB",
                   help="run auto-share by accuracy first (the Sensitivity dock draws its trade-off curve)")
    p.add_argument("--compare", default=None, metavar="B",
                   help="compare with a second file of the model (File > Compare With...): the canvas colours "
                        "what B changes, the Concat list and the inspector show both sides")
    p.add_argument("--dock", default=None, metavar="NAME", help="raise this dock's tab (e.g. sensitivity)")
    p.add_argument("--wait-fidelity", action="store_true", default=None,
                   help="wait for the fidelity check (output SQNR) on big graphs too (from 2,000 nodes the "
                        "picture is taken once calibrated and simulated, as the window is usable then)")
    p.add_argument("--timeout", type=float, default=180.0, metavar="S", help="give up after S seconds")


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size {text!r}: expected WIDTHxHEIGHT like 1600x1000") from None
    if not (200 <= w <= 8000 and 200 <= h <= 8000):
        raise UsageError("--size: width and height must be between 200 and 8000 pixels")
    return w, h


def run(args) -> int:
    # Offscreen unless the caller chose a platform: no window flashes up, works without a display.
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from .common import options_from_args
    from .compilerlog import log_input_shapes, read_log_from_args

    size = _size(args.size)
    options = options_from_args(args)
    log = read_log_from_args(args)
    try:
        from ..gui.window.shot import take_screenshot
    except ImportError as e:
        raise BadInputError(f"the desktop app is not available ({e})") from None
    out = take_screenshot(args.model, args.output, input_shapes=log_input_shapes(args, log) or args.input_shape,
                          options=options, compiler_log=log, compiler_log_any_shape=args.compiler_log_any_shape,
                          compiler_scales=not args.own_scales,
                          overlay=args.overlay, select=args.select, size=size, canvas_only=args.canvas_only,
                          plan=args.plan, timeout=args.timeout, cut=args.cut or (), collapse=args.collapse,
                          expand=args.expand, wait_fidelity=args.wait_fidelity,
                          int16=args.int16, keep_float=args.keep_float, accuracy_top=args.accuracy_top,
                          dock=args.dock, error_local=args.error_local, max_sqnr_drop=args.max_sqnr_drop,
                          stats=args.stats, compare=args.compare)
    from PIL import Image

    with Image.open(out) as im:
        got = im.size
    # The window cannot be smaller than its docks and bars need: a --size below that grows, and says so
    note = "" if got == size else f"; --size asked {size[0]}x{size[1]}, the window's minimum size is larger"
    print(f"wrote {out} ({got[0]}x{got[1]}{note})")
    return 0
