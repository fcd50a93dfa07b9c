"""The bundled demo models, built in code with ``onnx.helper`` (deterministic weights).

* ``attention``: the multi-scale attention block from the motivating report.  k and v
  are each concatenated from 3x3, 7x7 and 9x9 window-conv branches whose output
  ranges differ by up to 6x; the 7x7 and 9x9 windows run on a coarser map and are
  upsampled into the Concat, so both Concats need two rescales on every march.
* ``yolo_neck``: a small YOLO-style neck: C2f-like split/concat blocks, an
  upsample + concat FPN path, and a detection head that concatenates box coordinates
  in pixels with sigmoid class scores (the Concat that must *not* be shared).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..base.fileio import atomic_write_bytes

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..base.fileio.paths import StrPath

# An ONNX attribute's value as onnx.helper.make_node takes it (an int, a float, a list of ints, ...).
AttrValue: TypeAlias = "int | float | str | Sequence[int] | Sequence[float]"

__all__ = ["build_attention_demo", "build_yolo_neck_demo", "demo_inputs", "write_demo", "demo_model_path",
           "DEMOS"]

OPSET = 17


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, name: str, arr: npt.ArrayLike) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(self, op: str, inputs: Iterable[str], name: str, **attrs: AttrValue) -> str:
        """A node with one output; its name."""
        return self.nodes_out(op, inputs, name, 1, **attrs)[0]

    def nodes_out(self, op: str, inputs: Iterable[str], name: str, n_out: int, **attrs: AttrValue) -> list[str]:
        """A node with ``n_out`` outputs; their names."""
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        node = helper.make_node(op, list(inputs), outs, name=name)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(attrs.items()))  # as make_node does
        self.nodes.append(node)
        return outs

    def conv(self, x: str, cin: int, cout: int, k: int, name: str, stride: int = 1, gain: float = 1.0,
             groups: int = 1, bias: float = 0.0) -> str:
        fan_in = cin // groups * k * k
        w = (self.rng.standard_normal((cout, cin // groups, k, k)) * (gain / np.sqrt(fan_in))).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.05 + bias).astype(np.float32)
        wn = self.const(f"{name}.weight", w)
        bn = self.const(f"{name}.bias", b)
        return self.node("Conv", [x, wn, bn], name, kernel_shape=[k, k], pads=[k // 2] * 4,
                         strides=[stride, stride], group=groups)

    def silu(self, x: str, name: str) -> str:
        s = self.node("Sigmoid", [x], f"{name}/act/Sigmoid")
        return self.node("Mul", [x, s], f"{name}/act/Mul")

    def conv_silu(self, x: str, cin: int, cout: int, k: int, name: str, stride: int = 1, gain: float = 1.0) -> str:
        return self.silu(self.conv(x, cin, cout, k, f"{name}/conv", stride, gain), name)

    def model(self, inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[onnx.ValueInfoProto], graph_name: str,
              doc: str) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qtquant-demo")
        m.ir_version = 8
        m.doc_string = doc
        onnx.checker.check_model(m)
        return m


def build_attention_demo(size: int = 64, dim: int = 32, seed: int = 7) -> onnx.ModelProto:
    """Multi-scale attention: q from a 1x1 conv, k/v each from Concat(3x3, 7x7, 9x9 window branches).

    The 3x3 window runs on the full-resolution feature map; the 7x7 and 9x9 windows run at
    stride 2 and 4 (a wide window on a coarser map, as pyramid attention does) and are brought
    back with a nearest Resize.  A Resize output is a view carrying its conv's scale, so every
    march requantizes it into the Concat when the scales differ: the X5 too, whose compiler
    writes only a directly computed input (the 3x3 conv here) at the Concat's scale.
    """
    b = _Builder(seed)
    x = "images"
    f = b.node("Relu", [b.conv(x, 3, dim, 3, "stem/conv1", stride=2, gain=2.0)], "stem/relu1")
    f = b.node("Relu", [b.conv(f, dim, dim, 3, "stem/conv2", stride=2, gain=1.6)], "stem/relu2")
    hw = (size // 4) ** 2
    bd = dim // 2  # channels per branch
    # Branch gains chosen so that the three window branches' ranges differ by up to ~6x, the
    # full-resolution 3x3 branch the widest.
    gains = {"k": {3: 4.0, 7: 1.3, 9: 0.65}, "v": {3: 3.0, 7: 1.8, 9: 0.78}}
    stride = {3: 1, 7: 2, 9: 4}
    branches = {}
    for kv in ("k", "v"):
        outs = []
        for k in (3, 7, 9):
            o = b.conv(f, dim, bd, k, f"attn/{kv}_proj/win{k}x{k}", stride=stride[k], gain=gains[kv][k])
            if stride[k] > 1:
                up = b.const(f"attn/{kv}_proj/up{k}x{k}/scales", np.array([1, 1, stride[k], stride[k]], np.float32))
                o = b.node("Resize", [o, "", up], f"attn/{kv}_proj/up{k}x{k}", mode="nearest")
            outs.append(o)
        branches[kv] = b.node("Concat", outs, f"attn/{kv}_cat", axis=1)
    c = 3 * bd
    q = b.conv(f, dim, c, 1, "attn/q_proj", gain=1.0)
    shp = b.const("attn/shape_tokens", np.array([1, c, hw], dtype=np.int64))
    qf = b.node("Reshape", [q, shp], "attn/q_flat")
    kf = b.node("Reshape", [branches["k"], shp], "attn/k_flat")
    vf = b.node("Reshape", [branches["v"], shp], "attn/v_flat")
    qt = b.node("Transpose", [qf], "attn/q_t", perm=[0, 2, 1])
    logits = b.node("MatMul", [qt, kf], "attn/qk")
    scaled = b.node("Mul", [logits, b.const("attn/scale", np.array(1.0 / np.sqrt(c), np.float32))], "attn/qk_scale")
    attn = b.node("Softmax", [scaled], "attn/softmax", axis=-1)
    vt = b.node("Transpose", [vf], "attn/v_t", perm=[0, 2, 1])
    o = b.node("MatMul", [attn, vt], "attn/av")
    ot = b.node("Transpose", [o], "attn/out_t", perm=[0, 2, 1])
    omap = b.node("Reshape", [ot, b.const("attn/shape_map", np.array([1, c, size // 4, size // 4], np.int64))],
                  "attn/out_map")
    y = b.conv(omap, c, dim, 1, "attn/out_proj")
    y = b.node("Add", [y, f], "attn/residual")
    b.nodes[-1].output[0] = "features"
    return b.model([helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, dim, size // 4, size // 4])],
                   "multiscale_attention",
                   "qtquant demo: multi-scale attention block (k, v from 3x3, 7x7/2 and 9x9/4 windows)")


def _c2f(b: _Builder, x: str, cin: int, cout: int, name: str, n: int = 1) -> str:
    y = b.conv_silu(x, cin, cout, 1, f"{name}/cv1")
    a, c = b.nodes_out("Split", [y, b.const(f"{name}/split_sizes", np.array([cout // 2, cout // 2], np.int64))],
                       f"{name}/Split", 2, axis=1)
    parts = [a, c]
    m = c
    for i in range(n):
        h = b.conv_silu(m, cout // 2, cout // 2, 3, f"{name}/m.{i}/cv1")
        h = b.conv_silu(h, cout // 2, cout // 2, 3, f"{name}/m.{i}/cv2", gain=1.5)
        m = b.node("Add", [m, h], f"{name}/m.{i}/Add")
        parts.append(m)
    cat = b.node("Concat", parts, f"{name}/Concat", axis=1)
    return b.conv_silu(cat, (2 + n) * cout // 2, cout, 1, f"{name}/cv2")


def build_yolo_neck_demo(size: int = 128, nc: int = 4, seed: int = 11) -> onnx.ModelProto:
    b = _Builder(seed)
    x = "images"
    h = b.conv_silu(x, 3, 16, 3, "model.0", stride=2, gain=2.0)  # /2
    h = b.conv_silu(h, 16, 32, 3, "model.1", stride=2)  # /4
    h = _c2f(b, h, 32, 32, "model.2")
    p3 = b.conv_silu(h, 32, 32, 3, "model.3", stride=2)  # /8
    p3 = _c2f(b, p3, 32, 32, "model.4")
    p4 = b.conv_silu(p3, 32, 64, 3, "model.5", stride=2)  # /16
    p4 = _c2f(b, p4, 64, 64, "model.6")
    # SPPF-like: chained max pools share the input's scale, so this Concat is free.
    s = b.conv_silu(p4, 64, 32, 1, "model.7/cv1")
    pools = [s]
    for i in range(3):
        pools.append(b.node("MaxPool", [pools[-1]], f"model.7/m_{i}", kernel_shape=[5, 5], pads=[2] * 4,
                            strides=[1, 1]))
    p4 = b.conv_silu(b.node("Concat", pools, "model.7/Concat", axis=1), 128, 64, 1, "model.7/cv2")
    up = b.node("Resize", [p4, "", b.const("model.8/scales", np.array([1, 1, 2, 2], np.float32))],
                "model.8/Resize", mode="nearest")
    fpn = b.node("Concat", [up, p3], "model.9/Concat", axis=1)
    n3 = _c2f(b, fpn, 96, 32, "model.10")
    d = b.conv_silu(n3, 32, 32, 3, "model.11", stride=2)
    pan = b.node("Concat", [d, p4], "model.12/Concat", axis=1)
    n4 = _c2f(b, pan, 96, 64, "model.13")
    boxes, scores = [], []
    for i, (feat, cin, stride) in enumerate(((n3, 32, 8), (n4, 64, 16))):
        g = size // stride
        bx = b.conv(b.conv_silu(feat, cin, 32, 3, f"model.14/cv2.{i}"), 32, 4, 1, f"model.14/cv2.{i}/box")
        # Decode to pixels: box values end up in [0, image size], scores in [0, 1].
        bx = b.node("Sigmoid", [bx], f"model.14/box_sig.{i}")
        bx = b.node("Mul", [bx, b.const(f"model.14/stride.{i}", np.array(float(size), np.float32))],
                    f"model.14/box_px.{i}")
        cl = b.conv(b.conv_silu(feat, cin, 32, 3, f"model.14/cv3.{i}"), 32, nc, 1, f"model.14/cv3.{i}/cls",
                    gain=3.0, bias=-1.0)
        cl = b.node("Sigmoid", [cl], f"model.14/cls_sig.{i}")
        shp4 = b.const(f"model.14/shape_box.{i}", np.array([1, 4, g * g], np.int64))
        shpc = b.const(f"model.14/shape_cls.{i}", np.array([1, nc, g * g], np.int64))
        boxes.append(b.node("Reshape", [bx, shp4], f"model.14/box_flat.{i}"))
        scores.append(b.node("Reshape", [cl, shpc], f"model.14/cls_flat.{i}"))
    allb = b.node("Concat", boxes, "model.14/boxes_cat", axis=2)
    alls = b.node("Concat", scores, "model.14/scores_cat", axis=2)
    b.node("Concat", [allb, alls], "model.14/head_cat", axis=1)
    b.nodes[-1].output[0] = "output0"
    n = (size // 8) ** 2 + (size // 16) ** 2
    return b.model([helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + nc, n])],
                   "yolo_neck", "qtquant demo: YOLO-style neck with C2f blocks, FPN and a box+score head")


DEMOS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "attention": (build_attention_demo, "multiscale_attention.onnx"),
    "yolo_neck": (build_yolo_neck_demo, "yolo_neck.onnx"),
}


def demo_inputs(model: onnx.ModelProto, count: int = 16, seed: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """Image-like calibration samples in [0, 1]: smooth gradients plus texture, deterministic."""
    rng = np.random.default_rng(seed)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    _, c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for _ in range(count):
        img = np.empty((1, c, h, w), np.float32)
        for ch in range(c):
            fx, fy, ph = rng.uniform(0.5, 4.0), rng.uniform(0.5, 4.0), rng.uniform(0, 6.28)
            base = 0.5 + 0.35 * np.sin(fx * xx / w * 6.28 + ph) * np.cos(fy * yy / h * 6.28)
            img[0, ch] = np.clip(base + rng.normal(0, 0.08, (h, w)), 0, 1)
        yield {inp.name: img}


def _atomic_save(model: onnx.ModelProto, path: Path) -> None:
    atomic_write_bytes(path, model.SerializeToString())


def write_demo(out_dir: StrPath, count: int = 16) -> dict[str, Path]:
    """Write both demo models and a folder of ``.npz`` calibration samples for each."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for key, (build, fname) in DEMOS.items():
        m = build()
        _atomic_save(m, out / fname)
        cdir = out / f"{Path(fname).stem}_calib"
        cdir.mkdir(exist_ok=True)
        for i, feed in enumerate(demo_inputs(m, count)):
            np.savez(cdir / f"sample_{i:03d}.npz", allow_pickle=False, **feed)
        for old in cdir.glob("sample_*.npz"):  # an earlier, larger --count's: they would be calibrated on too
            k = old.stem[len("sample_"):]
            if k.isdigit() and int(k) >= count:
                old.unlink()
        written[key] = out / fname
    return written


def demo_model_path(which: str = "attention") -> Path:
    """The demo model in a per-user cache folder, written on first use and rewritten when the
    cached file is not the model this code builds (an older demo under the same version)."""
    from .. import __version__

    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qtquant" / f"demo-{__version__}"
    build, fname = DEMOS[which]
    p = base / fname
    data = build().SerializeToString()
    if not p.exists() or p.read_bytes() != data:
        base.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(p, data)
    return p
