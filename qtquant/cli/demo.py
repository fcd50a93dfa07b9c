"""``qtquant demo DIR``: write the bundled demo models and their calibration data."""

from __future__ import annotations

NAME = "demo"
HELP = "write the demo models and their calibration data"


def add_arguments(p) -> None:
    p.add_argument("dir", metavar="DIR", help="output folder (created if needed)")
    p.add_argument("--count", type=int, default=16, help="calibration samples per model (default 16)")


def run(args) -> int:
    from ..app.demo import write_demo
    from ..base.errors import BadInputError, UsageError

    if args.count < 1:
        raise UsageError("--count must be at least 1")
    try:
        written = write_demo(args.dir, count=args.count)
    except OSError as e:
        raise BadInputError(f"cannot write the demo into {args.dir}: {e.strerror or e}") from None
    for key, path in written.items():
        calib = path.with_name(path.stem + "_calib")
        print(f"{key}: {path}  (calibration data: {calib}/)")
    first = written["attention"]
    print(f"try: qtquant analyze {first} --calib {first.with_name(first.stem + '_calib')}")
    return 0
