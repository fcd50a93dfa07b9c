"""Command line entry point (DESIGN §6).  Each subcommand lives in its own module.

A subcommand module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``.  Common options come from :mod:`qtquant.cli.common`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..base.errors import QtQuantError, UsageError

__all__ = ["main", "build_parser", "entry", "QUICK_EXIT"]

COMMANDS = ["analyze", "fix", "deploy", "perf", "accuracy", "calibrate", "diff", "check", "screenshot", "demo"]

GUI_LAUNCH = """
opening the app:
  qtquant                       the app on the bundled demo
  qtquant MODEL.onnx [OPTIONS]  the app on MODEL; OPTIONS are the common options of the
                                subcommands (--input-shape, --calib, --calib-count, --holdout,
                                --observer, --percentile, --scheme, --march, --policy, --plan,
                                --auto-share-max-bits-lost, --float-output-max-bits-lost,
                                --cut, the image preprocessing ones; see
                                'qtquant analyze --help').  When every dynamic input dimension is
                                given or recorded in the model, the open dialog is skipped;
                                otherwise it opens filled in with them.  (--stats, --ray,
                                --int16 and --keep-float are refused there for now.)
  qtquant PROJECT.qtquant       the app on a saved project
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, exit 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"qtquant: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="qtquant", description="Find and fix Concat scale mismatches in INT8 ONNX models. "
                "Run without a command to open the app.",
                epilog="subcommands: " + ", ".join(COMMANDS) + ".  " + GUI_LAUNCH,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    from .. import __version__

    p.add_argument("--version", action="version", version=f"qtquant {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        mod = _load(name)
        if mod is None:
            continue
        sp = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def _load(name):
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            return None  # command not built yet
        raise


def gui_parser() -> argparse.ArgumentParser:
    """``qtquant MODEL [OPTIONS]``: the model and the subcommands' common options."""
    from .common import add_common

    p = _Parser(prog="qtquant", description="Open MODEL (.onnx or .qtquant) in the app.", epilog=GUI_LAUNCH,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", nargs="?", help="ONNX model or .qtquant project")
    add_common(p, model=False)
    return p


def _open_gui(argv) -> int:
    parser = gui_parser()
    args = parser.parse_args(argv)
    given = any(a.startswith("--") for a in argv)  # any option: the command line decides, not memory
    options = None
    try:
        if given:
            from .common import options_from_args
            from ..model.shapes import parse_input_shapes

            # Common options the app's launch does not carry are refused, not silently ignored:
            # the open dialog or the menus have them.
            unsupported = [flag for flag, dest in (("--stats", "stats"), ("--ray", "ray"), ("--int16", "int16"),
                                                   ("--keep-float", "keep_float")) if getattr(args, dest, None)]
            if unsupported:
                raise UsageError(f"{', '.join(unsupported)} cannot be given when opening the app yet; "
                                    "use the open dialog or the canvas menus, or a subcommand")
            options = options_from_args(args)
            parse_input_shapes(args.input_shape)  # a bad shape is one line here, not a dialog later
            if args.plan and not os.path.isfile(args.plan):
                raise QtQuantError(f"--plan: no such file: {args.plan}")
    except QtQuantError as e:
        sys.stderr.write(f"qtquant: error: {e}\n")
        return e.exit_code
    try:
        from ..gui.window.app import run_app
    except ImportError as e:
        sys.stderr.write(f"qtquant: error: the desktop app is not available ({e}); "
                         f"use a subcommand: {', '.join(COMMANDS)}\n")
        return 2
    if options is None:
        return run_app(args.model)
    return run_app(args.model, options=options, input_shapes=args.input_shape, plan=args.plan,
                   cut=getattr(args, "cut", None))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and not argv[0].startswith("-")):
        if argv and not argv[0].lower().endswith((".onnx", ".qtquant")) and not os.path.exists(argv[0]):
            build_parser().error(f"unknown command {argv[0]!r} (choose from {', '.join(COMMANDS)}, "
                                 "or give a model file)")
        return _open_gui(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    try:
        return int(args._run(args) or 0)
    except QtQuantError as e:
        sys.stderr.write(f"qtquant: error: {e}\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("qtquant: interrupted\n")
        return 130
    except MemoryError:
        sys.stderr.write("qtquant: error: out of memory\n")
        return 3


# Commands that end with everything written and nothing left for the interpreter's teardown to do
# but free memory (no Qt: the GUI, screenshot and demo keep the normal exit).
QUICK_EXIT = frozenset({"analyze", "fix", "deploy", "perf", "accuracy", "calibrate", "diff"})


def entry() -> None:
    """The ``qtquant`` command and ``python -m qtquant``: :func:`main`, then, after one of
    :data:`QUICK_EXIT`, an exit that skips the interpreter's teardown.

    Why: that teardown frees one object at a time everything the command built and runs a last
    garbage collection over it: 0.5-0.6 s after ``analyze`` of a 20,000-node CNN (load ~3), where
    the quick exit took 0.06-0.08 s.  The exit handlers still run (atexit: Ray, multiprocessing,
    temporary folders), stdout and stderr are flushed, and a non-daemon thread still running gets
    the normal exit (which waits for it).  Those commands also collect garbage at a batch
    command's pace (:func:`qtquant.app.gcpolicy.batch`)."""
    import threading

    argv = sys.argv[1:]
    if argv and argv[0] in QUICK_EXIT:
        from ..app.gcpolicy import batch

        batch()
    rc = main()
    if not argv or argv[0] not in QUICK_EXIT or any(
            t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(rc)
    import atexit

    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: what the normal exit would report, and exit 120
        sys.exit(rc)
    os._exit(rc)
