"""The board estimate: what one inference costs on the board, one thread, beyond the BPU's static estimate.

The compiler's static estimate (``latency = … us`` in an hb_mapper log) is the BPU part only. The board's
one-thread latency (``hrt_model_exec perf``, what D-Robotics' model zoo calls "ideal single-frame latency")
adds what the runtime does on the CPU for each inference, from the model's inputs and outputs:

- a fixed cost per call (``board_call_us``: submitting the task, waiting for it, cache maintenance);
- each **output** element dequantised from int8 to float32 on the CPU (``hrt_model_exec model_info`` shows
  every output of an X5 ``.bin`` as ``HB_DNN_TENSOR_TYPE_F32``), at ``board_ns_per_element``;
- an **image input** (4-D, 3 channels) arrives as NV12 from the camera pyramid and is converted by the
  compiled model's own preprocess node on the BPU (part of the static estimate): nothing on the CPU;
  any other input is a float32 feature map quantised on the CPU, at the same per-element rate.

- an output the application dequantises itself (``int_outputs``: the compiled model's Dequantize node
  removed, ``hb_model_modifier -r``, as the zoo's YOLO demos do for their box heads) leaves the BPU as int32
  with its scales: nothing on the CPU.

The BPU part runs at the board's BPU clock (``board_bpu_ghz``; the zoo measures its figures with the X5's
BPU at 1.2 GHz, where the compiler's static estimate assumes ``frequency_ghz``): a layer's compute, vector,
on-chip and per-op terms shrink by the ratio, its DDR time does not (:func:`board_layer_us`).

It is not application pre/post-processing (decoding boxes, NMS, resizing a photo): no public figure
includes that, and it depends on the application.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import BadInputError
from .macs import numel, shape_of

__all__ = ["BoardIo", "board_io", "board_cpu_us", "board_layer_us", "is_image"]


@dataclass(frozen=True)
class BoardIo:
    tensor: str
    elems: int
    on_cpu: bool  # converted by the CPU (False: an NV12 image the BPU converts)
    what: str
    output: bool = False  # a model output (else an input)
    app_dequantises: bool = False  # an int32 output the application dequantises (int_outputs)

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "elements": self.elems, "on_cpu": self.on_cpu, "what": self.what,
                "output": self.output}


def is_image(shape) -> bool:
    """A 4-D input of 3 channels: a camera frame, which a Horizon deployment feeds as NV12."""
    return shape is not None and len(shape) == 4 and (shape[1] == 3 or shape[-1] == 3)


def board_io(graph, int_outputs=frozenset()) -> tuple[BoardIo, ...]:
    """The model's inputs and outputs as the runtime handles them on the board (``int_outputs``: outputs
    delivered as integers with their scales, which the application dequantises)."""
    unknown = sorted(set(int_outputs) - set(graph.outputs))
    if unknown:
        raise BadInputError(f"{unknown[0]!r} is not an output of the model, so it cannot be an int output "
                            f"(outputs: {', '.join(graph.outputs)})")
    out = []
    for t in graph.inputs:
        s = shape_of(graph, t)
        if is_image(s):
            out.append(BoardIo(t, numel(s), False, "NV12 image input, converted on the BPU (in the static estimate)"))
        else:
            out.append(BoardIo(t, numel(s), True, "float32 input, quantised on the CPU"))
    for t in graph.outputs:
        if t in int_outputs:
            out.append(BoardIo(t, numel(shape_of(graph, t)), False,
                               "int32 output with its scales (Dequantize removed), dequantised by the application",
                               output=True, app_dequantises=True))
        else:
            out.append(BoardIo(t, numel(shape_of(graph, t)), True, "output dequantised to float32 on the CPU",
                               output=True))
    return tuple(out)


def board_cpu_us(ios, march) -> float:
    """µs the runtime adds on the CPU to one inference: the call, and each element it converts."""
    elems = sum(io.elems for io in ios if io.on_cpu)
    return march.board_call_us + march.board_ns_per_element * elems / 1000.0


def board_layer_us(lc, march) -> float:
    """µs one BPU layer takes at the board's BPU clock: compute, vector, on-chip and per-op time scale with
    the clock, DDR time (activations and weights) does not."""
    r = march.board_clock_ratio
    if r == 1.0 or lc.total_us <= 0:
        return lc.total_us
    ddr = ((lc.ddr_bytes - lc.weight_bytes) / march.ddr_bytes_per_s + lc.weight_bytes / march.weight_bytes_per_s) * 1e6
    onchip = max(lc.memory_us - ddr, 0.0)
    return max(lc.compute_us / r, ddr + onchip / r) + lc.overhead_us / r
