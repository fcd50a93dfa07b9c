"""Render the documentation screenshots (docs/img/) with ``qtquant screenshot``.

Each picture is made by the CLI in a fresh process, exactly as a user would make it:

* the demo (multi-scale attention), whole window, k_cat selected; and again with both Concats
  shared (a plan tying each Concat's inputs and output);
* yolov8n_320 (when the shared model folder is present), calibrated on the shared photos,
  in each overlay mode: none (whole window), latency, mismatch and bits lost (canvas only);
  and the head's P3 box and class branches before and after sharing one observer.

PNGs are reduced to a 256-colour palette with Pillow to keep the repository small.

Run:  python3 benchmarks/screenshots.py [--out docs/img] [--models DIR] [--calib DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def shot(args: list[str], out: Path) -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "qtquant", "screenshot", *args, "-o", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"qtquant screenshot failed ({r.returncode}): {r.stderr.strip()}")
    print(f"{out.name:<28} {time.perf_counter() - t:5.1f} s   qtquant screenshot {' '.join(args)}")


def compress(path: Path) -> None:
    from PIL import Image

    # fast octree keeps the few-pixel legend swatches exact (median cut merged them)
    im = Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE,
                                                  dither=Image.Dither.NONE)
    im.save(path, optimize=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--models", default=str(SHARED / "models"))
    ap.add_argument("--calib", default=str(SHARED / "calib"))
    ap.add_argument("--no-compress", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = []

    sys.path.insert(0, str(ROOT))
    from qtquant.app.demo import write_demo

    tmp = Path(tempfile.mkdtemp(prefix="qtquant-shots-"))
    demo = write_demo(tmp, count=16)["attention"]
    demo_calib = demo.with_name(demo.stem + "_calib")
    # wide enough that both Concats and their "+2 rescale" badges are in view beside the docks
    demo_args = [str(demo), "--calib", str(demo_calib), "--select", "attn/k_cat", "--size", "1800x1000"]
    p = out / "demo_window.png"
    shot(demo_args, p)
    made.append(p)
    # README step 2: each Concat's inputs and output tied to one observer (Ctrl+G on k_cat and v_cat)
    plan = tmp / "demo_shared.plan.json"
    plan.write_text(json.dumps({"format": "qtquant-plan", "version": 1, "groups": [
        {"name": f"attn/{kv}_cat", "members": [f"attn/{kv}_proj/win3x3_out", f"attn/{kv}_proj/up7x7_out",
                                                 f"attn/{kv}_proj/up9x9_out", f"attn/{kv}_cat_out"]}
        for kv in ("k", "v")]}))
    p = out / "demo_grouped.png"
    shot(demo_args + ["--plan", str(plan)], p)
    made.append(p)

    yolo = Path(args.models) / "yolov8n_320.onnx"
    if yolo.exists():
        common = [str(yolo), "--input-shape", "images=1x3x320x320"]
        if Path(args.calib).is_dir():
            common += ["--calib", args.calib, "--calib-count", "7"]
        p = out / "yolov8n_window.png"
        shot(common + ["--select", "/model.22/Concat_25", "--size", "1500x950"], p)
        made.append(p)
        for mode, node in (("latency", "/model.6/Concat"), ("mismatch", "/model.22/Concat_25"),
                           ("bits", "/model.22/Concat_25")):
            p = out / f"yolov8n_{mode}.png"
            shot(common + ["--overlay", mode, "--select", node, "--canvas-only", "--size", "1000x700"], p)
            made.append(p)
        # Editing (docs/gui.md): the head's box and class branches at P3 tied to one observer,
        # as a drag of one Conv onto the other does; before and after, and the whole window.
        plan = tmp / "head_branches.plan.json"
        plan.write_text(json.dumps({"format": "qtquant-plan", "version": 1, "groups": [
            {"members": ["/model.22/cv2.0/cv2.0.2/Conv_output_0", "/model.22/cv3.0/cv3.0.2/Conv_output_0"]}]}))
        for name, extra in (("yolov8n_group_before.png", []), ("yolov8n_group_after.png", ["--plan", str(plan)])):
            p = out / name
            shot(common + extra + ["--select", "/model.22/Concat", "--canvas-only", "--size", "760x520"], p)
            made.append(p)
        p = out / "yolov8n_grouped_window.png"
        shot(common + ["--plan", str(plan), "--select", "/model.22/Concat", "--size", "1500x950"], p)
        made.append(p)
    else:
        print(f"(skipping yolov8n_320: {yolo} not found)")

    if not args.no_compress:
        for p in made:
            compress(p)
    for p in made:
        print(f"{p}: {p.stat().st_size / 1024:.0f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
