"""qtquant on onnx's own test models: every ``model.onnx`` under the installed onnx package's
``backend/test/data/{pytorch-converted,pytorch-operator,simple}`` (140 small files, opsets 6-12, from
PyTorch's 2017-era exporter and onnx's sequence, string and training tests), run as a user runs qtquant.

Each model goes through ``qtquant analyze --no-perf`` and ``qtquant fix --auto-share`` in a fresh
interpreter (synthetic calibration data); the written file through onnx's full checker and an
onnxruntime session.  A run passes when it exits 0, or exits 3 with one ``qtquant: error:`` line on
stderr and nothing else; a traceback, another exit code, or a second stderr line is a failure.

usage: python benchmarks/onnx_test_models.py [--jobs 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx

SETS = ("pytorch-converted", "pytorch-operator", "simple")


def models() -> list[Path]:
    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    return sorted(p for s in SETS for p in (root / s).glob("*/model.onnx"))


def _cli(args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qtquant", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def _verdict(r: subprocess.CompletedProcess) -> tuple[str, str]:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if r.returncode == 0:
        return "ok", ""
    if r.returncode == 3 and len(lines) == 1 and lines[0].startswith("qtquant: error: "):
        return "refused", lines[0].removeprefix("qtquant: error: ")
    return "FAIL", f"exit {r.returncode}, {len(lines)} stderr line(s): {(lines or [''])[-1][:160]}"


def _exported(path: Path) -> str:
    import onnxruntime as ort

    try:
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return ""
    except Exception as e:  # the written file is what ships: any refusal is a failure
        return str(e).splitlines()[0][:160]


def one(model: Path, out_dir: Path) -> tuple[str, str, int, str, str, str]:
    name = model.parent.name
    opset = next((o.version for o in onnx.load(str(model), load_external_data=False).opset_import
                  if o.domain in ("", "ai.onnx")), 0)
    a, why_a = _verdict(_cli(["analyze", str(model), "--no-perf"], out_dir))
    out = out_dir / f"{name}.qdq.onnx"
    f, why_f = _verdict(_cli(["fix", str(model), "-o", str(out), "--auto-share", "--no-perf"], out_dir))
    if f == "ok":
        broken = _exported(out)
        if broken:
            f, why_f = "FAIL", f"the written file: {broken}"
    return model.parent.parent.name, name, opset, a, f, why_a or why_f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", help="write the exports here (else a temporary folder)")
    args = ap.parse_args()
    found = models()
    if not found:
        print(f"no test models under {Path(onnx.__file__).parent / 'backend/test/data'} (onnx {onnx.__version__})")
        return
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(args.keep or tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(lambda m: one(m, out_dir), found))
    print(f"onnx {onnx.__version__}: {len(rows)} test models; analyze --no-perf, then fix --auto-share (its file "
          "through onnx's full checker and an onnxruntime session)")
    by_opset = collections.Counter(r[2] for r in rows)
    print("opsets: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_opset.items())))
    for step, k in (("analyze", 3), ("fix", 4)):
        c = collections.Counter(r[k] for r in rows)
        print(f"{step}: " + ", ".join(f"{c[v]} {v}" for v in ("ok", "refused", "FAIL")))
    reasons = collections.Counter(r[5][:110] for r in rows if r[5])
    if reasons:
        print("\nwhy not (first line of the message, shortened; count):")
        for why, n in reasons.most_common():
            print(f"  {n:3d}  {why}")
    fails = [r for r in rows if "FAIL" in (r[3], r[4])]
    for r in fails:
        print(f"FAIL {r[0]}/{r[1]} (opset {r[2]}): {r[5]}")
    print(f"\n{len(fails)} failure(s): a traceback, another exit code, a second stderr line, or a written file "
          "onnx or onnxruntime refuses")


if __name__ == "__main__":
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    main()
