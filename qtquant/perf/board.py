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

It is not application pre/post-processing (decoding boxes, NMS, resizing a photo): no public figure
includes that, and it depends on the application.
"""

from __future__ import annotations

from dataclasses import dataclass

from .macs import numel, shape_of

__all__ = ["BoardIo", "board_io", "board_cpu_us", "is_image"]


@dataclass(frozen=True)
class BoardIo:
    tensor: str
    elems: int
    on_cpu: bool  # converted by the CPU (False: an NV12 image the BPU converts)
    what: str

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "elements": self.elems, "on_cpu": self.on_cpu, "what": self.what}


def is_image(shape) -> bool:
    """A 4-D input of 3 channels: a camera frame, which a Horizon deployment feeds as NV12."""
    return shape is not None and len(shape) == 4 and (shape[1] == 3 or shape[-1] == 3)


def board_io(graph) -> tuple[BoardIo, ...]:
    """The model's inputs and outputs as the runtime handles them on the board."""
    out = []
    for t in graph.inputs:
        s = shape_of(graph, t)
        if is_image(s):
            out.append(BoardIo(t, numel(s), False, "NV12 image input, converted on the BPU (in the static estimate)"))
        else:
            out.append(BoardIo(t, numel(s), True, "float32 input, quantised on the CPU"))
    for t in graph.outputs:
        out.append(BoardIo(t, numel(shape_of(graph, t)), True, "output dequantised to float32 on the CPU"))
    return tuple(out)


def board_cpu_us(ios, march) -> float:
    """µs the runtime adds on the CPU to one inference: the call, and each element it converts."""
    elems = sum(io.elems for io in ios if io.on_cpu)
    return march.board_call_us + march.board_ns_per_element * elems / 1000.0
