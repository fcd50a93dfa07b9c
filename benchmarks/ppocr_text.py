"""PP-OCRv4 text detector: "no signal, no number" on photos without text, a figure on text images.

ppocrv4_det.onnx (DBNet) outputs a per-pixel text probability map.  On the seven photos in
../shared/calib (no text) that map is near zero everywhere, so an SQNR against it measures nothing;
qtquant's fidelity check should then print a sentence, not a number (DESIGN §3 "No signal").

  Case A  ``qtquant analyze MODEL --input-shape x=1x3xHxW --calib PHOTOS --mean .. --std ..`` (ImageNet
          mean/std in the [0, 1] pixel range): prints what its fidelity part says, as a table and as
          --json, and whether it gave a sentence and no number.
  Case B  renders text images with Pillow (dark words on light backgrounds, a few lines at different
          sizes, seeded), saves them as PNGs in a temp folder and runs ``qtquant analyze`` on them (it
          should give a figure); then ``qtquant fix ... -o X.onnx`` on the same images and compares the
          float model with the exported file in onnxruntime (default SessionOptions, CPU) on those
          images itself: SQNR, cosine, and how many pixels cross DBNet's 0.3 threshold in each.

For both data sets the script also prints the float model's own output statistics (max, pixels
above 0.3), the independent evidence of whether there is a signal at all.

usage (from the repo root):
  .venv/bin/python benchmarks/ppocr_text.py [--model ../shared/models/ppocrv4_det.onnx]
      [--calib ../shared/calib] [--size 320] [--count 8] [--seed 0] [--qtquant "CMD"]
      [--keep-images DIR] [--fix-arg=--auto-share ...]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench_common import SHARED, cosine, default_qtquant, list_images, load_image, rel, sqnr_db  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
DB_THRESH = 0.3  # DBNet's binarization threshold (PaddleOCR det_db_thresh)

WORDS = ("invoice total amount paid due date order number customer account balance shipping address "
         "phone email street city river mountain quantum python model layer scale concat tensor export "
         "graph signal noise camera coffee rocket station north south market bridge garden window "
         "license receipt ticket hotel airport gate boarding seat coach train platform").split()


# -- measuring ----------------------------------------------------------------------------------


def session(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), sess_options=ort.SessionOptions(), providers=["CPUExecutionProvider"])


def run_all(path: Path, feeds):
    sess = session(path)
    out = sess.get_outputs()[0].name
    inp = sess.get_inputs()[0].name
    return out, inp, [sess.run([out], {inp: f})[0] for f in feeds]


# -- text images --------------------------------------------------------------------------------

def text_font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size), "Pillow's default font (FreeType)"
    except TypeError:  # Pillow < 10.1 has no size argument
        pass
    for name in ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf"):
        try:
            return ImageFont.truetype(name, size), name
        except OSError:
            continue
    return ImageFont.load_default(), "Pillow's bitmap font (fixed size: install fonts-dejavu-core)"


def render_text_images(folder: Path, count: int, h: int, w: int, seed: int) -> str:
    """``count`` seeded PNGs of dark words on light backgrounds, 3-6 lines each at different sizes."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    font_name = ""
    for i in range(count):
        bg = tuple(int(v) for v in rng.integers(200, 256, 3))
        im = Image.new("RGB", (w, h), bg)
        d = ImageDraw.Draw(im)
        y = int(rng.integers(4, max(5, h // 16)))
        for _ in range(int(rng.integers(3, 7))):
            size = int(rng.integers(max(10, h // 24), max(12, h // 7)))
            font, font_name = text_font(size)
            words = [str(v) for v in rng.choice(WORDS, int(rng.integers(1, 5)))]
            fg = tuple(int(v) for v in rng.integers(0, 70, 3))
            x = int(rng.integers(2, max(3, w // 5)))
            while len(words) > 1 and d.textbbox((x, y), " ".join(words), font=font)[2] > w - 2:
                words.pop()  # keep the line inside the image
            words = " ".join(words)
            box = d.textbbox((x, y), words, font=font)
            if box[3] > h - 2:
                break
            d.text((x, y), words, fill=fg, font=font)
            y = box[3] + int(rng.integers(size // 3, size + 2))
        im.save(folder / f"text_{i:02d}.png")
    return font_name


# -- qtquant's report ---------------------------------------------------------------------------

_NUM = re.compile(r"[-+]?(?:\d+\.\d*|\d*\.\d+)(?:[eE][-+]?\d+)?|[-+]?\binf\b|\bnan\b")


def run_qtquant(qtq, args, show=True):
    cmd = [*qtq, *args]
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if show:
        sys.stdout.write(p.stdout)
    if p.stderr.strip():
        print("[stderr] " + p.stderr.strip()[-1500:])
    if p.returncode != 0:
        print(f"(exit code {p.returncode})")
    return p


def fidelity_text(stdout: str) -> list[str]:
    """The fidelity part of analyze's text output: from the first line that starts it to the end."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        low = line.lower()
        if low.startswith("fidelity") or "no signal" in low or low.startswith("headline"):
            return lines[i:]
    return []


def text_verdict(part: list[str], output: str) -> tuple[bool, bool, list[str]]:
    """(an SQNR/cosine number is given for the output, a no-signal sentence is given, the lines about it).

    A sentence may quote numbers of its own ("varies by 1e-05, less than one step"): the text from
    "no signal" on is not searched for figures.
    """
    about = [ln for ln in part if output in ln]
    has_num = False
    for ln in about:
        s = ln.replace(output, " ")
        cut = s.lower().find("signal")
        if cut >= 0:
            s = s[:cut]
        has_num = has_num or bool(_NUM.search(s))
    sentence = any("signal" in ln.lower() for ln in part)
    return has_num, sentence, about


def _walk(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, path + (i,))
    else:
        yield path, obj


def json_fidelity(doc, output: str):
    """(figures {path: value}, sentences [str], samples) about the output's fidelity in a --json document.

    Old form: summary.sqnr_db / summary.cosine {output: number}; new form: fidelity.outputs.<output>
    with sqnr_db / cosine (null when there is no signal) plus a reason, and slices.
    """
    figs, words, samples = {}, [], None
    if not isinstance(doc, dict):
        return figs, words, samples
    fid = doc.get("fidelity")
    if not isinstance(fid, dict) and isinstance(doc.get("summary"), dict):
        fid = doc["summary"].get("fidelity")  # analyze puts it under summary
    if isinstance(fid, dict):
        samples = fid.get("samples")
        if "in_sample" in fid:
            samples = f"{samples} ({'in-sample' if fid['in_sample'] else 'held out'})"
        out = (fid.get("outputs") or {}).get(output)
        if out is not None:
            for path, v in _walk(out):
                key = str(path[-1]) if path else ""
                if key in ("sqnr_db", "cosine", "before_sqnr_db", "before_cosine"):
                    figs[f"fidelity.outputs.{output}." + ".".join(map(str, path))] = v
                elif isinstance(v, str) and ("signal" in v.lower() or key in ("reason", "note", "message")):
                    words.append(v)
    summ = {k: v for k, v in (doc.get("summary") or {}).items() if k != "fidelity"}
    for key in ("sqnr_db", "cosine"):
        v = summ.get(key)
        if isinstance(v, dict) and output in v:
            figs[f"summary.{key}.{output}"] = v[output]
    for path, v in _walk(summ):
        if isinstance(v, str) and "signal" in v.lower():
            words.append(v)
    return figs, list(dict.fromkeys(words)), samples


def is_number(v) -> bool:
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, (int, float)):
        return not math.isnan(v)
    if isinstance(v, str):
        return v.strip().lower() in ("inf", "-inf", "+inf")
    return False


def report_case(qtq, label, model, shape_arg, calib, extra, output):
    base = ["analyze", rel(model), "--input-shape", shape_arg, "--calib", rel(calib),
            "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)), "--no-perf", *extra]
    print(f"\n=== case {label}: qtquant analyze on {rel(calib)} ===")
    p = run_qtquant(qtq, base, show=False)
    part = fidelity_text(p.stdout)
    print("fidelity part of the table output:" if part else "the table output has no fidelity part; it printed:")
    for ln in (part or p.stdout.splitlines()[-12:]):
        print("  | " + ln)
    pj = run_qtquant(qtq, base + ["--json"], show=False)
    doc = None
    try:
        doc = json.loads(pj.stdout)
    except ValueError:
        print("(the --json run printed no JSON)")
    figs, words, samples = json_fidelity(doc, output)
    if doc is not None:
        print("--json fidelity: " + json.dumps({"figures": figs, "sentences": words, "samples": samples}))
    t_num, t_sentence, about = text_verdict(part, output)
    j_num = any(is_number(v) for v in figs.values())
    n = None
    m = re.match(r"\s*(\d+)", str(samples)) if samples is not None else None
    if m:
        n = int(m.group(1))
    else:
        m = re.search(r"\bon (\d+) (?:held-back |held-out |in-sample |check |calibration )?sample", " ".join(part))
        n = int(m.group(1)) if m else None
    return {"samples": n, "text_number": t_num, "text_sentence": t_sentence, "json_number": j_num,
            "json_words": words,
            "json_figs": figs, "has_fidelity": bool(part) or bool(figs) or bool(words), "rc": p.returncode}


def check_samples(files: list[Path], n, seed: int = 0, holdout: int = 2):
    """(indices, how) of the samples qtquant's check ran on, when they can be told from its count:
    all of them, or today's split rule (seeded shuffle, the last ``holdout``; a best-effort copy of
    qtquant/calib/engine.py split_samples, used only when the count matches)."""
    if not n:
        return None, "qtquant did not say how many samples it checked on"
    if n == len(files):
        return list(range(len(files))), f"all {n}"
    order = list(np.random.default_rng(seed).permutation(len(files)))
    hold = min(holdout, max(0, len(files) - 1))
    idx = order[len(files) - hold:] if hold else []
    if len(idx) == n:
        return [int(i) for i in idx], (f"{n}, by today's split rule (seed 0, last {hold} of the shuffle): "
                                       + ", ".join(files[i].name for i in idx))
    return None, f"{n}, which this script cannot identify"


def float_stats(name, files, outs):
    """Print and return, per image, the float output's max and its pixels above DBNet's threshold."""
    mx = [float(o.max()) for o in outs]
    above = [int((o > DB_THRESH).sum()) for o in outs]
    flat = np.concatenate([o.ravel() for o in outs])
    print(f"float model on {name} (overall mean {flat.mean():.3g}, spread max-min {flat.max() - flat.min():.3g}):")
    print("  " + "; ".join(f"{f.name} max {m:.3g}, {a} px > {DB_THRESH}" for f, m, a in zip(files, mx, above)))
    return mx, above


def fmt(x, nd=2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{nd}f}"


def export_and_compare(qtq, label, model, shape_arg, calib_dir, files, feeds, ref, out_path, extra,
                       idx, qtq_fig, show_fix=True):
    """``qtquant fix`` calibrated on ``calib_dir``, then float vs the exported file on ``files`` in
    onnxruntime (default options): (SQNR, cosine) over all of them, or None when the export failed."""
    fix_args = ["fix", rel(model), "--input-shape", shape_arg, "--calib", rel(calib_dir),
                "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)), *extra, "-o", rel(out_path)]
    run_qtquant(qtq, fix_args, show=show_fix)
    if not out_path.exists():
        print("no exported file: qtquant fix failed")
        return None
    _, _, test = run_all(out_path, feeds)
    r = np.concatenate([x.ravel() for x in ref])
    t = np.concatenate([x.ravel() for x in test])
    res = (sqnr_db(r, t), cosine(r, t))
    print(f"float vs {out_path.name} on the {len(files)} {label}: SQNR {fmt(res[0])} dB, cosine {res[1]:.5f}")
    print("  per image: " + "; ".join(
        f"{f.name} {fmt(sqnr_db(a, b))} dB (max {a.max():.3g} -> {b.max():.3g}, "
        f"{int((a > DB_THRESH).sum())} -> {int((b > DB_THRESH).sum())} px > {DB_THRESH})"
        for f, a, b in zip(files, ref, test)))
    if idx and len(idx) != len(files):
        r_s = np.concatenate([ref[i].ravel() for i in idx])
        t_s = np.concatenate([test[i].ravel() for i in idx])
        d = "" if qtq_fig is None else \
            f"; qtquant's analyze reported {fmt(qtq_fig)} dB (diff {qtq_fig - sqnr_db(r_s, t_s):+.2f})"
        print(f"  on qtquant's {len(idx)} check sample(s) only: SQNR {fmt(sqnr_db(r_s, t_s))} dB, cosine "
              f"{cosine(r_s, t_s):.5f}{d}")
    elif qtq_fig is not None:
        print(f"  qtquant's analyze reported {fmt(qtq_fig)} dB on the same {len(files)} images "
              f"(diff {qtq_fig - res[0]:+.2f})")
    return res


def headline_fig(case):
    return next((float(v) for k, v in case["json_figs"].items() if "sqnr_db" in k and "before" not in k
                 and ".slices." not in k and is_number(v)), None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(SHARED / "models" / "ppocrv4_det.onnx"))
    ap.add_argument("--calib", default=str(SHARED / "calib"), help="the photos for case A")
    ap.add_argument("--size", type=int, default=320, help="input height and width (a multiple of 32)")
    ap.add_argument("--count", type=int, default=8, help="text images for case B")
    ap.add_argument("--seed", type=int, default=0, help="seed of the text images")
    ap.add_argument("--qtquant", default=None, help="command that runs qtquant (default: the one beside "
                                                     "this Python, else python -m qtquant)")
    ap.add_argument("--keep-images", default=None, metavar="DIR",
                    help="write the text images (and the exported models) here instead of a temp folder")
    ap.add_argument("--fix-arg", action="append", default=[],
                    help="extra argument for the qtquant fix runs (repeatable, e.g. --fix-arg=--auto-share)")
    ap.add_argument("--analyze-arg", action="append", default=[],
                    help="extra argument for both qtquant analyze runs (repeatable)")
    args = ap.parse_args(argv)
    if args.size % 32:
        ap.error("--size must be a multiple of 32")

    qtq = shlex.split(args.qtquant) if args.qtquant else default_qtquant()
    model, photos_dir = Path(args.model), Path(args.calib)
    h = w = args.size
    shape_arg = f"x=1x3x{h}x{w}"
    tmp = None
    if args.keep_images:
        work = Path(args.keep_images)
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="ppocr_text_")
        work = Path(tmp.name)
    text_dir = work / "text"
    text_dir.mkdir(exist_ok=True)
    font = render_text_images(text_dir, args.count, h, w, args.seed)
    print(f"rendered {args.count} text images ({w}x{h}, seed {args.seed}, {font}) into {rel(text_dir)}")

    # independent look at the float model's output on both data sets
    photos = list_images(photos_dir)
    texts = list_images(text_dir)
    photo_feeds = [load_image(p, h, w, MEAN, STD) for p in photos]
    text_feeds = [load_image(p, h, w, MEAN, STD) for p in texts]
    out_name, _, ref_photos = run_all(model, photo_feeds)
    _, _, ref_text = run_all(model, text_feeds)
    print(f"\nmodel output {out_name}; onnxruntime default SessionOptions, CPUExecutionProvider")
    _, photo_above = float_stats(f"the {len(photos)} photos", photos, ref_photos)
    float_stats(f"the {len(texts)} text images", texts, ref_text)
    lit = [p.name for p, n in zip(photos, photo_above) if n]
    if lit:
        print(f"  note: the float model fires on {', '.join(lit)} (no text there: a false positive), so its "
              f"reference carries signal on those photos; a figure is legitimate if qtquant checks on them")

    # case A
    a = report_case(qtq, "A (photos, no text)", model, shape_arg, photos_dir, args.analyze_arg, out_name)
    idx_a, how_a = check_samples(photos, a["samples"])
    print(f"qtquant's check samples: {how_a}")
    a_signal = None
    if idx_a:
        mx = max(float(ref_photos[i].max()) for i in idx_a)
        spread = mx - min(float(ref_photos[i].min()) for i in idx_a)
        a_signal = mx >= DB_THRESH
        print(f"  float reference on them: max {mx:.3g}, spread {spread:.3g}, "
              f"{sum(int((ref_photos[i] > DB_THRESH).sum()) for i in idx_a)} px > {DB_THRESH} "
              f"({'a signal: text-like blobs' if a_signal else 'nothing above the text threshold'})")
    print("\n--- case A, independently: qtquant fix on the photos, float vs exported file ---")
    ind_a = export_and_compare(qtq, "photos", model, shape_arg, photos_dir, photos, photo_feeds, ref_photos,
                               work / "ppocr_photos_fix.onnx", args.fix_arg, idx_a, headline_fig(a),
                               show_fix=False)

    # case B
    b = report_case(qtq, "B (rendered text)", model, shape_arg, text_dir, args.analyze_arg, out_name)
    idx_b, how_b = check_samples(texts, b["samples"])
    print(f"qtquant's check samples: {how_b}")
    print("\n--- case B, independently: qtquant fix on the text images, float vs exported file ---")
    ind_b = export_and_compare(qtq, "text images", model, shape_arg, text_dir, texts, text_feeds, ref_text,
                               work / "ppocr_text_fix.onnx", args.fix_arg, idx_b, headline_fig(b))

    print("\n=== checks ===")
    if not a["has_fidelity"]:
        print("FAIL  case A: qtquant printed no fidelity report at all")
    else:
        ok = a["text_sentence"] and not a["text_number"] and not a["json_number"]
        detail = ["table: " + ("a number" if a["text_number"] else "no number") + ", " +
                  ("a sentence" if a["text_sentence"] else "no sentence"),
                  "json: " + ("a number " + json.dumps({k: v for k, v in a["json_figs"].items() if is_number(v)})
                              if a["json_number"] else "no number")
                  + (f", sentence {a['json_words'][0]!r}" if a["json_words"] else ", no sentence")]
        print(f"{'PASS' if ok else 'FAIL'}  case A (photos, no text) gives a sentence and no number "
              f"({'; '.join(detail)})")
        if a_signal:
            print(f"      caveat: the float reference fires on {', '.join(lit)} among qtquant's check samples, "
                  f"so a figure there is not wrong in itself")
    if not b["has_fidelity"]:
        print("FAIL  case B: qtquant printed no fidelity report at all")
    else:
        ok = b["text_number"] and b["json_number"] and not b["json_words"]
        fig = headline_fig(b)
        print(f"{'PASS' if ok else 'FAIL'}  case B (text images) gives a figure "
              f"(table: {'a number' if b['text_number'] else 'no number'}; json: "
              f"{'SQNR ' + fmt(fig) + ' dB' if fig is not None else 'no number'}"
              f"{'; sentence ' + repr(b['json_words'][0]) if b['json_words'] else ''})")
    for name, ind, n in (("A", ind_a, len(photos)), ("B", ind_b, len(texts))):
        if ind is not None:
            print(f"info  case {name} independent: exported file vs float on all {n} images: "
                  f"SQNR {fmt(ind[0])} dB, cosine {ind[1]:.5f}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
