"""The host CPU's int8 path in onnxruntime, and the session settings that make it exact.

The BPU (and a VNNI or ARM CPU) accumulates int8 products exactly in int32.  onnxruntime's default
x64 kernels on a CPU without VNNI (AVX2, AVX-512 without VNNI, SSE4.1) multiply u8×s8 pairs with
``vpmaddubsw``, which adds each pair of products in a *saturating* 16-bit lane: 255·127 + 255·127
overflows, so the same exported file computes other numbers there (a Softmax test model: 14.5 dB
against 33.6 dB exact).  The session config entry ``session.x64quantprecision=1`` makes onnxruntime
convert those s8 weights to u8 (only weights holding a value outside [-64, 64], the ones that can
overflow) and use its u8u8 kernels, which widen to 16 bits before multiplying: exact, and onnxruntime's
fused int8 kernels stay in use.  On a CPU whose default is exact already the entry does nothing.

What this host does is *measured*, not inferred from CPUID names: :func:`host_int8_path` runs a
small convolution built to saturate a u8×s8 pair path, once with default options and once with the
entry, against Q/DQ evaluated in float.  (Under an emulator the CPUID the process sees and the
kernels onnxruntime picks agree; /proc/cpuinfo may describe the host instead.)  The instruction set
named in reports comes from numpy's view of CPUID.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Int8Path", "host_int8_path", "EXACT_INT8_ENTRY"]

# (key, value) of the session config entry every qtquant session carries.
EXACT_INT8_ENTRY = ("session.x64quantprecision", "1")


@dataclass(frozen=True)
class Int8Path:
    isa: str  # the instruction set onnxruntime's int8 kernels can use here: "AVX2", "AVX-512 VNNI", "ARM64 dot product"
    default_exact: bool  # onnxruntime's default options accumulate u8×s8 products exactly on this host
    entry_exact: bool  # with EXACT_INT8_ENTRY they do (False only on a CPU the entry does not cover)

    @property
    def kernels_text(self) -> str:
        """The int8 path of qtquant's sessions, for the report's runtime line."""
        if not self.entry_exact:
            return (f"int8 on {self.isa}: onnxruntime's fused int8 kernels saturate here even in precision mode, "
                    "so Q/DQ runs in float (exact integer values)")
        if self.default_exact:
            return f"int8 on {self.isa}: exact int32 accumulation (onnxruntime's default kernels are exact here)"
        return (f"int8 on {self.isa}: exact int32 accumulation ({EXACT_INT8_ENTRY[0]}={EXACT_INT8_ENTRY[1]}: "
                "u8u8 kernels; the default u8s8 ones saturate 16-bit pairs on this CPU)")


def _isa() -> str:
    f: dict[str, bool]
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as f  # type: ignore[import-not-found,no-redef]  # numpy's private module: no stub
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_features__ as f  # type: ignore[no-redef]
    machine = platform.machine().lower()
    if f.get("ASIMD") or machine in ("arm64", "aarch64"):
        return "ARM64 dot product" if f.get("ASIMDDP") else "ARM64 NEON"
    for key, name in (("AVX512VNNI", "AVX-512 VNNI"), ("AVX512BW", "AVX-512 without VNNI"),
                      ("AVX2", "AVX2"), ("SSE41", "SSE4.1")):
        if f.get(key):
            return name
    return machine or "unknown CPU"


def _saturating_probe() -> tuple[bytes, dict[str, npt.NDArray[np.float32]]]:
    """A QDQ Conv whose u8×s8 pairs overflow 16 bits in a saturating kernel, and its input.

    Every activation is 1.0 (int8 127; 255 once onnxruntime shifts activations to u8) and every
    weight ±1.0 (int8 ±127), so adjacent products reach ±32385 and a pair ±64770."""
    from onnx import TensorProto, helper, numpy_helper

    c = 16
    w = np.where(np.arange(8 * c).reshape(8, c, 1, 1) % 3 == 0, -127, 127).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(1 / 127, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(64 / 127, np.float32), "so")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "so", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "so", "z"], ["y"])]
    graph = helper.make_graph(nodes, "int8_probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return bytes(model.SerializeToString()), {"x": np.ones((1, c, 4, 4), np.float32)}


@functools.lru_cache(maxsize=1)
def host_int8_path() -> Int8Path:
    """This host's int8 path, measured once per process (three sessions of a 6-node model)."""
    import onnxruntime as ort

    data, feed = _saturating_probe()

    def run(entry: bool, optimise: bool) -> npt.NDArray[np.float32]:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        if entry:
            so.add_session_config_entry(*EXACT_INT8_ENTRY)
        if not optimise:  # Q/DQ evaluated in float: the exact integer result
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        out: npt.NDArray[np.float32] = sess.run(None, feed)[0]
        return out

    exact = run(False, False)
    return Int8Path(_isa(), bool(np.array_equal(run(False, True), exact)), bool(np.array_equal(run(True, True), exact)))
