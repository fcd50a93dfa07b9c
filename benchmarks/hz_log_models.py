"""Build the graphs of the eight shared compile logs for ``hz_requantize_blind.py``, named as the logs
name their nodes: Ultralytics architectures at 640 with random weights, cut where the RDK X5
deployments cut them (the Detect head's per-scale box/class convs, plus the
mask-coefficient / keypoint convs and the proto output of seg / pose models); classifiers
(``*-cls``) at 224, cut at the Classify head's Linear (its Softmax runs on the CPU).

Runs in a benchmark venv that has ``ultralytics`` and ``onnx`` (it pulls torch; qtquant's own
venv keeps its pinned torch)::

    python3 -m venv /tmp/perffit-venv && /tmp/perffit-venv/bin/pip install ultralytics onnx
    /tmp/perffit-venv/bin/python benchmarks/hz_log_models.py OUT_DIR yolov8n yolov9t ...

Each model becomes ``OUT_DIR/<name>_<size>_cut.onnx``; an existing file is kept.  The cut is
``onnx.utils.extract_model`` from the graph input to the tensors found by name: the same
subgraph ``qtquant ... --cut T1,T2,...`` gives.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

# The head convs the zoo's X5 graphs end at: /model.N/cv{2,3,4}.{i}/cv{2,3,4}.{i}.2/Conv.
HEAD = re.compile(r"^/model\.(\d+)/cv([234])\.(\d+)/cv\2\.\3\.2/Conv$")
PROTO = re.compile(r"^/model\.(\d+)/proto/cv3/act/Mul$")  # the seg models' prototype masks
# Exported without onnxslim: it merges YOLO12's area-attention Reshape/Transpose pairs and renames
# the Reshapes it keeps, where the zoo's graph (its compile log's node names) still has them.
UNSIMPLIFIED = ("yolo12",)
# A classifier's logits: the X5 graph ends at the Classify head's Linear (the Softmax runs on the CPU).
LOGITS = re.compile(r"^/model\.(\d+)/linear/Gemm$")


def cut_outputs(model) -> list[str]:
    """Output tensors of the head convs (and the proto, or a classifier's logits), in graph order."""
    return [n.output[0] for n in model.graph.node if HEAD.match(n.name) or PROTO.match(n.name) or LOGITS.match(n.name)]


def zoo_head_names(model, head: str) -> None:
    """Name a YOLOv10 head's modules as the zoo's export did: the Ultralytics it used named the
    end-to-end head's convs ``one2one_cv2``/``one2one_cv3`` (the X5 log prints
    ``/model.23/one2one_cv2.0/one2one_cv2.0.0/conv/Conv``); 8.4 exports the same convs as ``cv2``/``cv3``."""
    part = re.compile(r"(?<=/)(cv[23]\.)")

    def zoo(name: str) -> str:
        return part.sub(r"one2one_\1", name) if name.startswith(head) else name

    g = model.graph
    for n in g.node:
        n.name = zoo(n.name)
        n.input[:] = [zoo(t) for t in n.input]
        n.output[:] = [zoo(t) for t in n.output]
    for v in (*g.output, *g.value_info):
        v.name = zoo(v.name)


def build_torchvision(name: str, out_dir: Path, size: int = 224) -> Path:
    """A torchvision classifier (random weights) at ``size``: the board figures' networks that
    tests/builders.py does not build (EfficientNet-B2)."""
    import torch
    import torchvision

    dst = out_dir / f"{name}_{size}.onnx"
    if dst.is_file():
        return dst
    net = getattr(torchvision.models, name)(weights=None)
    net.train(False)  # inference mode (BatchNorm running statistics)
    torch.onnx.export(net, torch.zeros(1, 3, size, size), str(dst), opset_version=13, input_names=["input"],
                      output_names=["logits"], dynamo=False)
    print(f"{dst}: {name} at {size}")
    return dst


def build(name: str, out_dir: Path) -> Path:
    if not name.startswith("yolo"):
        return build_torchvision(name, out_dir)
    import onnx
    import onnx.utils
    from ultralytics import YOLO

    size = 224 if name.endswith("-cls") else 640  # the zoo compiles its classifiers at 224
    dst = out_dir / f"{name}_{size}_cut.onnx"
    if dst.is_file():
        return dst
    with tempfile.TemporaryDirectory() as tmp:
        y = YOLO(f"{name}.yaml")  # the architecture only: random weights, nothing downloaded
        cwd = os.getcwd()
        os.chdir(tmp)  # the export writes its file beside the working directory
        try:
            full = Path(tmp, y.export(format="onnx", imgsz=size, opset=11, simplify=not name.startswith(UNSIMPLIFIED),
                                      dynamic=False, project=tmp))
        finally:
            os.chdir(cwd)
        m = onnx.load(str(full))
        outs = cut_outputs(m)
        if not outs:
            raise SystemExit(f"{name}: no Detect head convs found to cut at")
        inp = [i.name for i in m.graph.input]
        onnx.utils.extract_model(str(full), str(dst), inp, outs)
        if name.startswith("yolov10"):
            cut = onnx.load(str(dst))
            head = next(h.group(1) for n in m.graph.node if (h := HEAD.match(n.name)))
            zoo_head_names(cut, f"/model.{head}/")
            onnx.save(cut, str(dst))
            outs = [o.name for o in cut.graph.output]
    print(f"{dst}: cut at {len(outs)} tensors: {', '.join(outs)}")
    return dst


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: perf_fit_models.py OUT_DIR MODEL... (in a venv with ultralytics: see this file)")
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in argv[1:]:
        build(name, out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
