"""Build the graphs ``perf_fit.py`` prices, as they are deployed on RDK X5, with random weights.

- Ultralytics architectures (``yolov8n``, ``yolo11n``, ``yolov8n-seg``, ...) at 640, cut where the RDK X5
  deployments cut them (the Detect head's per-scale box/class convs, YOLOv10's one-to-one head convs, plus
  the mask-coefficient convs and the proto output of seg models); ``yolov8n-cls`` at 224, cut at its
  classifier's Gemm (the zoo's log ends there, the Softmax is not in the graph).
- The attention blocks of YOLOv10 (PSA), YOLO11 (C2PSA) and YOLO12 (area attention) scale the product
  q^T·k, as the zoo's graphs do (their compile logs list ``/attn/Mul`` between ``MatMul`` and
  ``ReduceMax``, reading the MatMul's output); Ultralytics 8.4 scales q before the product instead, which
  would leave two passes over each attention matrix out of the priced graph (``_scale_the_product``).
- ``timm`` classifiers (``resnet18``, ``mobileone_s0``, ``repvgg_a0``, ``edgenext_small``, ...) at 224,
  re-parameterised first where the architecture has training-time branches (MobileOne, RepVGG, FastViT...:
  ``timm.utils.reparameterize_model``), as they are deployed; ``googlenet`` from torchvision.

Runs in a benchmark venv with torch, torchvision, timm, ultralytics and onnx (qtquant's own venv keeps
its pinned torch)::

    python3 -m venv /tmp/perffit-venv
    /tmp/perffit-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 && \
        /tmp/perffit-venv/bin/pip install timm ultralytics onnx onnxslim
    /tmp/perffit-venv/bin/python benchmarks/perf_fit_models.py OUT_DIR yolov8n resnet18 ...

Each model becomes ``OUT_DIR/<name>.onnx`` (opset 11, as the zoo exports them); an existing file is kept.
A cut is ``onnx.utils.extract_model`` from the graph input to the tensors found by name: the same
subgraph ``qtquant ... --cut T1,T2,...`` gives.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tempfile
from pathlib import Path

# The head convs the zoo's X5 graphs end at: /model.N/cv{2,3,4}.{i}/cv{2,3,4}.{i}.2/Conv (YOLOv10:
# /model.N/one2one_cv{2,3}.{i}/one2one_cv{2,3}.{i}.2/Conv).
HEAD = re.compile(r"^/model\.(\d+)/((?:one2one_)?)cv([234])\.(\d+)/\2cv\3\.\4\.2/Conv$")
PROTO = re.compile(r"^/model\.(\d+)/proto/cv3/act/Mul$")  # the seg models' prototype masks
CLS_HEAD = re.compile(r"^/model\.(\d+)/linear/Gemm$")  # yolov8n-cls: the log ends at the Gemm
OPSET = 11


def cut_outputs(model) -> list[str]:
    """Output tensors of the head convs (and the proto, or a classifier's Gemm), in graph order."""
    return [n.output[0] for n in model.graph.node if HEAD.match(n.name) or PROTO.match(n.name)
            or CLS_HEAD.match(n.name)]


def _export(net, dst: Path, size: int) -> None:
    import torch

    net.train(False)  # inference mode (BatchNorm running statistics)
    with torch.no_grad():
        torch.onnx.export(net, torch.zeros(1, 3, size, size), str(dst), opset_version=OPSET, input_names=["input"],
                          output_names=["logits"], dynamo=False)


def build_classifier(name: str, out_dir: Path, size: int = 224) -> Path:
    dst = out_dir / f"{name}.onnx"
    if dst.is_file():
        return dst
    if name == "googlenet":
        import torchvision

        net = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)
    else:
        import timm
        from timm.utils.model import reparameterize_model

        if name == "repvgg_b1g2":  # RepVGG-B1g2 (the paper's): B1g4's blocks with groups=2; timm has no entry
            from timm.models.byobnet import ByobNet, _rep_vgg_bcfg, model_cfgs

            cfg = dataclasses.replace(model_cfgs["repvgg_b1g4"], blocks=_rep_vgg_bcfg(wf=(2., 2., 2., 4.), groups=2))
            net = ByobNet(cfg)
        else:
            net = timm.create_model(name, pretrained=False)
        net.train(False)
        net = reparameterize_model(net)  # training-time branches folded, as deployed (no-op elsewhere)
    _export(net, dst, size)
    print(f"{dst}: {name} at {size}")
    return dst


