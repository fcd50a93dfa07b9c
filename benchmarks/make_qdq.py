"""Make a QDQ copy of a float model with onnxruntime's quantize_static (the reference quantizer).

Int8 symmetric activations, int8 symmetric per-channel weights, MinMax, QDQ format, on the very
samples qtquant would calibrate on (same data source, preprocessing, seed, count and holdout), so
figures from both tools compare like for like.

usage: python benchmarks/make_qdq.py MODEL -o OUT.onnx [--input-shape images=1x3x320x320]
           [--calib DIR|synthetic] [--calib-count N] [--mean R,G,B --std R,G,B] [--overrides O.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qtquant.calib.engine import split_samples  # noqa: E402
from qtquant.calib.sources import open_source  # noqa: E402
from qtquant.cli.common import add_common, calib_config_from_args  # noqa: E402
from qtquant.model.graph import load_graph  # noqa: E402
from qtquant.model.runtime import input_specs  # noqa: E402


def calibration_feeds(graph, config):
    """(calibration feeds, holdout feeds): exactly the split qtquant's calibrate() uses."""
    source = open_source(input_specs(graph), config)
    calib_refs, hold_refs, _ = split_samples(source.refs, config)
    calib = [feed for _, feed in source.feeds(source.load_order(calib_refs))]
    hold = [feed for _, feed in source.feeds(hold_refs)]
    return calib, hold


def make_qdq(model_path, out_path, input_shapes, config, overrides=None) -> dict:
    """Quantize ``model_path`` into ``out_path``; returns timing and sample counts."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    graph = load_graph(model_path, input_shapes)
    calib, _ = calibration_feeds(graph, config)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    extra = {"ActivationSymmetric": True, "WeightSymmetric": True}
    if overrides:
        extra["TensorQuantOverrides"] = overrides
    with tempfile.TemporaryDirectory(prefix="qtquant-mkqdq-") as tmp:
        # The shape-fixed float model (dynamic dims resolved as qtquant resolves them).
        m = onnx.load(str(model_path))
        fixed = Path(tmp) / "float.onnx"
        g = load_graph(model_path, input_shapes, ort_fallback=False)
        for i in m.graph.input:
            if i.name in g.input_shapes:
                for d, v in zip(i.type.tensor_type.shape.dim, g.input_shapes[i.name]):
                    d.Clear()
                    d.dim_value = int(v)
        onnx.save(m, str(fixed))
        t0 = time.perf_counter()
        quantize_static(str(fixed), str(out_path), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                        calibrate_method=CalibrationMethod.MinMax, extra_options=extra)
        secs = time.perf_counter() - t0
    return {"seconds": secs, "calibration_samples": len(calib)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common(p)
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--overrides", default=None, help="TensorQuantOverrides JSON written by qtquant fix")
    args = p.parse_args(argv)
    cfg = calib_config_from_args(args)
    ov = None
    if args.overrides:
        from qtquant.export.overrides import load_overrides

        ov = load_overrides(args.overrides)
    info = make_qdq(args.model, args.output, args.input_shape, cfg, ov)
    print(f"wrote {args.output}: onnxruntime quantize_static (QDQ, MinMax, int8 symmetric, per-channel weights) "
          f"on {info['calibration_samples']} samples in {info['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
