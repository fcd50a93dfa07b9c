"""Calibration data sources: image folders, ``.npy`` / ``.npz`` files or folders, and synthetic data.

A source lists its samples as :class:`SampleRef` (file + index) without loading them, in a seeded
shuffled order, and loads feeds ``{input name: array}`` on demand.  Sources are plain picklable
objects so ``--jobs`` workers can rebuild the same samples in another process.

Every problem with the data is a one-line :class:`~qtquant.base.errors.CalibrationDataError` that names
the file, and for shape or dtype trouble, the input with its expected and actual shapes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tokenize
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..base.errors import BadInputError, CalibrationDataError, ModelError, first_line
from ..model.shapes import format_shape
from ..base.vocab import SYNTHETIC
from .holdout import synthetic_sample_count

__all__ = ["SampleRef", "Source", "open_source", "data_digest", "preprocess_image", "parse_channels",
           "IMAGE_EXTS", "ARRAY_EXTS"]

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")
ARRAY_EXTS = (".npy", ".npz")
LETTERBOX_FILL = 114  # the gray Ultralytics pads with


@dataclass(frozen=True, order=True)
class SampleRef:
    """One sample: ``index`` within ``file`` ("" for synthetic data)."""

    file: str
    index: int = 0

    def label(self) -> str:
        if not self.file:
            return f"synthetic sample {self.index}"
        return self.file if self.index == 0 and not self.file.endswith(ARRAY_EXTS) else \
            f"{self.file} (sample {self.index})"


def parse_channels(value, what: str) -> tuple[float, ...] | None:
    """``"0.485,0.456,0.406"`` / a number / a sequence -> tuple of floats (one or three)."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, str):
            vals = tuple(float(v) for v in value.replace(" ", "").split(",") if v != "")
        elif isinstance(value, (int, float)):
            vals = (float(value),)
        else:
            vals = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise BadInputError(f"--{what} expects one or three numbers like 0.485,0.456,0.406, got {value!r}") from None
    if len(vals) not in (1, 3) or not all(np.isfinite(vals)):
        raise BadInputError(f"--{what} expects one or three finite numbers, got {value!r}")
    if what == "std" and any(v == 0 for v in vals):
        raise BadInputError(f"--std values must not be zero, got {value!r}")
    return vals


def _spec_text(shape, dtype) -> str:
    return f"{format_shape(shape)} {np.dtype(dtype).name}"


def _check_dtype(file: str, name: str, spec_dtype, dtype, shape) -> None:
    want, got = np.dtype(spec_dtype), np.dtype(dtype)
    if got.kind == "O" or got.kind not in "biuf":
        raise CalibrationDataError(f"{file}: input {name!r} expects {_spec_text(shape, want)} data, "
                                   f"got {got.name} values")
    if (want.kind == "f") != (got.kind == "f"):
        hint = " (convert it, e.g. x.astype('float32') / 255)" if want.kind == "f" else ""
        raise CalibrationDataError(f"{file}: input {name!r} expects {want.name} data, got {got.name}{hint}")


def _fit(file: str, name: str, shape: tuple, dtype, spec: tuple) -> tuple[int, str]:
    """How an array of ``shape`` holds samples for an input of shape ``spec``: (count, mode)."""
    shape, spec = tuple(shape), tuple(spec)
    _check_dtype(file, name, spec[1], dtype, spec[0])
    want = spec[0]
    if shape == want:
        return 1, "same"
    lead_one = len(want) > 0 and want[0] == 1
    if lead_one and len(shape) == len(want) and shape[1:] == want[1:]:
        n, mode = shape[0], "rows"  # N samples stacked along the batch axis
    elif len(shape) == len(want) + 1 and shape[1:] == want:
        n, mode = shape[0], "stack"  # N samples, each of the full input shape
    elif lead_one and shape == want[1:]:
        return 1, "expand"  # one sample saved without its batch axis
    else:
        alt = f" (or Nx{format_shape(want[1:])} for N samples)" if lead_one else ""
        raise CalibrationDataError(f"{file}: input {name!r} expects shape {format_shape(want)}{alt}, "
                                   f"got {format_shape(shape)}")
    if n == 0:
        raise CalibrationDataError(f"{file}: input {name!r} holds no samples (shape {format_shape(shape)})")
    return n, mode