def _scale_the_product() -> None:
    """Ultralytics' Attention and AAttn as the zoo's graphs have them: softmax((q^T k) * scale), not
    softmax((q * scale)^T k) (the same numbers; a different graph)."""
    import torch.nn.functional as F  # noqa: F401 - the patched forwards' module namespace
    from ultralytics.nn.modules import block

    def attention(self, x):
        B, C, H, W = x.shape
        N = H * W
        q, k, v = self.qkv(x).view(B, self.num_heads, self.key_dim * 2 + self.head_dim, N).split(
            [self.key_dim, self.key_dim, self.head_dim], dim=2)
        attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).view(B, C, H, W) + self.pe(v.reshape(B, C, H, W))
        return self.proj(x)

    def area_attention(self, x):
        B, _, H, W = x.shape
        N = H * W
        qkv = self.qkv(x).flatten(2).transpose(1, 2)
        if self.area > 1:
            qkv = qkv.reshape(B * self.area, N // self.area, self.all_head_dim * 3)
            B, N, _ = qkv.shape
        q, k, v = (qkv.view(B, N, self.num_heads, self.head_dim * 3).permute(0, 2, 3, 1)
                   .split([self.head_dim, self.head_dim, self.head_dim], dim=2))
        attn = ((q.transpose(-2, -1) @ k) * (self.head_dim**-0.5)).softmax(dim=-1)
        x = (v @ attn.transpose(-2, -1)).permute(0, 3, 1, 2)
        v = v.permute(0, 3, 1, 2)
        if self.area > 1:
            x = x.reshape(B // self.area, N * self.area, self.all_head_dim)
            v = v.reshape(B // self.area, N * self.area, self.all_head_dim)
            B, N, _ = x.shape
        x = x.reshape(B, H, W, self.all_head_dim).permute(0, 3, 1, 2).contiguous()
        v = v.reshape(B, H, W, self.all_head_dim).permute(0, 3, 1, 2).contiguous()
        return self.proj(x + self.pe(v))

    block.Attention.forward = attention
    block.AAttn.forward = area_attention


def build_ultralytics(name: str, out_dir: Path) -> Path:
    import onnx
    import onnx.utils
    from ultralytics import YOLO

    dst = out_dir / f"{name}.onnx"
    if dst.is_file():
        return dst
    size = 224 if name.endswith("-cls") else 640
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the exporter writes next to the model file: the working directory
        try:
            _scale_the_product()
            y = YOLO(f"{name}.yaml")  # the architecture only: random weights, nothing downloaded
            full = Path(y.export(format="onnx", imgsz=size, opset=OPSET, simplify=True, dynamic=False)).resolve()
            m = onnx.load(str(full))
            outs = cut_outputs(m)
            if not outs:
                raise SystemExit(f"{name}: no head convs found to cut at")
            inp = [i.name for i in m.graph.input]
            onnx.utils.extract_model(str(full), str(dst), inp, outs)
        finally:
            os.chdir(here)
    print(f"{dst}: cut at {len(outs)} tensors: {', '.join(outs)}")
    return dst


def build(name: str, out_dir: Path) -> Path:
    return build_ultralytics(name, out_dir) if name.startswith("yolo") else build_classifier(name, out_dir)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: perf_fit_models.py OUT_DIR MODEL... (in a venv with timm and ultralytics: "
                         "see this file)")
    out_dir = Path(argv[0]).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in argv[1:]:
        try:
            build(name, out_dir)
        except Exception as e:  # noqa: BLE001 - one model failing must not stop the others
            failed.append(name)
            print(f"{name}: not built: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
