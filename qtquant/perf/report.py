"""Perf reports: text table, CSV and a self-contained HTML page (inline CSS/JS/SVG, no network)."""

from __future__ import annotations

import csv
import html
import io
import json

from ..tables import text_table


__all__ = ["layer_table_text", "summary_text", "comparison_rows", "csv_text", "html_report", "CSV_COLUMNS"]

CSV_COLUMNS = ["name", "op_type", "macs", "bytes", "ddr_bytes", "compute_us", "memory_us", "overhead_us",
               "total_us", "bound", "is_rescale", "concat", "note"]


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def comparison_rows(after, before=None) -> list[tuple[str, str, str, str]]:
    """(metric, before, after, change) rows of the totals; before/change empty without a baseline."""
    def row(label, fn, fmt, better_low=True):
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
        row("latency", lambda r: r.total_ms, lambda v: f"{v:.3f} ms"),
        row("FPS", lambda r: r.fps, lambda v: f"{v:.1f}"),
        row("DDR per frame", lambda r: r.ddr_bytes, _fmt_bytes),
        row("rescales", lambda r: r.rescale_count, lambda v: f"{v}"),
        row("rescale cost", lambda r: r.rescale_us, lambda v: f"{v:.1f} µs"),
        row("compute-bound layers", lambda r: r.compute_bound, lambda v: f"{v}"),
        row("memory-bound layers", lambda r: r.memory_bound, lambda v: f"{v}"),
        row("MACs", lambda r: r.macs, lambda v: f"{v / 1e9:.3f} G"),
    ]


def summary_text(after, before=None) -> str:
    rows = comparison_rows(after, before)
    if before is None:
        return text_table([(r[0], r[2]) for r in rows], align="ll")
    return text_table(rows, ("", "before groups", "after groups", "change"))