def _npz_headers(path: Path) -> dict[str, tuple[tuple, np.dtype]]:
    """Shapes and dtypes of the arrays in an .npz, read from the headers without loading data."""
    out = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with zf.open(info) as fp:
                version = np.lib.format.read_magic(fp)
                reader = np.lib.format.read_array_header_1_0 if version == (1, 0) \
                    else np.lib.format.read_array_header_2_0
                shape, _, dtype = reader(fp)
            out[info.filename[:-4]] = (tuple(shape), np.dtype(dtype))
    return out


def _array_headers(path: Path) -> dict[str, tuple[tuple, np.dtype]]:
    try:
        if path.suffix.lower() == ".npz":
            return _npz_headers(path)
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        return {"": (tuple(arr.shape), arr.dtype)}
    except ValueError as e:
        if "pickle" in str(e).lower() or "object" in str(e).lower():
            raise CalibrationDataError(f"{path}: holds Python objects (pickled); qtquant reads plain numeric "
                                       f"arrays only") from None
        raise CalibrationDataError(f"{path} is not a readable {path.suffix} file ({e})") from None
    except (OSError, zipfile.BadZipFile, EOFError, SyntaxError, TypeError, KeyError, tokenize.TokenError) as e:
        # A cut or garbled .npy header makes numpy's header parser raise any of these.
        raise CalibrationDataError(f"{path} is not a readable {path.suffix} file ({type(e).__name__})") from None


def _check_finite(label: str, name: str, arr: np.ndarray) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise CalibrationDataError(f"{label}: input {name!r} contains NaN or Inf values")


class Source:
    """Base: ``refs`` (all available samples, seeded shuffled order) and ``feeds(refs)``."""

    kind = "?"
    skipped: list[tuple[str, str]] = []  # (file, why) of the files left out as unreadable

    def __init__(self, specs: dict, refs: list[SampleRef], root: str):
        self.specs = specs  # {input: (shape, dtype)}
        self.refs = refs
        self.root = root

    def feeds(self, refs) -> Iterator[tuple[SampleRef, dict[str, np.ndarray]]]:
        raise NotImplementedError

    def load_order(self, refs: list[SampleRef]) -> list[SampleRef]:
        """``refs`` grouped by file (in order of first appearance), so each file is read once."""
        first: dict[str, int] = {}
        for i, r in enumerate(refs):
            first.setdefault(r.file, i)
        return sorted(refs, key=lambda r: first[r.file])

    @property
    def notes(self) -> list[str]:
        """What the run should say about the data: the files skipped as unreadable, each named."""
        return [f"skipped unreadable image {f}: {why}" for f, why in self.skipped]

    def run_failure_hint(self) -> str:
        """What to add to onnxruntime's error when a sample of this source failed to run, where the
        data itself is the likely cause ("" when nothing is known)."""
        return ""

    def fingerprint(self) -> dict:
        """What identifies the data for the statistics cache: files with size and mtime."""
        files = sorted({r.file for r in self.refs if r.file})
        entries = []
        for f in files:
            st = os.stat(f)
            entries.append([os.path.relpath(f, self.root) if self.root else f, st.st_size, st.st_mtime_ns])
        return {"kind": self.kind, "root": self.root, "files": entries}


class SyntheticSource(Source):
    """Seeded uniform [0, 1) floats shaped like the inputs (zeros for integer inputs).

    Sample ``i`` comes from its own generator seeded with ``(seed, i)``, so any split of the
    samples over processes sees the same data.
    """

    kind = SYNTHETIC

    def __init__(self, specs, n: int, seed: int):
        super().__init__(specs, [SampleRef("", i) for i in range(n)], "")
        self.seed = seed

    def feeds(self, refs):
        for r in refs:
            rng = np.random.default_rng([self.seed, r.index])
            feed = {}
            for name, (shape, dtype) in self.specs.items():
                dtype = np.dtype(dtype)
                feed[name] = rng.random(shape, dtype=np.float32).astype(dtype) if dtype.kind == "f" \
                    else np.zeros(shape, dtype)
            yield r, feed

    def run_failure_hint(self) -> str:
        return synthetic_failure_hint(self.specs)

    def fingerprint(self) -> dict:
        return {"kind": self.kind}


