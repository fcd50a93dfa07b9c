"""``qtquant deploy``: the groups and precision map in one toolchain's own form (docs/deploy.md)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from .common import add_common, auto_share_from_args, open_stack
from .output_options import add_output_options

NAME = "deploy"
if TYPE_CHECKING:
    from ..deploy.facts import Deployed
    from ..deploy.readback import Readback

HELP = "write the groups and precision choices for a toolchain: x5-qat, x5-ptq, s100, tensorrt, ort"


def target_names() -> list[str]:
    from ..deploy.targets import Target

    return [t.value for t in Target]


def add_target_option(p, flag: str, *, required: bool) -> None:
    from ..deploy.targets import TARGETS

    p.add_argument(flag, required=required, choices=target_names(), metavar="TARGET",
                   help="toolchain: " + "; ".join(f"{t.value} = {s.title}" for t, s in TARGETS.items()))


def add_arguments(p) -> None:
    add_common(p)
    o = p.add_argument_group("deploy")
    add_target_option(o, "--target", required=False)
    o.add_argument("-o", "--output", default=None, metavar="DIR", help="folder for the files (made if missing)")
    o.add_argument("--readback", default=None, metavar="LOG",
                   help="instead of writing: read the hb_mapper makertbin log compiled after deployment and say which "
                        "groups and precision choices took effect (requantizes gone, still there, or new)")
    o.add_argument("--readback-any-shape", action="store_true",
                   help="accept a --readback log compiled at another input shape")
    o.add_argument("--auto-share", action="store_true",
                   help="share every Concat whose sharing costs at most --auto-share-max-bits-lost bits first")
    o.add_argument("--strict", action="store_true",
                   help="refuse (exit 3) when the target cannot state a decision, instead of listing it as a note")
    o.add_argument("--json", action="store_true", help="print what was written as JSON")
    add_output_options(p)


def run(args) -> int:
    from ..deploy import deploy
    from ..deploy.targets import output_dir
    from ..base.errors import UsageError

    if args.readback:
        if args.target or args.output or args.strict:
            raise UsageError("--readback reads a log: it takes no --target, -o or --strict")
        from ..horizon.log import read_compile_log

        read_compile_log(args.readback)  # a bad log fails before the slow part
    elif not args.target or not args.output:
        raise UsageError("deploy needs --target and -o DIR (or --readback LOG)")
    elif args.readback_any_shape:
        raise UsageError("--readback-any-shape goes with --readback")
    else:
        output_dir(args.output)  # a bad folder fails before the slow part
    stack = open_stack(args)
    session = stack.session
    lines = []
    if args.auto_share:
        lines += auto_share_from_args(stack, args).text().splitlines()
    res: Readback | Deployed
    if args.readback:
        from ..deploy.readback import read_back

        res = read_back(session, args.readback, any_shape=args.readback_any_shape)
    else:
        res = deploy(session, args.target, args.output, strict=args.strict)
    if args.json:
        json.dump({"messages": lines, **res.to_dict()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for line in lines + res.lines():
        print(line)
    return 0
