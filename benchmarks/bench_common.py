"""What the fidelity benchmark scripts share: reading images as qtquant does, the error figures
(written here independently of qtquant.fidelity.metrics, so the scripts check qtquant rather than reuse it),
and running qtquant as a user does."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np

def _shared_dir() -> Path:
    """The shared folder (models/, calib/) beside the checkout; from a git worktree kept elsewhere,
    the first one beside a folder above it.  Every script's default paths start here."""
    repo = Path(__file__).resolve().parents[1]
    for d in repo.parents:
        if (d / "shared" / "models").is_dir():
            return d / "shared"
    return repo.parent / "shared"


SHARED = _shared_dir()

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")


def sqnr_db(ref, test) -> float:
    ref = np.asarray(ref, np.float64).ravel()
    test = np.asarray(test, np.float64).ravel()
    noise = float(np.sum((ref - test) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def cosine(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a, b) / (na * nb))


def list_images(folder: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [Path(dirpath) / f for f in sorted(filenames)
                if not f.startswith(".") and os.path.splitext(f)[1].lower() in IMAGE_EXTS]
    return out


def load_image(path: Path, h: int, w: int, mean=None, std=None) -> np.ndarray:
    """qtquant's preprocessing: EXIF orientation, RGB, stretch (bilinear), /255 in float32, then
    (x - mean) / std when given, NCHW, batch 1."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im).convert("RGB").resize((w, h), Image.Resampling.BILINEAR)
        x = np.asarray(im, dtype=np.float32)
    x = x / np.float32(255.0)
    if mean is not None:
        x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def default_qtquant() -> list[str]:
    beside = Path(sys.executable).parent / "qtquant"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "qtquant"]


def rel(p) -> str:
    try:
        r = os.path.relpath(p)
        return r if len(r) < len(str(p)) else str(p)
    except ValueError:
        return str(p)


def interpreter() -> str:
    """Which Python ran the benchmark.  Pure-Python stages move with how the interpreter was built
    (Debian's python3.11, built with profile-guided optimisation, ran an object-making loop 16%
    faster than pyenv's default build of 3.11 on the same machine), while onnx's and
    onnxruntime's C++ does not: a ratio against a C++ floor depends on it."""
    import platform

    return f"Python {platform.python_version()} ({sys.executable})"


def machine() -> str:
    """The CPU the figures come from: the same code's ratios and milliseconds differ between this
    project's machines (a 2-core Xeon with AVX-512 VNNI, AMD EPYCs with and without it), most of all
    where onnxruntime's int8 kernels or two processes at once are timed."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        import platform

        model = platform.processor() or model
    isa = ("AVX-512 VNNI" if "avx512_vnni" in flags else "AVX-512" if "avx512f" in flags
           else "AVX2 VNNI" if "avx_vnni" in flags else "AVX2" if "avx2" in flags else "")
    return f"{model}, {os.cpu_count()} CPUs" + (f", {isa}" if isa else "")


def pump_events(app, cond, timeout: float = 120.0, what: str = "the app") -> float:
    """Run the app's events until ``cond()``, asleep in between as the app's own event loop is;
    returns the time it was met (``time.perf_counter``).

    Polling (processEvents, then a 0.5 ms sleep) took ~11% of a core from the fidelity worker's
    child on this 2-core machine, which a user's idle window does not.  A result from a worker
    thread arrives as a queued event, which wakes the wait; the 5 ms timer only bounds how late a
    condition met without an event (none is known) would be seen."""
    import time

    from PySide6.QtCore import QEventLoop, QTimer

    t0 = time.perf_counter()
    tick = QTimer()
    tick.start(5)
    try:
        while not cond():
            app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"timed out waiting for {what}")
    finally:
        tick.stop()
    return time.perf_counter()