def synthetic_failure_hint(specs) -> str:
    """What to add to onnxruntime's error on synthetic samples: they give integer inputs zeros, and
    an input that holds a shape, split sizes or indices cannot run on made-up values."""
    ints = [name for name, (_, dtype) in specs.items() if np.dtype(dtype).kind != "f"]
    if not ints:
        return ""
    return (f" (synthetic samples give the integer input(s) {', '.join(ints[:3])} zeros; where one holds a "
            "shape, sizes or indices, calibrate on real values: --calib DATA, or Calibration data in the app)")


@contextmanager
def data_blamed(graph, config):
    """Where onnxruntime fails on samples of ``config``'s data for ``graph`` (the check samples run
    after calibration), re-raise its error with :meth:`Source.run_failure_hint` of that data."""
    try:
        yield
    except ModelError as e:
        from ..model.runtime import input_specs

        synthetic = config is not None and config.synthetic
        hint = synthetic_failure_hint(input_specs(graph)) if synthetic else ""
        if not hint or "onnxruntime" not in str(e) or str(e).endswith(hint):
            raise
        raise type(e)(f"{e}{hint}") from None


class ArraySource(Source):
    """``.npy`` files (single-input models) or ``.npz`` files keyed by input name."""

    kind = "arrays"

    def __init__(self, specs, files: list[Path], root: str, seed: int):
        self.layout: dict[str, dict[str, tuple[str, str]]] = {}  # file -> input -> (key, mode)
        refs = []
        names = list(specs)
        for path in files:
            f = str(path)
            heads = _array_headers(path)
            plan, counts = {}, {}
            if path.suffix.lower() == ".npy":
                if len(names) != 1:
                    raise CalibrationDataError(f"{f}: the model has {len(names)} inputs ({', '.join(names)}); "
                                               f"give .npz files keyed by input name")
                key = ""
                shape, dtype = heads[key]
                counts[names[0]], mode = _fit(f, names[0], shape, dtype, specs[names[0]])
                plan[names[0]] = (key, mode)
            else:
                for name in names:
                    if name in heads:
                        key = name
                    elif len(names) == 1 and len(heads) == 1:
                        key = next(iter(heads))  # np.savez(x) of a single-input model: 'arr_0'
                    else:
                        have = ", ".join(heads) or "no arrays"
                        raise CalibrationDataError(f"{f} has no array for input {name!r} (it has: {have})")
                    shape, dtype = heads[key]
                    counts[name], mode = _fit(f, name, shape, dtype, specs[name])
                    plan[name] = (key, mode)
            if len(set(counts.values())) > 1:
                detail = ", ".join(f"{k}: {v}" for k, v in counts.items())
                raise CalibrationDataError(f"{f}: inputs hold different numbers of samples ({detail})")
            self.layout[f] = plan
            refs += [SampleRef(f, i) for i in range(next(iter(counts.values())))]
        order = np.random.default_rng(seed).permutation(len(refs))
        super().__init__(specs, [refs[i] for i in order], root)

    def _load(self, f: str) -> dict[str, np.ndarray]:
        try:
            if f.lower().endswith(".npz"):
                with np.load(f, allow_pickle=False) as z:
                    return {key: z[key] for key, _ in self.layout[f].values()}
            return {"": np.load(f, mmap_mode="r", allow_pickle=False)}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
            raise CalibrationDataError(f"{f} is not readable ({type(e).__name__})") from None

    def feeds(self, refs):
        cur, arrays = None, None
        for r in refs:
            if r.file != cur:
                cur, arrays = r.file, None
                arrays = self._load(r.file)
            feed = {}
            for name, (key, mode) in self.layout[r.file].items():
                a = arrays[key]
                if mode == "rows":
                    a = a[r.index:r.index + 1]
                elif mode == "stack":
                    a = a[r.index]
                shape, dtype = self.specs[name]
                a = np.ascontiguousarray(a, dtype=dtype)
                _check_finite(r.label(), name, a)
                feed[name] = a.reshape(shape)
            yield r, feed


