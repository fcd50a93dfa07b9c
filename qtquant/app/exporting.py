"""The export use case: write the fixed QDQ model, the plan, onnxruntime overrides, a deploy
target's files and the perf report (HTML + CSV) of one session.

``qtquant fix`` and the window's Export both build an :class:`ExportRequest` and call
:func:`export`; each front end only formats the :class:`ExportResult` (the CLI prints it, the
window shows it and adds its canvas picture).  :func:`write_perf_report` is the one writer of
the perf report, also used by ``qtquant perf --report --csv``, so the same session gives the
same bytes whichever front end wrote it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import BadInputError
from ..quant.outputs import OutputMode

if TYPE_CHECKING:
    from ..base.fileio.paths import StrPath
    from ..calib.state import SessionState
    from ..deploy.facts import Deployed
    from ..export.qdq import ExportResult as QdqExport
    from ..fidelity.filecompare import FileComparison
    from ..perf import PerfResult
    from ..perf.march import MarchProfile
    from ..quant.outputs import FloatOutput

__all__ = ["ExportRequest", "ExportResult", "export", "write_perf_report", "perf_report_meta"]


@dataclass(frozen=True)
class ExportRequest:
    """What to write.  A path left ``None`` is not written."""

    model: Path | None = None
    plan: Path | None = None
    overrides: Path | None = None
    html: Path | None = None  # the perf report
    csv: Path | None = None  # its layer table
    output_mode: OutputMode = OutputMode.AUTO
    deploy: str | None = None  # a deploy target (qtquant deploy --target)
    deploy_dir: Path | None = None  # its folder; None: the model's folder
    accuracy: bool = True  # measure the written model on the check samples (the result's accuracy line)
    compare_input: bool = True  # a QDQ file opened: compare the written model with it
    march_file: str | None = None  # a fitted march profile for the perf report

    def outputs(self) -> list[tuple[Path, str]]:
        """(path, what) of every file asked for, in the order they are written."""
        return [(Path(p), what) for p, what in ((self.model, "output model"), (self.plan, "plan file"),
                                                (self.overrides, "overrides file"), (self.html, "report"),
                                                (self.csv, "CSV file")) if p is not None]

    def check(self, inputs: Iterable[StrPath | None]) -> None:
        """Refuse an output that would overwrite an input or another output, before anything is written."""
        from ..base.fileio import check_output_path

        given = list(inputs)  # read once: each output is checked against all of them
        named: list[tuple[Path, str]] = []
        for p, what in self.outputs():
            check_output_path(p, inputs=given, what=what, outputs=named)
            named.append((p, what))


@dataclass
class ExportResult:
    written: list[Path] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the window's report, in the order things were written
    written_lines: list[str] = field(default_factory=list)  # one "wrote ..." line per file or file set
    notes: list[str] = field(default_factory=list)  # the model export's notes
    warnings: list[str] = field(default_factory=list)  # what the model export had to give up
    kept_float: list[FloatOutput] = field(default_factory=list)  # output Concats left in float
    float_tensors: frozenset[str] = frozenset()
    accuracy: str = ""  # the exported model's accuracy on the check samples ("" without them)
    model: QdqExport | None = None  # the model export's result (export_qdq)
    against: FileComparison | None = None  # the written model against the QDQ file opened
    deployed: Deployed | None = None  # the deploy target's result


def _cancel_check(cancelled: Callable[[], bool] | None) -> None:
    if cancelled is not None and cancelled():
        from ..base.errors import Cancelled

        raise Cancelled("export cancelled")


def export(session: SessionState, request: ExportRequest, *, cancelled: Callable[[], bool] | None = None,
           progress: Callable[[str], None] | None = None) -> ExportResult:
    """Write what ``request`` asks for.  ``session``: a Snapshot, or a session no one edits meanwhile.
    ``cancelled()`` is asked between files; ``progress(text)`` is told each step."""
    from ..base.fileio import check_output_path

    g = session.graph
    for p, what in request.outputs():  # refuse clobbering the input before writing anything
        check_output_path(p, inputs=[g.path], what=what)
    rep = ExportResult()

    def step(text: str | None = None) -> None:
        _cancel_check(cancelled)
        if text and progress is not None:
            progress(text)

    deploy_dir = request.deploy_dir
    if request.model is not None:
        from ..export.qdq import export_qdq
        from ..quant.outputs import float_output_tensors

        if not session.ready:
            raise BadInputError("the model has no scales yet: wait for calibration before exporting it")
        step("writing the QDQ model")
        rep.float_tensors, rep.kept_float = float_output_tensors(g, session.baseline_domains, request.output_mode,
                                                                 session.options.float_output_max_bits_lost)
        res: QdqExport = export_qdq(session, request.model, float_tensors=rep.float_tensors)
        rep.model = res
        rep.written += [res.path] + ([res.data_path] if res.data_path else [])
        rep.warnings = res.build.warnings()
        rep.notes = list(res.build.notes)
        rep.written_lines.append(res.text())
        rep.lines.append(res.text())
        rep.lines += [f"warning: {w}" for w in rep.warnings]  # right under the line they are about
        rep.lines += [f"note: {k.text()}" for k in rep.kept_float]
        rep.lines += [f"note: {n}" for n in rep.notes]
        step()
        if request.accuracy:
            rep.accuracy = _accuracy_line(session, request.output_mode)
            if rep.accuracy:
                rep.lines.append(rep.accuracy)
                step()
        if request.compare_input and session.quantized_file:  # no float original: the file written against
            from ..fidelity.filecompare import compare_with_input  # the file opened

            against = rep.against = compare_with_input(session, res.path)
            rep.lines += against.text()
            step()
        if deploy_dir is None:
            deploy_dir = res.path.parent
    if request.plan is not None:
        from ..files.plan import save_plan

        rep.written.append(save_plan(session, request.plan))
        rep.written_lines.append(f"wrote plan {request.plan}")
    if request.overrides is not None:
        from ..export.overrides import write_overrides

        rep.written.append(write_overrides(session, request.overrides))
        rep.written_lines.append(f"wrote onnxruntime TensorQuantOverrides {request.overrides}")
    rep.lines += rep.written_lines[1 if request.model is not None else 0:]
    step()
    if request.deploy:
        from ..deploy import deploy

        if not session.ready:
            raise BadInputError("the model has no scales yet: wait for calibration before deploying")
        step(f"writing the {request.deploy} files")
        d = rep.deployed = deploy(session, request.deploy, deploy_dir if deploy_dir is not None else Path("."))
        rep.written += d.files
        rep.written_lines += d.lines()
        rep.lines += d.lines()
        step()
    if request.html is not None or request.csv is not None:
        if not session.ready:
            raise BadInputError("the perf report needs scales: wait for calibration before exporting it")
        step("writing the perf report")
        written = write_perf_report(session, request.html, request.csv, march_file=request.march_file,
                                    accuracy=rep.accuracy, inputs=[g.path])
        rep.written += written
        line = ("wrote perf report {} and layer table {}".format(*written) if len(written) == 2
                else f"wrote perf report {written[0]}" if request.html is not None
                else f"wrote layer table {written[0]}")
        rep.written_lines.append(line)
        rep.lines.append(line)
    return rep


def _accuracy_line(session: SessionState, mode: OutputMode) -> str:
    """The written model's accuracy on the check samples, per output and slice ("" without them):
    the fidelity check of the export just written (the same model, built again in memory)."""
    cal = session.calibration
    if cal is None or not cal.holdout:
        return ""
    from ..fidelity.measure import measure_session

    text: str = measure_session(session, output_mode=mode).exported_text()
    return text


def perf_report_meta(session: SessionState, march: MarchProfile, after: PerfResult,
                     accuracy: str = "") -> dict[str, str | int]:
    """The perf report's header: model, input shapes and cut, march, scales, compile log,
    precision line and (after an export) the exported model's accuracy."""
    from ..files.report import cut_text
    from ..model.shapes import format_shape
    from ..perf.precision import precision_table_text

    g = session.graph
    shapes = ", ".join(f"{k}={format_shape(v)}" for k, v in g.input_shapes.items())
    meta: dict[str, str | int] = {
            "model": g.path.name if g.path else "model", "input": shapes + cut_text(g), "march": march.name,
            "nodes": len(g.nodes), "groups": len(session.groups),
            "scales": "read from the QDQ file" if session.quantized_file else
            f"calibrated ({session.calibration.data_label()})" if session.calibration else "not calibrated"}
    if session.compiler_log is not None:
        from ..horizon.report import scales_text

        meta["compile log"] = scales_text(session)
    if after.precision is not None:
        meta["precision"] = precision_table_text(after).splitlines()[0]
    if accuracy:
        meta["accuracy"] = accuracy.removeprefix("accuracy of the exported model ")
    return meta


