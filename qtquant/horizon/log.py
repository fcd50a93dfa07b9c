"""Read a Horizon ``hb_mapper makertbin`` log: what the X5 compiler did with a model.

:func:`read_compile_log` returns a :class:`CompileLog` (frozen dataclasses) holding

- the per-node table printed after "The main quantized node information": one :class:`LogNode`
  per row, names as printed (the compiler prints at most 50 characters: a longer name as ``...``
  and its last 47; :mod:`qtquant.horizon.match` finds those in the graph by unique suffix);
- the ``HzRequantize`` rows as the names of the tensors they requantize (the row's name less
  ``_calibrated_Requantize``): :class:`Requantize`;
- the per-output table ("The quantized model output"): :class:`OutputCosine`;
- the compiler's static estimate ``FPS=…, latency = … us, DDR = … bytes``: :class:`StaticEstimate`;
- ``model_deps_info: {...}``: :class:`ModelDeps` (march, inputs, calibration type, optimisation
  flags, tool versions).

What the columns mean
---------------------
**Threshold** is the calibrated threshold of the node's *first input*, as that tensor was
calibrated -- before any ``HzRequantize`` placed in front of the node.  The tables show it:

- ``HZ_PREPROCESS_FOR_images`` reads 127.0: the raw pixel, an int8 value -128..127;
- the first Conv reads about 1.1: the image after ``data_scale`` 1/255 (a little over 1 from the
  NV12->RGB conversion);
- ``/model.0/act/Mul`` (the SiLU) reads 35.6, its Conv's output, and ``/model.1/conv/Conv``
  reads 33.75 <= 35.6, the SiLU's output -- a Conv's output threshold could not be under 1.1 and
  feed a SiLU reading 35.6, so the column is not the node's output;
- a Split prints the same threshold as the consumer of its second output (pass-through), and an
  Add prints its first input's (the Split output it adds to);
- a Concat prints its first input's threshold even when that input is requantized
  (``/model.11/Concat`` prints 4.935, the ``/model.10/Resize`` output's, which the log
  requantizes); the Concat's own output threshold is the one its consumer prints.

So a tensor's threshold is what its consumers print when it is their first input; a tensor read
only as a second input (an Add's other addend) or read by nobody (a model output) has none in the
log.  **DataType** is the node's *output* type: the one ``int16`` row of the eight reference logs is
a model output's last activation (``HzLut2Layer`` in YOLOv8n-seg's proto head) whose input Conv is
int8.  A tensor's bits therefore come from its producer's row: int8 scale = threshold / 127,
int16 scale = threshold / 32767 (:func:`qmax`).  **Cosine Similarity** compares the node's output
in the quantized model with the float model on the calibration data.

Reading a log never runs anything from it: ``model_deps_info`` is parsed with
:func:`ast.literal_eval` (literals only) and every field is checked for its type.  A log that
cannot be read -- empty, binary, truncated, its table missing or garbled -- is a one-line
:class:`~qtquant.base.errors.CompileLogError`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path

from qtquant.base.errors import CompileLogError

__all__ = [
    "CompileLog",
    "LogNode",
    "Requantize",
    "OutputCosine",
    "StaticEstimate",
    "ModelDeps",
    "read_compile_log",
    "parse_compile_log",
    "qmax",
    "REQUANTIZE_SUFFIX",
    "CUT_MARK",
    "NAME_WIDTH",
    "MAX_LOG_BYTES",
]

CUT_MARK = "..."
"""What the compiler prints in front of a name longer than :data:`NAME_WIDTH` (then the last 47)."""
NAME_WIDTH = 50
"""The widest name the node table prints; a longer one is cut to ``...`` and its end."""
REQUANTIZE_SUFFIX = "_calibrated_Requantize"
"""An ``HzRequantize`` row is named for the tensor it requantizes plus this."""
REQUANTIZE_TYPE = "HzRequantize"
MAX_LOG_BYTES = 64 * 1024 * 1024
"""The eight reference logs are 70-150 kB; anything this large is not a compile log."""

_NODE_TITLE = "The main quantized node information"
_OUTPUT_TITLE = "The quantized model output"
_NODE_HEADER = ("Node", "ON", "Subgraph", "Type", "Cosine", "Similarity", "Threshold", "DataType")
_OUTPUT_HEADER = ("Output", "Cosine", "Similarity", "L1", "Distance", "L2", "Distance", "Chebyshev", "Distance")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_ESTIMATE = re.compile(r"FPS=\s*(?P<fps>[0-9.eE+-]+),\s*latency\s*=\s*(?P<lat>[0-9.eE+-]+)\s*us,"
                       r"\s*DDR\s*=\s*(?P<ddr>\d+)\s*bytes")
_DEPS = "model_deps_info: "
_SUBGRAPH = re.compile(r"^id\((\d+)\)$")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QMAX = {"int8": 127, "int16": 32767}


def qmax(data_type: str) -> int | None:
    """The largest quantized value of a DataType the thresholds scale to (127 for int8, 32767 for
    int16), None for a type with no threshold (``float`` on the CPU)."""
    return _QMAX.get(data_type)


@dataclass(frozen=True)
class LogNode:
    """One row of the node table."""

    name: str
    """As printed, ``...`` included when cut."""
    cut: bool
    """True when the compiler cut the name (``...`` and its last 47 characters)."""
    on: str
    """``BPU`` or ``CPU``."""
    subgraph: int | None
    """The BPU subgraph's id, None for ``--`` (a CPU node)."""
    op_type: str
    cosine: float | None
    """Cosine similarity of the node's output against the float model; None for ``--``."""
    threshold: float | None
    """The calibrated threshold of the node's first input (module docstring); None for ``--``."""
    data_type: str
    """The node's output type: ``int8``, ``int16``, ``float``..."""
    line: int
    """1-based line of the log, for messages."""

    @property
    def suffix(self) -> str:
        """The name without the cut mark: the whole name, or the end of it."""
        return self.name[len(CUT_MARK):] if self.cut else self.name