def layer_table_text(result, top: int | None = None, include_free: bool = False) -> str:
    """Per-layer table in graph order (or the ``top`` most expensive layers, costliest first)."""
    layers = [lc for lc in result.layers if include_free or lc.total_us > 0]
    if top:
        layers = sorted(layers, key=lambda lc: -lc.total_us)[:top]
    rows = []
    for lc in layers:
        rows.append((lc.name, lc.op_type, f"{lc.macs / 1e6:.1f}M" if lc.macs else "-", _fmt_bytes(lc.bytes),
                     f"{lc.compute_us:.1f}", f"{lc.memory_us:.1f}", f"{lc.total_us:.1f}",
                     lc.bound + (" (rescale)" if lc.is_rescale else "")))
    out = [text_table(rows, ("layer", "op", "MACs", "bytes", "compute µs", "memory µs", "total µs", "bound"),
                      "llrrrrrl", rule=True, max_width=60)]
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


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #d8dce4;padding-bottom:4px}
.meta{color:#5a6372;margin:0 0 12px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:3px 8px;border-bottom:1px solid #eceef2;text-align:right;white-space:nowrap}
th:first-child,td:first-child,td.t,th.t{text-align:left}
thead th{background:#f3f5f8;position:sticky;top:0;cursor:pointer;user-select:none}
thead th.asc::after{content:" ▲"}thead th.desc::after{content:" ▼"}
tr.rescale td{background:#fff1f0}tr.free td{color:#9aa1ad}
.summary td:nth-child(4){color:#5a6372}
.note{color:#5a6372;font-size:12px;max-width:520px;white-space:normal;text-align:left}
svg text{font:12px system-ui,sans-serif}
footer{margin-top:32px;color:#5a6372;font-size:12px}
"""

_JS = """
document.querySelectorAll('table.sortable').forEach(function(t){
  var ths=t.tHead.rows[0].cells;
  Array.prototype.forEach.call(ths,function(th,i){th.addEventListener('click',function(){
    var asc=!th.classList.contains('asc');
    Array.prototype.forEach.call(ths,function(h){h.classList.remove('asc','desc')});
    th.classList.add(asc?'asc':'desc');
    var num=th.dataset.type==='num', body=t.tBodies[0];
    var rows=Array.prototype.slice.call(body.rows);
    rows.sort(function(a,b){
      var x=a.cells[i].dataset.v!==undefined?a.cells[i].dataset.v:a.cells[i].textContent;
      var y=b.cells[i].dataset.v!==undefined?b.cells[i].dataset.v:b.cells[i].textContent;
      if(num){x=parseFloat(x)||0;y=parseFloat(y)||0;return asc?x-y:y-x}
      return asc?x.localeCompare(y):y.localeCompare(x)});
    rows.forEach(function(r){body.appendChild(r)});
  })});
});
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _bar_chart(result, top: int = 15) -> str:
    layers = sorted((lc for lc in result.layers if lc.total_us > 0), key=lambda lc: -lc.total_us)[:top]
    if not layers:
        return "<p>No layer costs anything.</p>"
    label_w, bar_w, row_h = 330, 460, 20
    vmax = layers[0].total_us
    h = row_h * len(layers) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 90}" height="{h}" '
             f'role="img" aria-label="top {len(layers)} layers by latency">']
    for k, lc in enumerate(layers):
        y = 5 + k * row_h
        w = max(1.0, bar_w * lc.total_us / vmax)
        color = "#d9534f" if lc.is_rescale else ("#4a78c2" if lc.bound == "compute" else "#e0a030")
        name = lc.name if len(lc.name) <= 48 else "…" + lc.name[-47:]
        parts.append(f'<g class="bar" data-name="{_e(lc.name)}"><title>{_e(lc.name)} ({_e(lc.op_type)}, '
                     f'{lc.bound}-bound): {lc.total_us:.1f} µs</title>'
                     f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{_e(name)}</text>'
                     f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{color}"/>'
                     f'<text x="{label_w + w + 4:.1f}" y="{y + 14}">{lc.total_us:.1f} µs</text></g>')
    parts.append("</svg>")
    legend = ('<p class="meta"><span style="color:#4a78c2">■</span> compute-bound &nbsp; '
              '<span style="color:#e0a030">■</span> memory-bound &nbsp; <span style="color:#d9534f">■</span> rescale</p>')
    return "".join(parts) + legend


def _layer_table(result) -> str:
    cols = [("layer", "text"), ("op", "text"), ("MACs", "num"), ("bytes", "num"), ("DDR bytes", "num"),
            ("compute µs", "num"), ("memory µs", "num"), ("overhead µs", "num"), ("total µs", "num"),
            ("bound", "text"), ("note", "text")]
    out = ['<table id="layer-table" class="sortable"><thead><tr>']
    out += [f'<th data-type="{t}"{" class=t" if t == "text" else ""}>{_e(c)}</th>' for c, t in cols]
    out.append("</tr></thead><tbody>")
    for lc in result.layers:
        cls = "rescale" if lc.is_rescale else ("free" if lc.total_us == 0 else "")
        note = lc.note if not lc.is_rescale else f"rescale for {lc.concat}: {lc.note}"
        out.append(
            f'<tr class="{cls}" data-name="{_e(lc.name)}"><td class="t">{_e(lc.name)}</td><td class="t">{_e(lc.op_type)}</td>'
            f'<td data-v="{lc.macs}">{lc.macs:,}</td><td data-v="{lc.bytes}">{lc.bytes:,}</td>'
            f'<td data-v="{lc.ddr_bytes}">{lc.ddr_bytes:,}</td>'
            f'<td>{lc.compute_us:.2f}</td><td>{lc.memory_us:.2f}</td><td>{lc.overhead_us:.2f}</td>'
            f'<td>{lc.total_us:.2f}</td><td class="t">{lc.bound}</td><td class="note">{_e(note)}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _rescale_table(result, before=None) -> str:
    costs = result.rescale_cost_by_concat()
    rows = result.rescales
    out = []
    if not rows:
        out.append("<p>No rescale ops: every Concat input carries its Concat's output scale.</p>")
    else:
        out.append('<table id="rescale-table" class="sortable"><thead><tr><th class=t data-type="text">rescale op</th>'
                   '<th class=t data-type="text">Concat</th><th class=t data-type="text">input tensor</th>'
                   '<th data-type="num">rescale µs</th><th data-type="num">Concat mismatch µs</th></tr></thead><tbody>')
        for lc in rows:
            tensor = lc.note.split(" to the output scale", 1)[0].removeprefix("requantize ")
            out.append(f'<tr data-name="{_e(lc.name)}"><td class="t">{_e(lc.name)}</td><td class="t">{_e(lc.concat)}</td>'
                       f'<td class="t">{_e(tensor)}</td><td>{lc.total_us:.2f}</td>'
                       f'<td>{costs.get(lc.concat, 0.0):.2f}</td></tr>')
        out.append("</tbody></table>")
        out.append('<p class="meta">"Concat mismatch µs" also counts the copy a channel Concat needs once any '
                   'input must be rescaled; with all scales matched it is done in place for free.</p>')
    if before is not None:
        now = {lc.name for lc in rows}
        removed = [lc for lc in before.rescales if lc.name not in now]
        if removed:
            out.append(f"<p>Removed by the groups ({len(removed)}): "
                       + ", ".join(f"<code>{_e(lc.name)}</code>" for lc in removed) + "</p>")
    return "".join(out)


def html_report(after, before=None, *, title: str = "", meta: dict | None = None, march=None) -> str:
    """The whole report as one HTML string: summary, top-layer chart, layer table, rescale list."""
    meta = dict(meta or {})
    rows = comparison_rows(after, before)
    summary = ['<table class="summary"><thead><tr><th class=t>metric</th>'
               + ("<th>before groups</th><th>after groups</th><th>change</th>" if before is not None else "<th>value</th>")
               + "</tr></thead><tbody>"]
    for label, b, a, ch in rows:
        cells = f"<td>{_e(b)}</td><td>{_e(a)}</td><td>{_e(ch)}</td>" if before is not None else f"<td>{_e(a)}</td>"
        summary.append(f'<tr><td class="t">{_e(label)}</td>{cells}</tr>')
    summary.append("</tbody></table>")
    meta_line = " · ".join(f"{_e(k)}: {_e(v)}" for k, v in meta.items())
    prov = ""
    if march is not None and getattr(march, "provenance", None):
        items = "".join(f"<li><b>{_e(k)}</b> = {_e(sorted(getattr(march, k)) if isinstance(getattr(march, k), frozenset) else getattr(march, k))}"
                        f" — {_e(kind)}: {_e(text)}</li>" for k, (kind, text) in march.provenance.items())
        prov = f"<h2>March profile {_e(march.name)}</h2><ul>{items}</ul>"
    data = json.dumps({"summary": after.summary(), "before": before.summary() if before is not None else None})
    data = data.replace("</", "<\\/")  # keep "</script>" inside strings from closing the tag
    closing = (f"Totals: {after.total_ms:.3f} ms per frame ({after.fps:.1f} FPS) on {_e(after.march)}, "
               f"{after.ddr_bytes / 1e6:.2f} MB DDR per frame, {after.rescale_count} rescales costing "
               f"{after.rescale_us:.1f} µs.")
    if before is not None:
        closing += (f" Before the groups: {before.total_ms:.3f} ms ({before.fps:.1f} FPS), "
                    f"{before.rescale_count} rescales costing {before.rescale_us:.1f} µs.")
    return "".join([
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title or 'qtquant perf report')}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title or 'qtquant perf report')}</h1><p class=\"meta\">{meta_line}</p>",
        f'<section id="summary"><h2>Summary</h2>{"".join(summary)}</section>',
        f'<section id="chart"><h2>Top layers by latency</h2>{_bar_chart(after)}</section>',
        f'<section id="layers"><h2>Layers ({len(after.layers)})</h2>{_layer_table(after)}</section>',
        f'<section id="rescales"><h2>Rescale ops ({after.rescale_count})</h2>{_rescale_table(after, before)}</section>',
        prov,
        f'<footer><p id="closing">{closing}</p><p>An analytical estimate (qtquant perf model, see docs/perf-model.md), '
        'not a measurement.</p></footer>',
        f'<script type="application/json" id="perf-data">{data}</script>',
        f"<script>{_JS}</script></body></html>",
    ])