class ImageSource(Source):
    """A folder of images (or one image) for a single image input, with preprocessing."""

    kind = "images"

    def __init__(self, specs, files: list[Path], root: str, config):
        if len(specs) != 1:
            raise CalibrationDataError(f"an image folder feeds one input, but the model has {len(specs)} "
                                       f"({', '.join(specs)}); give .npz files keyed by input name")
        self.name = next(iter(specs))
        shape, _ = specs[self.name]
        self.layout = config.layout
        _image_geometry(self.name, shape, self.layout)  # fail early on a non-image input
        self.resize, self.color, self.pixel_range = config.resize, config.color, config.pixel_range
        self.mean, self.std = parse_channels(config.mean, "mean"), parse_channels(config.std, "std")
        files, self.skipped = readable_images(files)
        if not files:
            first = self.skipped[0]
            raise CalibrationDataError(f"no readable image in {root}: {len(self.skipped)} could not be read "
                                       f"({first[0]}: {first[1]})")
        refs = [SampleRef(str(p), 0) for p in files]
        order = np.random.default_rng(config.seed).permutation(len(refs))
        super().__init__(specs, [refs[i] for i in order], root)

    def feeds(self, refs):
        shape, dtype = self.specs[self.name]
        for r in refs:
            x = preprocess_image(r.file, shape, dtype, resize=self.resize, color=self.color,
                                 pixel_range=self.pixel_range, mean=self.mean, std=self.std,
                                 layout=self.layout, name=self.name)
            yield r, {self.name: x}


def readable_images(files: list[Path]) -> tuple[list[Path], list[tuple[str, str]]]:
    """(the files Pillow can open and verify, [(file, why) of the others]): one unreadable file in a
    folder of photos is skipped, with a note naming it (:attr:`Source.notes`), not a failed run."""
    from PIL import Image, UnidentifiedImageError

    ok, bad = [], []
    for p in files:
        try:
            with Image.open(p) as im:
                im.verify()  # the header and, where the format allows, the data's integrity: no decoding
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            bad.append((str(p), first_line(e)))
            continue
        ok.append(p)
    return ok, bad


def _image_geometry(name: str, shape: tuple, layout: str) -> tuple[int, int, int]:
    """(channels, height, width) of an image input; a one-line error when it is not one."""
    dims = tuple(shape)
    if len(dims) == 4:
        if dims[0] != 1:
            raise CalibrationDataError(f"input {name!r} has batch {dims[0]}; an image folder fills batch-1 "
                                       f"inputs (use --input-shape {name}=1x... or .npy data)")
        dims = dims[1:]
    if len(dims) != 3:
        raise CalibrationDataError(f"input {name!r} with shape {format_shape(shape)} is not an image input; "
                                   f"give .npy/.npz data")
    c, h, w = dims if layout == "nchw" else (dims[2], dims[0], dims[1])
    if c not in (1, 3):
        other = "nhwc" if layout == "nchw" else "nchw"
        raise CalibrationDataError(f"input {name!r} with shape {format_shape(shape)} has {c} channels in "
                                   f"{layout.upper()} layout; images give 1 or 3 (try --layout {other})")
    return c, h, w


