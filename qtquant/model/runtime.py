"""onnxruntime sessions over a :class:`~qtquant.model.graph.Graph`.

All inference in qtquant goes through here: calibration, shape fallback and fidelity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt
import onnx

from ..base.errors import ModelError, first_line
from .int8path import EXACT_INT8_ENTRY, host_int8_path

if TYPE_CHECKING:
    from .graphmodel import Graph

__all__ = ["make_session", "ort_session", "run_with_outputs", "zeros_feed", "with_outputs", "input_specs",
           "has_external_data", "OrtSession"]

# onnxruntime ships no type information: its sessions and options are Any to the checker.
OrtSession: TypeAlias = Any
"""An ``onnxruntime.InferenceSession``."""
OrtOptions: TypeAlias = Any
"""An ``onnxruntime.SessionOptions``."""

def with_outputs(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names`` (in that order, after the originals)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    vi = {v.name: v for v in m.graph.value_info}
    for n in names:
        if n in have:
            continue
        if n in vi:
            m.graph.output.append(vi[n])
        else:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
        have.add(n)
    return m


def quiet_options(exact_int8: bool = True) -> OrtOptions:
    """onnxruntime session options that log nothing short of a fatal error: whatever it refuses
    or fails at reaches the user as qtquant's own one-line message (its exception, read by
    :func:`ort_session` or the caller), and its own log lines on stderr would only repeat it
    around that line (an Expand with a bad shape: three).

    ``exact_int8``: int8 products accumulate exactly, as the target's do: where this CPU's default
    kernels saturate, with :data:`~qtquant.model.int8path.EXACT_INT8_ENTRY` (:mod:`qtquant.model.int8path`).
    Only there: on an AVX-512 VNNI CPU the entry would still swap onnxruntime's exact u8s8 kernels
    for its u8u8 ones and convert weights by value, which moves the optimised program an edit reuses
    (:mod:`qtquant.runs.programs`).  False: the kernels a user's default session gets on this CPU."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    if exact_int8 and not host_int8_path().default_exact:
        so.add_session_config_entry(*EXACT_INT8_ENTRY)
    return so


def ort_session(model: "onnx.ModelProto | str | Path", so: OrtOptions, **kwargs: Any) -> OrtSession:
    """``onnxruntime.InferenceSession`` on the CPU provider for an in-memory model, or a file as a user
    opens it (a path); whatever onnxruntime refuses becomes the one-line :class:`ModelError` every
    caller reports."""
    import onnxruntime as ort

    src = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    try:
        return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"], **kwargs)
    except Exception as e:
        raise ModelError(f"onnxruntime cannot run this model: {first_line(e)}") from None


def has_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def make_session(model: onnx.ModelProto, base_dir: Path | None = None, *, threads: int = 0,
                 spinning: bool = True, arena: bool = True, level: str = "basic", disabled: Iterable[str] = (),
                 exact_int8: bool = True) -> OrtSession:
    """An InferenceSession for an in-memory model whose external data lives in ``base_dir``.

    ``spinning=False`` stops idle pool threads from busy-waiting: better when other threads of
    the process (calibration's histogram thread) need the cores.  ``arena=False`` allocates
    with malloc instead of onnxruntime's CPU arena, whose fragmentation made peak memory creep
    up over hundreds of runs that hand their outputs to Python.

    ``level="default"`` keeps onnxruntime's default graph optimisations, as a user's session
    has them: that is how the fidelity check runs the exported model (Q/DQ pairs fused into
    int8 kernels).  ``"basic"`` keeps every intermediate tensor observable; ``"disabled"`` optimises
    nothing.  ``disabled``: names of onnxruntime graph transformers to leave out (see :func:`layout_passes_off`).

    ``exact_int8``: int8 products accumulate exactly whatever the CPU (:func:`quiet_options`); on a CPU
    where even onnxruntime's precision mode saturates, ``"default"`` runs at ``"basic"`` (Q/DQ in
    float: the integer values exact).  False: the kernels a user's default session gets here.
    """
    import onnxruntime as ort

    if exact_int8 and level == "default" and not host_int8_path().entry_exact:
        level = "basic"
    so = quiet_options(exact_int8)
    if threads:
        so.intra_op_num_threads = threads
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not arena:
        so.enable_cpu_mem_arena = False
    if level == "basic":
        # Fusions that drop intermediate tensors would hide the activations we ask for as outputs.
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    elif level == "disabled":
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif level != "default":
        raise ValueError(f"unknown optimisation level {level!r}")
    if has_external_data(model) and base_dir is not None:
        # The bytes carry no weights (they stay in their files, so >2 GB models work);
        # onnxruntime reads them from base_dir and itself refuses paths escaping it.
        # (A symlinked temp folder does not work: onnxruntime resolves the links and
        # refuses targets outside the folder.)
        so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                    str(Path(base_dir).resolve()))
    return ort_session(model, so, disabled_optimizers=list(disabled) or None)


def input_specs(graph: Graph) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    out: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type) if t.elem_type else np.dtype(np.float32)
        out[name] = (tuple(int(d or 1) for d in (t.shape or ())), np.dtype(dt))
    return out


def zeros_feed(graph: Graph) -> dict[str, npt.NDArray[Any]]:
    return {n: np.zeros(s, dtype=d) for n, (s, d) in input_specs(graph).items()}


def run_with_outputs(graph: Graph, names: Iterable[str],
                     feed: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    wanted = list(names)
    sess = make_session(with_outputs(graph.model, wanted), graph.base_dir)
    res = sess.run(wanted, feed)
    return dict(zip(wanted, res))
