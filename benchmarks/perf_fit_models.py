"""Build the graphs ``perf_fit.py`` prices: Ultralytics architectures at 640 with random weights,
cut where the RDK X5 deployments cut them (the Detect head's per-scale box/class convs, plus the
mask-coefficient / keypoint convs and the proto output of seg / pose models).

Runs in a benchmark venv that has ``ultralytics`` and ``onnx`` (it pulls torch; qtquant's own
venv keeps its pinned torch)::

    python3 -m venv /tmp/perffit-venv && /tmp/perffit-venv/bin/pip install ultralytics onnx
    /tmp/perffit-venv/bin/python benchmarks/perf_fit_models.py OUT_DIR yolov8n yolov9t ...

Each model becomes ``OUT_DIR/<name>_640_cut.onnx``; an existing file is kept.  The cut is
``onnx.utils.extract_model`` from the graph input to the tensors found by name: the same
subgraph ``qtquant ... --cut T1,T2,...`` gives.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

# The head convs the zoo's X5 graphs end at: /model.N/cv{2,3,4}.{i}/cv{2,3,4}.{i}.2/Conv.
HEAD = re.compile(r"^/model\.(\d+)/cv([234])\.(\d+)/cv\2\.\3\.2/Conv$")
PROTO = re.compile(r"^/model\.(\d+)/proto/cv3/act/Mul$")  # the seg models' prototype masks


def cut_outputs(model) -> list[str]:
    """Output tensors of the head convs (and the proto), in graph order."""
    outs = []
    for n in model.graph.node:
        if HEAD.match(n.name) or PROTO.match(n.name):
            outs.append(n.output[0])
    return outs


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

    dst = out_dir / f"{name}_640_cut.onnx"
    if dst.is_file():
        return dst
    with tempfile.TemporaryDirectory() as tmp:
        y = YOLO(f"{name}.yaml")  # the architecture only: random weights, nothing downloaded
        full = Path(y.export(format="onnx", imgsz=640, opset=11, simplify=True, dynamic=False, project=tmp))
        m = onnx.load(str(full))
        outs = cut_outputs(m)
        if not outs:
            raise SystemExit(f"{name}: no Detect head convs found to cut at")
        inp = [i.name for i in m.graph.input]
        onnx.utils.extract_model(str(full), str(dst), inp, outs)
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
