"""Perf reports: text table, CSV and a self-contained HTML page (inline CSS/JS/SVG, no network)."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io

from ..base.tables import clip_left, text_table


__all__ = ["report_template", "layer_table_text", "summary_text", "comparison_rows", "confidence_lines",
           "STATIC_LABEL", "BOARD_LABEL", "csv_text", "html_report", "explain_text", "short_fused", "CSV_COLUMNS"]

# The two latencies, named the same everywhere (text, HTML, the app's Performance dock).
STATIC_LABEL = "static estimate (BPU)"  # what the compiler prints: latency = … us
BOARD_LABEL = "board estimate (1 thread)"  # + the runtime's CPU work on the inputs and outputs (perf/board.py)

CSV_COLUMNS = ["name", "op_type", "macs", "bytes", "ddr_bytes", "compute_us", "memory_us", "overhead_us",
               "total_us", "bound", "is_rescale", "concat", "note", "op_class", "fused_ops", "fused_into"]
_SHORT = {"BatchNormalization": "BN", "HardSigmoid": "HSig", "Sigmoid+Mul": "SiLU", "HardSigmoid+Mul": "HardSwish",
          "Add+Clip+Mul+Div": "HardSwish", "Add+Clip+Div+Mul": "HardSwish", "Add+Clip+Mul+Mul": "HardSwish"}


def short_fused(lc) -> str:
    """What a layer merges, short: "BN+Relu", "SiLU (LUT)", "HardSwish (LUT)"; "" for nothing."""
    ops = lc.fused_ops
    if not ops:
        return ""
    if lc.op_class == "lut":
        return _SHORT.get(ops, ops) + " (LUT)"
    return "+".join(_SHORT.get(o, o) for o in ops.split("+"))


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def comparison_rows(after, before=None) -> list[tuple[str, str, str, str]]:
    """(metric, before, after, change) rows of the totals; before/change empty without a baseline."""
    def row(label, fn, fmt):
        a = fn(after)
        if before is None:
            return (label, "", fmt(a), "")
        b = fn(before)
        if b == a:
            change = "="
        else:
            change = (f"{(a - b) / b * 100:+.1f}%" if b else f"{a - b:+g}")
        return (label, fmt(b), fmt(a), change)

    return [
        row(STATIC_LABEL, lambda r: r.total_ms, lambda v: f"{v:.3f} ms"),
        row(BOARD_LABEL, lambda r: r.board_ms, lambda v: f"{v:.3f} ms"),
        row("FPS (static)", lambda r: r.fps, lambda v: f"{v:.1f}"),
        row("DDR per frame", lambda r: r.ddr_bytes, _fmt_bytes),
        row("rescales", lambda r: r.rescale_count, lambda v: f"{v}"),
        row("rescale cost", lambda r: r.rescale_us, lambda v: f"{v:.1f} µs"),
        row("compute-bound layers", lambda r: r.compute_bound, lambda v: f"{v}"),
        row("memory-bound layers", lambda r: r.memory_bound, lambda v: f"{v}"),
        row("overhead-bound layers", lambda r: r.overhead_bound, lambda v: f"{v}"),
        row("MACs", lambda r: r.macs, lambda v: f"{v / 1e9:.3f} G"),
    ]


def board_clock_note(result, ghz: float) -> str:
    """What the board estimate's BPU part comes to at the board's clock ``ghz``."""
    return f"the BPU part is {result.board_us - result.board_cpu_us:.0f} µs at the board's clock ({ghz:g} GHz)"


def confidence_lines(result, march) -> list[str]:
    """How sure each of the two latencies is: the march fit's leave-one-out error on the nearest
    figures (perf/confidence.py), and what the board estimate adds on the CPU."""
    from .confidence import confidence
    from .march import FigureKind

    cpu = sum(io.elems for io in result.board_io if io.on_cpu)
    ints = [io.tensor for io in result.board_io if io.app_dequantises]
    prec = result.precision
    nodes = f"{prec.cpu_us:.0f} µs for the nodes run on the CPU, " if prec is not None and prec.cpu_us else ""
    clock = f"; {board_clock_note(result, march.board_bpu_ghz)}" if march.board_clock_ratio != 1.0 else ""
    return [f"{STATIC_LABEL}: {confidence(march, result.family, FigureKind.STATIC).text}",
            f"{BOARD_LABEL}: {confidence(march, result.family, FigureKind.BOARD).text}; it adds "
            f"{result.board_cpu_us:.0f} µs on the CPU ({nodes}the runtime's call and {cpu:,} elements converted: "
            f"float32 outputs dequantised, non-image inputs quantised"
            + (f"; {len(ints)} int output(s) left to the application" if ints else "") + f"){clock}"]



BEFORE, AFTER = "as opened", "edited"  # the two columns: no group and all int8, then the session's edits


def summary_text(after, before=None, march=None) -> str:
    """The totals; with ``before`` (the model as opened) both columns, the change and the price of the edits;
    with ``march``, how sure the two latencies are (:func:`confidence_lines`)."""
    from .price import edit_price

    rows = comparison_rows(after, before)
    if before is None:
        out = text_table([(r[0], r[2]) for r in rows], align="ll")
    else:
        out = "\n".join([text_table(rows, ("", BEFORE, AFTER, "change")),
                         f"price of the edits: {edit_price(before, after).text()} of board latency"])
    if march is not None:
        out += "\n" + "\n".join(confidence_lines(after, march))
    return out


def layer_table_text(result, top: int | None = None, include_free: bool = False) -> str:
    """Per-layer table in graph order (or the ``top`` most expensive layers, costliest first)."""
    layers = [lc for lc in result.layers if include_free or lc.total_us > 0]
    if top:
        layers = sorted(layers, key=lambda lc: -lc.total_us)[:top]
    rows = []
    for lc in layers:
        rows.append((lc.name, lc.op_type, f"{lc.macs / 1e6:.1f}M" if lc.macs else "-", _fmt_bytes(lc.bytes),
                     f"{lc.compute_us:.1f}", f"{lc.memory_us:.1f}", f"{lc.total_us:.1f}",
                     lc.bound + (" (rescale)" if lc.is_rescale else ""), short_fused(lc) or "-"))
    out = [text_table(rows, ("layer", "op", "MACs", "bytes", "compute µs", "memory µs", "total µs", "bound",
                             "fused into it"), "llrrrrrll", rule=True, max_width=60)]
    hidden = len(result.layers) - len(layers)
    if hidden and not top:
        out.append(f"({hidden} free layers not shown: views, fused activations, shape math, in-place Concats)")
    return "\n".join(out)


def csv_text(result) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for lc in result.layers:
        d = lc.to_dict()
        w.writerow([("" if d[c] is None else (f"{d[c]:.4f}" if isinstance(d[c], float) else d[c]))
                    for c in CSV_COLUMNS])
    return buf.getvalue()


# Bar colours of the chart, by what bounds the layer.
COLORS = {"compute": "#4a78c2", "memory": "#e0a030", "overhead": "#8a8f98", "rescale": "#d9534f"}
LAYER_COLUMNS = [("layer", "text"), ("op", "text"), ("MACs", "num"), ("bytes", "num"), ("DDR bytes", "num"),
                 ("compute µs", "num"), ("memory µs", "num"), ("overhead µs", "num"), ("total µs", "num"),
                 ("bound", "text"), ("fused into it", "text"), ("note", "text")]


@functools.cache
def report_template(name: str = "perf_report.html.j2"):
    """One of the HTML report templates (qtquant/templates: perf, diff, check), which share
    their style sheet, sort script and totals table."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("qtquant", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.policies["json.dumps_kwargs"] = {"sort_keys": False}  # the JSON island keeps the summary's own order
    return env.get_template(name)


