"""Horizon logs rendered in the real format for the small models of ``builders`` (tests never read
../shared): ``render_compile_log`` writes what ``hb_mapper makertbin`` prints for a model,
``render_model_info`` what ``hrt_model_exec model_info`` prints."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

_HZ_TYPE = {"Conv": "HzSQuantizedConv", "Relu": "HzLut", "Sigmoid": "HzLut", "Mul": "HzSElementwiseMul",
            "Add": "HzSElementwiseAdd", "MaxPool": "HzQuantizedMaxPool", "Resize": "HzQuantizedResizeUpsample",
            "GlobalAveragePool": "HzSQuantizedGlobalAveragePool", "MatMul": "HzSQuantizedMatmul"}
_STAMP = "2025-07-22 05:59:41,525 file: {file}.py func: {file} line No: {no} "


@dataclass
class LogSpec:
    """What the rendered log says beyond the model's own graph."""

    thresholds: dict[str, float] = field(default_factory=dict)
    """Tensor -> threshold; a row prints its first input's (default: 1.0 + 0.5 per tensor seen)."""
    requantize: tuple[str, ...] = ()
    """Tensors requantized, each printed as an HzRequantize row before its Concat consumer."""
    cosines: dict[str, float] = field(default_factory=dict)
    """Node -> cosine (default 0.99 - 0.001 per row)."""
    int16: tuple[str, ...] = ()
    """Nodes whose output DataType is int16."""
    cpu: tuple[str, ...] = ()
    """Nodes run on the CPU (printed with -- and float)."""
    input_shape: tuple[int, ...] | None = None
    """The shape model_deps_info prints (default: the model's)."""
    input_names: tuple[str, ...] | None = None
    estimate: tuple[float, float, int] = (1234.5, 810.1, 2682784)
    march: str = "bayes-e"
    rename: dict[str, str] = field(default_factory=dict)
    """Node -> the name the log prints instead (another model's log)."""


def _printed(name: str) -> str:
    return name if len(name) <= 50 else "..." + name[-47:]


def compile_log_rows(model: onnx.ModelProto, spec: LogSpec) -> list[tuple[str, str, str, str, str, str, str]]:
    """The node table's rows (name, ON, subgraph, type, cosine, threshold, dtype) as printed."""
    inits = {i.name for i in model.graph.initializer}
    inp = model.graph.input[0].name
    thr: dict[str, float] = dict(spec.thresholds)

    def threshold(t: str) -> float:
        if t not in thr:
            thr[t] = 1.0 + 0.5 * len(thr)
        return thr[t]

    rows = [(f"HZ_PREPROCESS_FOR_{inp}", "BPU", "id(0)", "HzSQuantizedPreprocess", "0.999761", "127.0", "int8")]
    for i, n in enumerate(model.graph.node):
        if n.op_type == "Concat":
            for t in n.input:
                if t in spec.requantize:
                    rows.append((_printed(t + "_calibrated_Requantize"), "BPU", "id(0)", "HzRequantize",
                                 "--", "--", "int8"))
        first = next(t for t in n.input if t and t not in inits)
        name = spec.rename.get(n.name, n.name)
        cos = f"{spec.cosines.get(n.name, 0.99 - 0.001 * i):.6f}"
        if n.name in spec.cpu:
            rows.append((_printed(name), "CPU", "--", n.op_type, cos, "--", "float"))
            continue
        rows.append((_printed(name), "BPU", "id(0)", _HZ_TYPE.get(n.op_type, n.op_type), cos,
                     f"{threshold(first):g}", "int16" if n.name in spec.int16 else "int8"))
    return rows