@dataclass(frozen=True)
class Requantize:
    """An ``HzRequantize`` row: the compiler requantizes ``tensor`` in front of its consumer."""

    tensor: str
    """The requantized tensor's name (or, when ``cut``, the end of it)."""
    cut: bool
    data_type: str
    line: int
    consumer: str | None = None
    """The next node row's name as printed: the node the requantized value is for (the log prints
    the ``HzRequantize`` rows right before their consumer); None when no row follows."""
    consumer_line: int | None = None


@dataclass(frozen=True)
class OutputCosine:
    """One row of the model-output table: the quantized output against the float one."""

    name: str
    cosine: float
    l1: float
    l2: float
    chebyshev: float


@dataclass(frozen=True)
class StaticEstimate:
    """The compiler's static performance estimate of the BPU part of the model.  A model the CPU
    splits into several BPU subgraphs has one estimate line each: their latencies and DDR bytes
    are added (what runs on the CPU between them is not in the log) and ``fps`` is 1e6 / latency."""

    fps: float
    latency_us: float
    ddr_bytes: int
    subgraphs: int = 1


@dataclass(frozen=True)
class ModelDeps:
    """What ``model_deps_info`` says about the build (only fields qtquant uses)."""

    march: str
    input_names: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    calibration_type: str
    optimization: tuple[str, ...]
    """The ``optimization`` flags, split at commas (``set_Softmax_input_int8``...)."""
    optimize_level: str | None
    """``O3``... from the hbdk pass-through parameters, None when not given."""
    per_channel: bool | None
    compile_mode: str | None
    hb_mapper_version: str
    hbdk_version: str
    onnx_model: str
    """The model path on the machine that compiled it (informative only)."""


@dataclass(frozen=True)
class CompileLog:
    """Everything qtquant reads from one ``hb_mapper makertbin`` log."""

    path: str
    nodes: tuple[LogNode, ...]
    """Every row of the node table except the ``HzRequantize`` ones, in the log's order."""
    requantized: tuple[Requantize, ...]
    outputs: tuple[OutputCosine, ...]
    estimate: StaticEstimate
    deps: ModelDeps

    @property
    def march(self) -> str:
        return self.deps.march