def _chart(result, top: int = 15) -> dict:
    layers = sorted((lc for lc in result.layers if lc.total_us > 0), key=lambda lc: -lc.total_us)[:top]
    label_w, bar_w, row_h = 330, 460, 20
    vmax = layers[0].total_us if layers else 1.0
    bars = [{"name": lc.name, "label": clip_left(lc.name, 48), "op_type": lc.op_type, "bound": lc.bound,
             "total_us": lc.total_us, "y": 5 + k * row_h, "w": max(1.0, bar_w * lc.total_us / vmax),
             "color": COLORS["rescale" if lc.is_rescale else lc.bound if lc.bound in COLORS else "memory"],
             "fused": short_fused(lc)}
            for k, lc in enumerate(layers)]
    return {"bars": bars, "label_w": label_w, "row_h": row_h, "width": label_w + bar_w + 90,
            "height": row_h * len(layers) + 10}


def _layer_rows(result) -> list[dict]:
    return [{**{k: getattr(lc, k) for k in ("name", "op_type", "macs", "bytes", "ddr_bytes", "compute_us",
                                            "memory_us", "overhead_us", "total_us", "bound")},
             "cls": "rescale" if lc.is_rescale else ("free" if lc.total_us == 0 else ""),
             "fused": short_fused(lc) or (f"(in {lc.fused_into})" if lc.fused_into else ""),
             "note": f"rescale for {lc.concat}: {lc.note}" if lc.is_rescale else lc.note}
            for lc in result.layers]


def _rescale_rows(result) -> list[dict]:
    costs = result.rescale_cost_by_concat()
    return [{"name": lc.name, "concat": lc.concat, "total_us": lc.total_us, "concat_us": costs.get(lc.concat, 0.0),
             "tensor": lc.note.split(" to the output scale", 1)[0].removeprefix("requantize ")}
            for lc in result.rescales]


def _march_view(march) -> dict | None:
    if march is None or not getattr(march, "provenance", None):
        return None
    items = []
    for k, (kind, text) in march.provenance.items():
        v = getattr(march, k)
        items.append((k, _stable(v), kind, text))
    return {"name": march.name, "params": items}