def render_compile_log(model: onnx.ModelProto, spec: LogSpec | None = None) -> str:
    """An ``hb_mapper makertbin`` log of ``model`` in the real layout."""
    spec = spec or LogSpec()
    g = model.graph
    inp = g.input[0]
    shape = spec.input_shape or tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
    names = spec.input_names or (inp.name,)
    rows = compile_log_rows(model, spec)
    w = max(len(r[0]) for r in rows) + 2
    head = ["Node".ljust(w) + "ON   Subgraph  Type                       Cosine Similarity  Threshold  DataType  "]
    body = [r[0].ljust(w) + r[1].ljust(5) + r[2].ljust(10) + r[3].ljust(27) + r[4].ljust(19) + r[5].ljust(11)
            + r[6].ljust(10) for r in rows]
    rule = len(head[0])
    fps, lat, ddr = spec.estimate
    deps = {"hb_mapper_version": "1.24.3", "hbdk_version": "3.49.15", "hbdk_runtime_version": " 3.15.55.0",
            "horizon_nn_version": "1.1.0", "onnx_model": "/mnt/disk/model.onnx", "march": spec.march,
            "layer_out_dump": False, "log_level": "DEBUG", "input_names": list(names),
            "input_type_rt": ["nv12"], "input_shape": ["x".join(str(d) for d in shape)], "input_batch": [],
            "cal_data_type": ["float32"], "preprocess_on": False, "calibration_type": "default",
            "per_channel": "False", "optimization": ["set_Softmax_input_int8,set_Softmax_output_int8"],
            "hbdk_params": {"hbdk_pass_through_params": "--O3 --debug --core-num 1 --fast --jobs 4 ",
                            "input-source": {names[0]: "pyramid", "_default_value": "ddr"}},
            "debug": True, "compile_mode": "latency"}
    outs = [o.name for o in g.output]
    lines = [
        _STAMP.format(file="hb_mapper", no=133) + "hbdk version 3.49.15",
        _STAMP.format(file="hb_mapper", no=135) + "hb_mapper version 1.24.3",
        _STAMP.format(file="onnx_parser", no=39) + f"Model input names: {list(names)}",
        _STAMP.format(file="tool_utils", no=326) + "consumed time 246.734",
        _STAMP.format(file="tool_utils", no=326)
        + f"FPS={fps}, latency = {lat} us, DDR = {ddr} bytes   (see main_graph_subgraph_0.html)",
        _STAMP.format(file="print_info_dict", no=72) + "The main quantized node information:",
        "=" * rule, *head, "-" * rule, *body,
        _STAMP.format(file="print_info_dict", no=72) + "The quantized model output:",
        "=" * 77,
        "Output      Cosine Similarity  L1 Distance  L2 Distance  Chebyshev Distance  ",
        "-" * 77,
        *[o.ljust(12) + "0.999551".ljust(19) + "0.346605".ljust(13) + "0.000683".ljust(13) + "3.646617" for o in outs],
        _STAMP.format(file="onnx2horizonrt", no=4326) + f"ONNX model output num : {len(outs)}",
        _STAMP.format(file="onnx2horizonrt", no=4060) + f"model_deps_info: {deps!r}",
        _STAMP.format(file="onnx2horizonrt", no=4184) + "hb_mapper version   : 1.24.3",
        _STAMP.format(file="hb_mapper_makertbin", no=784) + "End Model Convert",
    ]
    return "\n".join(lines) + "\n"


def render_model_info(model: onnx.ModelProto, layout: str = "NHWC") -> str:
    """``hrt_model_exec model_info`` of ``model`` compiled: float outputs in ``layout``."""
    g = model.graph
    shape = tuple(d.dim_value for d in g.input[0].type.tensor_type.shape.dim)
    size = 1
    for d in shape:
        size *= d
    lines = [f"hrt_model_exec model_info --model_file {g.name}.bin", "[BPU_PLAT]BPU Platform Version(1.3.6)!",
             "This model file has 1 model:", f"[{g.name}_bayese]", "-" * 69, f"[model name]: {g.name}_bayese", "",
             "input[0]: ", f"name: {g.input[0].name}", "input source: HB_DNN_INPUT_FROM_PYRAMID",
             f"valid shape: ({','.join(map(str, shape))},)", f"aligned shape: ({','.join(map(str, shape))},)",
             f"aligned byte size: {size // 2}", "tensor type: HB_DNN_IMG_TYPE_NV12",
             "tensor layout: HB_DNN_LAYOUT_NCHW", "quanti type: NONE", "stride: (0,0,0,0,)", ""]
    for i, o in enumerate(g.output):
        lines += [f"output[{i}]: ", f"name: {o.name}", "valid shape: (1,4,4,8,)", "aligned shape: (1,4,4,8,)",
                  "aligned byte size: 512", "tensor type: HB_DNN_TENSOR_TYPE_F32",
                  f"tensor layout: HB_DNN_LAYOUT_{layout}", "quanti type: NONE", "stride: (512,128,32,4,)", ""]
    return "\n".join(lines + ["-" * 69])