def write_perf_report(session: SessionState, html: StrPath | None, csv: StrPath | None, *,
                      march: MarchProfile | None = None, march_file: str | None = None, after: PerfResult | None = None,
                      before: PerfResult | None = None, accuracy: str = "",
                      inputs: Iterable[StrPath | None] = ()) -> list[Path]:
    """Write the HTML perf report and/or its CSV layer table (atomically); returns the paths written.
    ``march``/``after``/``before``: already loaded and simulated (else done here, with ``march_file``)."""
    from ..base.fileio import atomic_write_text
    from ..perf import load_march, simulate_session
    from ..perf.report import csv_text, html_report

    if march is None:
        march = load_march(march_file or session.options.march)
    mf = march.path or None
    if after is None:
        after = simulate_session(session, march_file=mf)
    given = list(inputs)
    out: list[Path] = []
    if html is not None:
        if before is None:
            before = simulate_session(session, march_file=mf, baseline=True)
        edited = len(session.groups) > 0 or bool(session.options.precision)  # before: the model as opened
        meta = perf_report_meta(session, march, after, accuracy)
        atomic_write_text(html, html_report(after, before if edited else None,
                                            title=f"qtquant perf — {meta['model']} on {march.name}", meta=meta,
                                            march=march), inputs=given, what="report")
        out.append(Path(html))
    if csv is not None:
        atomic_write_text(csv, csv_text(after), inputs=given, what="CSV file")
        out.append(Path(csv))
    return out
