"""Issue 8: fuzzing the plan, project, statistics-cache and calibration-data readers.

Same contract as the loader fuzzers: every case ends in success or a one-line
QtQuantError, never another exception, a hang or a crash; cases run in the worker
process of ``test_fuzz_worker``.  ``QTQUANT_FUZZ_EXAMPLES=N`` runs longer campaigns.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import branchy_concat_model
from test_fuzz_worker import fuzz_settings, run_and_report, worker

MODEL = branchy_concat_model(shape=(1, 3, 8, 8), chain=True)
MODEL_BYTES = MODEL.SerializeToString()


@pytest.fixture(scope="module")
def real_files(tmp_path_factory):
    """A real plan, project and statistics cache of MODEL, written by qtquant itself."""
    from qtquant.calib import CalibConfig
    from qtquant.calib.cache import save_cache
    from qtquant.app import open_model
    from qtquant.files.plan import save_plan
    from qtquant.files.project import save_project
    from qtquant.app import Options

    d = tmp_path_factory.mktemp("real")
    (d / "model.onnx").write_bytes(MODEL_BYTES)
    s = open_model(d / "model.onnx", None, Options(calib=CalibConfig(count=2, holdout=1)))
    s.run_calibration()
    s.groups.share(s.graph, ["conv1_out", "conv2_out"], "pair")
    s.groups_changed()
    save_plan(s, d / "plan.json")
    save_cache(s.graph, s.calibration, d / "cache")
    save_project(s, d / "p.qtquant", stats_cache=d / "cache")
    cache = {p.name: p.read_bytes() for p in (d / "cache").iterdir()}
    assert len(cache) == 2
    return {"plan": json.loads((d / "plan.json").read_text()),
            "project": json.loads((d / "p.qtquant").read_text()), "cache": cache}


# -- JSON mutation ------------------------------------------------------------------------------
JSON_LEAF = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, -1, 2**63])
             | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
             | st.sampled_from(["conv1_out", "conv2_out", "pool0_out", "x", "cat", "ghost", "", "\x00", "é"]))
JSON_ANY = st.recursive(JSON_LEAF, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=8), ch,
                                                                                         max_size=4), max_leaves=8)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


@st.composite
def mutated_json(draw, base: dict) -> bytes:
    doc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["replace", "replace", "delete", "add", "version", "rename", "dup"]))
        if not path:
            if kind == "replace":
                doc = draw(JSON_ANY)
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        if kind == "replace":
            parent[key] = draw(JSON_ANY)
        elif kind == "delete":
            del parent[key]
        elif kind == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(JSON_ANY)
        elif kind == "add" and isinstance(parent, list):
            parent.append(draw(JSON_ANY))
        elif kind == "version" and isinstance(doc, dict):
            doc["version"] = draw(st.sampled_from([0, 1, 2, 99, -1, 1.0, "1", None, True, 2**64]))
        elif kind == "rename" and isinstance(parent[key], str):
            parent[key] = draw(st.sampled_from(["ghost", "cat_out", "x", "y", "conv0.w", "", parent[key] * 2]))
        elif kind == "dup" and isinstance(parent, list):
            parent.append(json.loads(json.dumps(parent[key])))
    text = json.dumps(doc, allow_nan=True)
    tail = draw(st.sampled_from(["none"] * 6 + ["truncate", "flip", "bom", "utf16", "bigint", "deep", "empty"]))
    data = text.encode()
    if tail == "truncate":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif tail == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    elif tail == "bom":
        data = b"\xef\xbb\xbf" + data
    elif tail == "utf16":
        data = text.encode("utf-16")
    elif tail == "bigint":  # Python refuses int literals over 4300 digits with a plain ValueError
        data = data.replace(b'"version": 1', b'"version": ' + b"9" * 5000, 1) if b'"version": 1' in data \
            else b'{"version": ' + b"9" * 5000 + b"}"
    elif tail == "deep":
        data = b"[" * 100_000 + b"]" * 100_000
    elif tail == "empty":
        data = b""
    return data


def _run_target(target, label, files, args=None):
    return worker().run(target, files, args or {}, label=label).check()


def test_fuzz_plan_reader(real_files):
    label = "plan/load+apply"

    @fuzz_settings(150)
    @given(mutated_json(real_files["plan"]))
    def check(data):
        _run_target("plan", label, {"model.onnx": MODEL_BYTES, "plan.json": data})

    o = _run_target("plan", "_real", {"model.onnx": MODEL_BYTES,
                                      "plan.json": json.dumps(real_files["plan"]).encode()})
    assert o.status == "ok" and o.value["groups"] == 1
    t = run_and_report(check, label)
    assert t.bad == 0 and t.ok > 0 and t.errors


def test_fuzz_project_reader(real_files):
    """The project refers to model.onnx next to it and to its statistics cache (copied along)."""
    label = "project/open"
    proj = dict(real_files["project"], model="model.onnx", stats_cache="cache")
    cache = {f"cache/{k}": v for k, v in real_files["cache"].items()}

    @fuzz_settings(150)
    @given(mutated_json(proj))
    def check(data):
        _run_target("project", label, {"model.onnx": MODEL_BYTES, "p.qtquant": data, **cache})

    o = _run_target("project", "_real", {"model.onnx": MODEL_BYTES, "p.qtquant": json.dumps(proj).encode(), **cache})
    assert o.status == "ok" and o.value["groups"] == 1 and o.value["from_cache"], o
    t = run_and_report(check, label)
    assert t.bad == 0 and t.ok > 0 and t.errors


# -- the statistics cache ---------------------------------------------------------------------
def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


@st.composite
def mutated_cache(draw, cache: dict):
    jname = next(k for k in cache if k.endswith(".json"))
    nname = next(k for k in cache if k.endswith(".npz"))
    doc = json.loads(cache[jname])
    with np.load(io.BytesIO(cache[nname]), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    files = {}
    what = draw(st.sampled_from(["json", "json", "arrays", "arrays", "npz_bytes", "missing"]))
    if what == "json":
        files[jname] = draw(mutated_json(doc))
        files[nname] = cache[nname]
    elif what == "arrays":
        key = draw(st.sampled_from(sorted(arrays)))
        a = arrays[key]
        how = draw(st.sampled_from(["nan", "inf", "shape", "dtype", "empty", "drop", "huge"]))
        if how == "nan":
            a = a.astype(np.float32)
            a.flat[0] = np.nan
        elif how == "inf":
            a = a.astype(np.float32)
            a.flat[-1] = -np.inf
        elif how == "shape":
            a = a.reshape(-1)[: max(1, a.size // 2)]
        elif how == "dtype":
            a = a.astype(draw(st.sampled_from([np.int8, np.float64, np.bool_, np.complex64, "U3"])))
        elif how == "empty":
            a = a.reshape(-1)[:0]
        elif how == "huge":
            a = np.full(a.shape, 3e38, np.float32)
        if how == "drop":
            del arrays[key]
        else:
            arrays[key] = a
        files[jname] = cache[jname]
        files[nname] = _npz_bytes(arrays)
    elif what == "npz_bytes":
        data = bytearray(cache[nname])
        for _ in range(draw(st.integers(1, 6))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
        files[jname] = cache[jname]
        files[nname] = bytes(data)
    else:
        files[draw(st.sampled_from([jname, nname]))] = cache[jname if draw(st.booleans()) else nname]
    return {f"cache/{k}": v for k, v in files.items()}


def test_fuzz_stats_cache_reader(real_files):
    label = "cache/load_cached"

    @fuzz_settings(120)
    @given(mutated_cache(real_files["cache"]))
    def check(files):
        _run_target("calib_cache", label, {"model.onnx": MODEL_BYTES, **files})

    real = {f"cache/{k}": v for k, v in real_files["cache"].items()}
    o = _run_target("calib_cache", "_real", {"model.onnx": MODEL_BYTES, **real})
    assert o.status == "ok" and o.value["hit"], o
    t = run_and_report(check, label)
    assert t.bad == 0 and t.ok > 0


def test_cache_with_wrong_shaped_holdout_sample(real_files):
    """Found by the cache fuzzer (fixed in 84df287): a held-back sample that no longer fits the input
    made fidelity crash in onnxruntime.  Now the entry is a cache miss."""
    nname = next(k for k in real_files["cache"] if k.endswith(".npz"))
    with np.load(io.BytesIO(real_files["cache"][nname]), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    key = next(k for k in arrays if k.startswith("holdout_"))
    arrays[key] = arrays[key].reshape(-1)
    files = {f"cache/{k}": v for k, v in real_files["cache"].items()}
    files[f"cache/{nname}"] = _npz_bytes(arrays)
    o = _run_target("calib_cache", "_regress", {"model.onnx": MODEL_BYTES, **files})
    assert o.status == "ok" and not o.value["hit"]


def test_cache_with_null_batches(real_files):
    jname = next(k for k in real_files["cache"] if k.endswith(".json"))
    doc = json.loads(real_files["cache"][jname])
    doc["batches"] = None
    files = {f"cache/{k}": v for k, v in real_files["cache"].items()}
    files[f"cache/{jname}"] = json.dumps(doc).encode()
    o = _run_target("calib_cache", "_regress", {"model.onnx": MODEL_BYTES, **files})
    assert o.status == "ok" and not o.value["hit"]


def test_npy_with_broken_header_is_refused():
    data = _npy_bytes(np.zeros((1, 3, 8, 8), np.float32)).replace(b"}", b" ", 1)
    o = _run_target("calib", "_regress", {"model.onnx": MODEL_BYTES, "data.npy": data},
                    {"config": {"source": "data.npy", "count": 2, "holdout": 0}})
    assert o.status == "error" and o.type == "CalibrationDataError"


# -- calibration data ---------------------------------------------------------------------------
SHAPES = [(1, 3, 8, 8)] * 3 + [(3, 8, 8), (2, 3, 8, 8), (1, 3, 8), (1, 8, 8, 3), (0, 3, 8, 8), (), (5,),
                               (4, 1, 3, 8, 8), (1, 3, 16, 16)]
DTYPES = [np.float32] * 3 + [np.float64, np.float16, np.int8, np.uint8, np.int64, np.bool_, np.complex64, "U4",
                             [("a", np.float32), ("b", np.int8)]]


def _array(draw) -> np.ndarray:
    shape = draw(st.sampled_from(SHAPES))
    dtype = draw(st.sampled_from(DTYPES))
    a = np.random.default_rng(draw(st.integers(0, 9))).random(shape)
    fill = draw(st.sampled_from(["normal"] * 4 + ["nan", "inf", "huge", "zero", "denormal"]))
    if fill == "nan" and a.size:
        a.flat[0] = np.nan
    elif fill == "inf" and a.size:
        a.flat[-1] = np.inf
    elif fill == "huge":
        a = a * 1e300
    elif fill == "zero":
        a = a * 0
    elif fill == "denormal":
        a = a * 1e-310
    with np.errstate(all="ignore"):  # overflowing casts are part of the point
        try:
            return a.astype(dtype)
        except (TypeError, ValueError):
            return a.astype(np.float32)


def _npy_bytes(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _image_bytes(draw) -> tuple[str, bytes]:
    from PIL import Image

    kind = draw(st.sampled_from(["png", "jpg", "bmp", "gif", "tif", "webp", "truncated", "empty", "text", "bomb"]))
    mode = draw(st.sampled_from(["RGB", "RGB", "L", "RGBA", "P", "1", "I;16", "CMYK", "F"]))
    w, h = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    fmt = {"png": "PNG", "jpg": "JPEG", "bmp": "BMP", "gif": "GIF", "tif": "TIFF", "webp": "WEBP"}.get(kind, "PNG")
    if kind == "empty":
        return "a.png", b""
    if kind == "text":
        return "a.jpg", b"this is not an image\n"
    if kind == "bomb":  # a PNG header claiming 40000x40000 pixels
        import struct
        import zlib

        ihdr = struct.pack(">IIBBBBB", 40000, 40000, 8, 2, 0, 0, 0)
        chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
        return "bomb.png", b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
    im = Image.new(mode, (w, h))
    buf = io.BytesIO()
    try:
        im.save(buf, fmt)
    except (OSError, ValueError, KeyError):
        im.convert("RGB").save(buf, fmt)
    data = buf.getvalue()
    if kind == "truncated":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    return f"img.{kind if kind != 'truncated' else 'png'}", data


@st.composite
def calib_case(draw):
    files: dict[str, bytes] = {}
    kind = draw(st.sampled_from(["npy", "npz", "npy_folder", "image_folder", "image", "empty_folder", "mixed",
                                 "missing", "bad_npy", "nested", "synthetic"]))
    src = "data"
    if kind == "npy":
        src = "data.npy"
        files[src] = _npy_bytes(_array(draw))
    elif kind == "npz":
        src = "data.npz"
        keys = draw(st.lists(st.sampled_from(["x", "x", "wrong", "arr_0", "y"]), min_size=0, max_size=3,
                             unique=True))
        files[src] = _npz_bytes({k: _array(draw) for k in keys})
    elif kind in ("npy_folder", "nested"):
        for i in range(draw(st.integers(1, 4))):
            files[f"data/{'sub/' if kind == 'nested' and i else ''}{i}.npy"] = _npy_bytes(_array(draw))
    elif kind in ("image_folder", "mixed"):
        for i in range(draw(st.integers(1, 4))):
            name, data = _image_bytes(draw)
            files[f"data/{i}_{name}"] = data
        if kind == "mixed":
            files["data/z.npy"] = _npy_bytes(_array(draw))
    elif kind == "image":
        name, data = _image_bytes(draw)
        src = name
        files[src] = data
    elif kind == "empty_folder":
        files["data/.hidden"] = b"x"
        files["data/readme.txt"] = b"nothing here"
    elif kind == "bad_npy":
        data = bytearray(_npy_bytes(np.zeros((1, 3, 8, 8), np.float32)))
        how = draw(st.sampled_from(["truncate", "flip", "header", "bigshape"]))
        if how == "truncate":
            data = data[: draw(st.integers(0, len(data) - 1))]
        elif how == "flip":
            for _ in range(draw(st.integers(1, 4))):
                data[draw(st.integers(0, 127))] = draw(st.integers(0, 255))
        elif how == "header":
            data[10:30] = b"{'descr': '|O', 'for"
        else:
            data = bytearray(bytes(data).replace(b"(1, 3, 8, 8)", b"(10**12,)   "))
        src = "data.npy"
        files[src] = bytes(data)
    elif kind == "synthetic":
        src = "synthetic"
    config = {"source": src, "count": draw(st.sampled_from([1, 2, 3, 50])), "holdout": draw(st.sampled_from([0, 1, 2])),
              "resize": draw(st.sampled_from(["stretch", "letterbox", "center-crop"])),
              "layout": draw(st.sampled_from(["nchw", "nchw", "nhwc"])),
              "pixel_range": draw(st.sampled_from(["0-1", "0-255"]))}
    if draw(st.integers(0, 4)) == 4:
        config["mean"] = draw(st.sampled_from(["0.485,0.456,0.406", "0.5", "1,2", "nan,0,0", "x"]))
        config["std"] = draw(st.sampled_from(["0.229,0.224,0.225", "0", "0,0,0", "1e-45"]))
    return files, config


def test_fuzz_calibration_data(tmp_path):
    label = "calib/sources"

    @fuzz_settings(150)
    @given(calib_case())
    def check(case):
        files, config = case
        _run_target("calib", label, {"model.onnx": MODEL_BYTES, **files}, {"config": config})

    t = run_and_report(check, label)
    assert t.bad == 0 and t.ok > 0 and t.errors