def read_log_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of the log at ``path`` (``what``: "compile log", "model_info log"), refusing one over
    :data:`MAX_LOG_BYTES`; :class:`CompileLogError` if it cannot be read."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_LOG_BYTES:
            raise CompileLogError(f"{p.name}: {size} bytes is too large for a {what}")
        return p.read_bytes()
    except OSError as e:
        raise CompileLogError(f"cannot read {what} {p}: {e.strerror or e}") from None


def read_compile_log(path: str | Path) -> CompileLog:
    """Read the ``hb_mapper makertbin`` log at ``path``; :class:`CompileLogError` if it cannot."""
    return parse_compile_log(read_log_bytes(path, "compile log"), str(path))


def decode_log(data: bytes, name: str) -> str:
    """The text of a log file: UTF-8 without NUL bytes, or :class:`CompileLogError`."""
    label = Path(name).name
    if not data.strip():
        raise CompileLogError(f"{label}: the compile log is empty")
    if b"\x00" in data:
        raise CompileLogError(f"{label}: not a text file (binary data)")
    # A stray byte (a path in another encoding) costs its line at most: only what is mostly not
    # UTF-8 is refused.
    text = data.decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(16, len(text) // 100):
        raise CompileLogError(f"{label}: not a UTF-8 text file")
    return text


def parse_compile_log(data: bytes, name: str = "<log>") -> CompileLog:
    """:func:`read_compile_log` on bytes already read; ``name`` labels the messages."""
    label = Path(name).name
    text = decode_log(data, name)
    lines = text.splitlines()
    table_at = _find_title(lines, _NODE_TITLE, label, "the node table")
    if table_at is None:
        raise CompileLogError(f"{label}: no node table ('{_NODE_TITLE}'); not a complete hb_mapper makertbin log")
    rows, end = _table(lines, table_at, _NODE_HEADER, label, "node table")
    nodes, requantized, waiting = [], [], []
    for ln, text_row in rows:
        node = _node_row(text_row, ln, label)
        if node.op_type == REQUANTIZE_TYPE:
            tensor = node.suffix
            if not tensor.endswith(REQUANTIZE_SUFFIX) or tensor == REQUANTIZE_SUFFIX:
                raise CompileLogError(f"{label}: line {ln}: an {REQUANTIZE_TYPE} row not named "
                                      f"<tensor>{REQUANTIZE_SUFFIX}: {node.name[:80]!r}")
            waiting.append(Requantize(tensor[:-len(REQUANTIZE_SUFFIX)], node.cut, node.data_type, ln))
        else:
            nodes.append(node)
            requantized += [replace(r, consumer=node.name, consumer_line=ln) for r in waiting]
            waiting = []
    requantized += waiting
    if not nodes:
        raise CompileLogError(f"{label}: the node table has no rows")
    outputs: list[OutputCosine] = []
    out_at = _find_title(lines, _OUTPUT_TITLE, label, "the output table", start=end)
    if out_at is not None:
        out_rows, _ = _table(lines, out_at, _OUTPUT_HEADER, label, "output table")
        outputs = [_output_row(t, ln, label) for ln, t in out_rows]
    return CompileLog(path=name, nodes=tuple(nodes), requantized=tuple(requantized), outputs=tuple(outputs),
                      estimate=_estimate(lines, label), deps=_deps(lines, label))


# -- the tables ------------------------------------------------------------------------------------
def _find_title(lines: list[str], title: str, label: str, what: str, start: int = 0) -> int | None:
    found = [i for i in range(start, len(lines)) if lines[i].rstrip().endswith(title + ":")]
    if len(found) > 1:
        raise CompileLogError(f"{label}: {what} appears {len(found)} times; one compile per log")
    return found[0] if found else None


def _table(lines: list[str], title_at: int, header: tuple[str, ...], label: str,
           what: str) -> tuple[list[tuple[int, str]], int]:
    """The rows (1-based line, text) of the table whose title line is ``title_at``: a ``===``
    rule, the header, a ``---`` rule, then rows up to the next log record, a blank line or EOF."""
    i = title_at + 1
    if (i + 2 >= len(lines) or not _rule(lines[i], "=") or tuple(lines[i + 1].split()) != header
            or not _rule(lines[i + 2], "-")):
        raise CompileLogError(f"{label}: line {title_at + 2}: the {what}'s header is missing or garbled")
    rows, j = [], i + 3
    while j < len(lines) and lines[j].strip() and not _TIMESTAMP.match(lines[j]):
        rows.append((j + 1, lines[j]))
        j += 1
    if j >= len(lines):
        # Every complete log goes on after its tables (model_deps_info comes last).
        raise CompileLogError(f"{label}: the log ends inside the {what} (truncated)")
    return rows, j


def _rule(line: str, ch: str) -> bool:
    s = line.strip()
    return len(s) >= 10 and s == ch * len(s)


def _node_row(text: str, ln: int, label: str) -> LogNode:
    # Names may hold spaces (ONNX allows it); the six columns after the name never do.
    parts = text.rsplit(None, 6)
    if len(parts) != 7:
        raise CompileLogError(f"{label}: line {ln}: a node table row with {len(parts)} columns, not 7")
    name, on, sub, op, cos, thr, dtype = (p.strip() for p in parts)
    if on not in ("BPU", "CPU"):
        raise CompileLogError(f"{label}: line {ln}: ON column {on[:20]!r} is neither BPU nor CPU")
    if sub == "--":
        subgraph = None
    else:
        m = _SUBGRAPH.match(sub)
        if not m or len(m.group(1)) > 6:
            raise CompileLogError(f"{label}: line {ln}: subgraph {sub[:20]!r} is not id(N) or --")
        subgraph = int(m.group(1))
    if not _WORD.match(op) or not _WORD.match(dtype):
        raise CompileLogError(f"{label}: line {ln}: type {op[:30]!r} or data type {dtype[:20]!r} is not a name")
    cut = name.startswith(CUT_MARK)
    if not name or (cut and len(name) == len(CUT_MARK)):
        raise CompileLogError(f"{label}: line {ln}: a node table row without a name")
    cosine = _number(cos, ln, label, "cosine similarity", lo=-1.0 - 1e-6, hi=1.0 + 1e-6)
    threshold = _number(thr, ln, label, "threshold", lo=0.0, hi=None)
    if threshold is not None and threshold <= 0:
        raise CompileLogError(f"{label}: line {ln}: threshold {thr} is not positive")
    return LogNode(name, cut, on, subgraph, op, cosine, threshold, dtype, ln)


def _number(s: str, ln: int, label: str, what: str, lo: float | None, hi: float | None) -> float | None:
    if s == "--":
        return None
    try:
        v = float(s)
    except ValueError:
        raise CompileLogError(f"{label}: line {ln}: {what} {s[:20]!r} is not a number") from None
    if v != v or v in (float("inf"), float("-inf")) or (lo is not None and v < lo) or (hi is not None and v > hi):
        raise CompileLogError(f"{label}: line {ln}: {what} {s[:20]} is out of range")
    return v


def _output_row(text: str, ln: int, label: str) -> OutputCosine:
    parts = text.rsplit(None, 4)
    if len(parts) != 5:
        raise CompileLogError(f"{label}: line {ln}: an output table row with {len(parts)} columns, not 5")
    name = parts[0].strip()
    cos = _number(parts[1], ln, label, "cosine similarity", lo=-1.0 - 1e-6, hi=1.0 + 1e-6)
    rest = [_number(p, ln, label, "distance", lo=0.0, hi=None) for p in parts[2:]]
    if cos is None or any(v is None for v in rest):
        raise CompileLogError(f"{label}: line {ln}: an output table row without numbers")
    return OutputCosine(name, cos, *rest)  # type: ignore[arg-type]


# -- the estimate and model_deps_info -------------------------------------------------------------
def _estimate(lines: list[str], label: str) -> StaticEstimate:
    found = [m for line in lines if "FPS=" in line and (m := _ESTIMATE.search(line))]
    if not found:
        raise CompileLogError(f"{label}: no static estimate line ('FPS=..., latency = ... us, DDR = ... bytes')")
    parts = []
    for m in found:  # one line per BPU subgraph
        try:
            fps, lat, ddr = float(m["fps"]), float(m["lat"]), int(m["ddr"])
        except ValueError:
            raise CompileLogError(f"{label}: the static estimate's numbers cannot be read") from None
        if not (0 < fps < 1e9 and 0 < lat < 1e12 and 0 <= ddr < 1 << 48):
            raise CompileLogError(f"{label}: the static estimate's numbers are out of range")
        parts.append((fps, lat, ddr))
    if len(parts) == 1:
        return StaticEstimate(*parts[0])
    lat = sum(p[1] for p in parts)
    return StaticEstimate(1e6 / lat, lat, sum(p[2] for p in parts), len(parts))


def _deps(lines: list[str], label: str) -> ModelDeps:
    found = [line for line in lines if _DEPS in line]
    if not found:
        raise CompileLogError(f"{label}: no model_deps_info (the log is truncated or not hb_mapper makertbin's)")
    text = found[-1].split(_DEPS, 1)[1].strip()
    if len(text) > 1_000_000:
        raise CompileLogError(f"{label}: model_deps_info is too long")
    try:
        # Literals only: reading a log never runs anything from it.
        raw = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise CompileLogError(f"{label}: model_deps_info is not a readable literal") from None
    if not isinstance(raw, dict):
        raise CompileLogError(f"{label}: model_deps_info is not a dictionary")

    def text_of(key: str, required: bool = True) -> str | None:
        v = raw.get(key)
        if isinstance(v, str):
            return v.strip()
        if v is None and not required:
            return None
        raise CompileLogError(f"{label}: model_deps_info: {key!r} is missing or not text")

    def texts(key: str) -> tuple[str, ...]:
        v = raw.get(key)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise CompileLogError(f"{label}: model_deps_info: {key!r} is missing or not a list of text")
        return tuple(v)

    names = texts("input_names")
    shapes = tuple(_shape(s, label) for s in texts("input_shape"))
    if not names or len(shapes) != len(names):
        raise CompileLogError(f"{label}: model_deps_info: {len(names)} input names but {len(shapes)} input shapes")
    flags = tuple(f.strip() for s in texts("optimization") for f in s.split(",") if f.strip())
    hbdk = raw.get("hbdk_params")
    passthrough = hbdk.get("hbdk_pass_through_params") if isinstance(hbdk, dict) else None
    level = re.search(r"--(O\d)\b", passthrough) if isinstance(passthrough, str) else None
    per_channel = raw.get("per_channel")
    per_channel = {"true": True, "false": False}.get(str(per_channel).strip().lower()) \
        if per_channel is not None else None
    return ModelDeps(march=text_of("march") or "", input_names=names, input_shapes=shapes,
                     calibration_type=text_of("calibration_type") or "", optimization=flags,
                     optimize_level=level.group(1) if level else None, per_channel=per_channel,
                     compile_mode=text_of("compile_mode", required=False),
                     hb_mapper_version=text_of("hb_mapper_version") or "",
                     hbdk_version=text_of("hbdk_version") or "",
                     onnx_model=text_of("onnx_model", required=False) or "")


def _shape(s: str, label: str) -> tuple[int, ...]:
    parts = s.strip().split("x")
    if not 1 <= len(parts) <= 8 or not all(re.fullmatch(r"[0-9]{1,9}", p) for p in parts):
        raise CompileLogError(f"{label}: model_deps_info: input shape {s[:40]!r} is not like 1x3x640x640")
    return tuple(int(p) for p in parts)