def _stable(v):
    """A profile value as the report prints it, sets sorted: a frozenset's repr follows the string hash,
    which changes from one process to the next, so the same profile would print differently."""
    if isinstance(v, (set, frozenset)):
        return sorted(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        inner = ", ".join(f"{f.name}={_stable(getattr(v, f.name))!r}" for f in dataclasses.fields(v))
        return f"{type(v).__name__}({inner})"
    return v


def html_report(after, before=None, *, title: str = "", meta: dict | None = None, march=None) -> str:
    """The whole report as one HTML page: summary, top-layer chart, layer table, rescale list."""
    closing = (f"Totals on {after.march}: {STATIC_LABEL} {after.total_ms:.3f} ms per frame ({after.fps:.1f} FPS), "
               f"{BOARD_LABEL} {after.board_ms:.3f} ms; "
               f"{after.ddr_bytes / 1e6:.2f} MB DDR per frame, {after.rescale_count} rescales costing "
               f"{after.rescale_us:.1f} µs.")
    price = None
    if before is not None:
        from .price import edit_price

        price = edit_price(before, after)
        closing += (f" As opened (no group, every tensor int8): {before.total_ms:.3f} ms ({before.fps:.1f} FPS), "
                    f"{before.rescale_count} rescales costing {before.rescale_us:.1f} µs. "
                    f"Price of the edits: {price.text()}.")
    now = {lc.name for lc in after.rescales}
    return report_template().render(
        title=title or "qtquant perf report", meta=dict(meta or {}),
        summary=comparison_rows(after, before), has_before=before is not None, before_label=BEFORE,
        after_label=AFTER, price=price.text() if price is not None else "",
        chart=_chart(after), colors=COLORS, layer_columns=LAYER_COLUMNS, layers=_layer_rows(after),
        rescale_count=after.rescale_count, rescales=_rescale_rows(after),
        removed=[lc.name for lc in before.rescales if lc.name not in now] if before is not None else [],
        march=_march_view(march), closing=closing,
        confidence=confidence_lines(after, march) if march is not None else [],
        data={"summary": after.summary(), "before": before.summary() if before is not None else None,
              "price": price.to_dict() if price is not None else None})


def explain_text(result, name: str, march) -> str:
    """The arithmetic of one layer: how its compute, memory and overhead terms were obtained,
    which term bounds it and what was fused into it.  ``name``: a graph node or a rescale node."""
    lc = result.layer(name)
    if lc is None:
        raise KeyError(name)
    lines = []
    if lc.fused_into:
        lines.append(f"{lc.name} ({lc.op_type}) is merged into {lc.fused_into}: it has no cost of its own.")
        host = result.layer(lc.fused_into)
        if host is None:
            return "\n".join(lines)
        lines.append("")
        lc = host
    kind = f"{lc.op_type}, {lc.op_class}" if lc.op_class else lc.op_type
    lines.append(f"{lc.name} ({kind}) on {march.name}")
    if lc.fused:
        lines.append(f"  merged into this layer: {lc.fused_ops} ({', '.join(lc.fused)})")
    if lc.note:
        lines.append(f"  note: {lc.note}")
    if lc.total_us == 0 and not lc.bytes:
        lines.append("  free: no compute, no bytes, no overhead")
        return "\n".join(lines)
    if lc.macs:
        rate = march.macs_per_s
        lines.append(f"  compute  = {lc.macs:,} MACs / ({rate / 1e9:g} GMAC/s peak x utilization "
                     f"{march.utilization:.4g} x efficiency {lc.efficiency:.4g}) = {lc.compute_us:.2f} µs")
    elif lc.elems:
        lines.append(f"  compute  = {lc.elems:,} elements / ({march.vector_elems_per_cycle:g} elements/cycle x "
                     f"{march.frequency_ghz:g} GHz x {lc.op_class} efficiency {lc.efficiency:.4g}) "
                     f"= {lc.compute_us:.2f} µs")
    else:
        lines.append(f"  compute  = {lc.compute_us:.2f} µs")
    weights = (f" + weights {lc.weight_bytes:,} B / {march.weight_bytes_per_s / 1e9:.4g} GB/s"
               if lc.weight_bytes else "")
    lines.append(f"  memory   = DDR {lc.ddr_bytes - lc.weight_bytes:,} B / {march.ddr_gbps:.4g} GB/s{weights} + "
                 f"on-chip {lc.onchip_bytes:,} B / {march.sram_gbps:g} GB/s = {lc.memory_us:.2f} µs")
    ops = lc.overhead_us / march.op_overhead_us if march.op_overhead_us > 0 else 1.0
    if ops > 1.5 and abs(ops - round(ops)) < 1e-6:  # a lowered Softmax, an element-wise region
        lines.append(f"  overhead = {round(ops)} ops x {march.op_overhead_us:.4g} µs = {lc.overhead_us:.2f} µs")
    else:
        lines.append(f"  overhead = {lc.overhead_us:.2f} µs per op")
    lines.append(f"  total    = max({lc.compute_us:.2f}, {lc.memory_us:.2f}) + {lc.overhead_us:.2f} = "
                 f"{lc.total_us:.2f} µs: {lc.bound}-bound")
    return "\n".join(lines)