def preprocess_image(path, shape, dtype=np.float32, *, resize: str = "stretch", color: str = "rgb",
                     pixel_range: str = "0-1", mean=None, std=None, layout: str = "nchw",
                     name: str = "input") -> np.ndarray:
    """Read one image with Pillow and turn it into an input array of ``shape``.

    Steps: EXIF orientation, RGB (or grayscale for 1-channel inputs), fit to the input size
    (``stretch``, ``letterbox`` with gray padding, or ``center-crop``), optional BGR order,
    scale to [0, 1] or keep [0, 255], then ``(x - mean) / std`` with mean and std in that pixel
    range, and NCHW or NHWC layout.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    c, h, w = _image_geometry(name, shape, layout)
    try:
        with Image.open(path) as im:
            im = ImageOps.exif_transpose(im)
            im = im.convert("RGB" if c == 3 else "L")
            method = Image.Resampling.BILINEAR
            if resize == "letterbox":
                im = ImageOps.pad(im, (w, h), method=method, color=(LETTERBOX_FILL,) * c if c == 3 else LETTERBOX_FILL)
            elif resize == "center-crop":
                im = ImageOps.fit(im, (w, h), method=method)
            else:
                im = im.resize((w, h), method)
            x = np.asarray(im, dtype=np.float32)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise CalibrationDataError(f"cannot read image {path}: {first_line(e)}") from None
    x = x.reshape(h, w, c)
    if c == 3 and color == "bgr":
        x = x[:, :, ::-1]
    if pixel_range == "0-1":
        x = x / np.float32(255.0)
    if mean is not None or std is not None:
        mean = np.asarray(parse_channels(mean, "mean") or (0.0,), np.float32)
        std = np.asarray(parse_channels(std, "std") or (1.0,), np.float32)
        if c == 1 and (mean.size == 3 or std.size == 3):
            raise CalibrationDataError(f"input {name!r} takes 1-channel images but --mean/--std give 3 values")
        x = (x - mean) / std
    if layout == "nchw":
        x = x.transpose(2, 0, 1)
    return np.ascontiguousarray(x.reshape(shape), dtype=dtype)


def _list_files(folder: Path) -> tuple[list[Path], list[Path]]:
    images, arrays = [], []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fn in sorted(filenames):
            if fn.startswith("."):
                continue
            ext = os.path.splitext(fn)[1].lower()
            if ext in IMAGE_EXTS:
                images.append(Path(dirpath) / fn)
            elif ext in ARRAY_EXTS:
                arrays.append(Path(dirpath) / fn)
    return images, arrays



def data_digest(source) -> str:
    """What identifies the calibration data a source reads (its files' names, sizes and times, or the
    synthetic settings): the driver and every Ray node must see the same."""
    return hashlib.sha256(json.dumps(source.fingerprint(), sort_keys=True).encode("utf-8")).hexdigest()


def open_source(specs: dict, config, *, synthetic_count: int | None = None) -> Source:
    """The source ``config.source`` names, indexed and validated against the input ``specs``."""
    src = str(config.source).strip()
    if src == SYNTHETIC:
        if synthetic_count is None:
            synthetic_count = synthetic_sample_count(config.count, config.holdout)
        n = synthetic_count
        return SyntheticSource(specs, n, config.seed)
    path = Path(src).expanduser()
    if not path.exists():
        raise CalibrationDataError(f"calibration data not found: {src}")
    if path.is_dir():
        images, arrays = _list_files(path)
        root = str(path.resolve())
        if images and arrays:
            raise CalibrationDataError(f"calibration folder {src} mixes images and .npy/.npz files; "
                                       f"keep one kind per folder")
        if arrays:
            return ArraySource(specs, arrays, root, config.seed)
        if images:
            return ImageSource(specs, images, root, config)
        raise CalibrationDataError(f"calibration folder {src} has no images "
                                   f"({', '.join(IMAGE_EXTS[:4])}, ...) and no .npy/.npz files")
    ext = path.suffix.lower()
    root = str(path.resolve().parent)
    if ext in ARRAY_EXTS:
        return ArraySource(specs, [path], root, config.seed)
    if ext in IMAGE_EXTS:
        return ImageSource(specs, [path], root, config)
    raise CalibrationDataError(f"--calib {src}: expected an image folder, a .npy/.npz file or folder, "
                               f"or '{SYNTHETIC}'")
