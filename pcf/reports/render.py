"""Rendering a report: Markdown and one self-contained HTML page from one template
(``report.j2``), ``report.json``, and the charts as SVG and PNG (a chart that fails is named)."""

from __future__ import annotations

import base64
import functools
import html
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import altair as alt
import jinja2
import pandas as pd
from markupsafe import Markup

from pcf.analysis.markdown import escape_markdown, markdown_literal
from pcf.analysis.results import SIMULATED_NOTE, value_or_none
from pcf.files import write_whole
from pcf.reports.document import Figure, Report, Table

MISSING = "–"
COUNT_COLUMNS = frozenset(
    {"N", "K", "n", "slot", "items", "pairs", "correct", "incorrect", "tie", "improved"}
    | {"regressed", "same", "labelled", "top picks", "ok calls", "primacy", "recency"}
)
"""Columns of counts: printed without decimals even when a missing value made them floats."""


NUMBER_FORMATS = {
    "official score %": ".2f",
    "McNemar p": ".3g",
    "p": ".3g",
    "cost (USD)": ".4f",
    "cost per item (USD)": ".6f",
    "calls per item": ".2f",
    **dict.fromkeys(("ws", "wB", "wv", "wu", "temperature"), ".2f"),
}
"""Columns whose numbers have their own format (else: % one decimal, Δ and CI signed)."""


def _number_format(column: str) -> str:
    """The format of a non-count number; the column name decides."""
    if column in NUMBER_FORMATS:
        return NUMBER_FORMATS[column]
    if column.endswith("%"):
        return ".1f"
    if "Δ" in column or column.startswith("CI "):
        return "+.1f"
    return ".3f"


def _cell(column: str, value: Any) -> str:
    """One cell as text: missing values as a dash, counts without decimals."""
    if value_or_none(value) is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int) or (column in COUNT_COLUMNS and float(value).is_integer()):
        return f"{int(value):d}"
    return format(float(value), _number_format(column))


def display_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as text, formatted as the report prints it (the page shows the same)."""
    return pd.DataFrame(
        {
            str(column): [_cell(str(column), _plain(v)) for v in frame[column]]
            for column in frame.columns
        },
        dtype=object,
    )


def _plain(value: Any) -> Any:
    """numpy scalars as Python values."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


def _numeric(frame: pd.DataFrame) -> set[str]:
    return {str(c) for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])}


def _table_view(frame: pd.DataFrame) -> dict[str, list[Any]]:
    """The table as ``report.j2`` prints it: formatted rows, and which columns are numbers."""
    shown, numeric = display_frame(frame), _numeric(frame)
    return {
        "columns": list(shown.columns),
        "numeric": [c in numeric for c in shown.columns],
        "rows": shown.values.tolist(),
    }


def page_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as the report prints it, text cells inert for the app's ``st.table``."""
    shown, numeric = display_frame(frame), _numeric(frame)
    for column in shown.columns:
        if column not in numeric:
            shown[column] = [escape_markdown(value) for value in shown[column]]
    return shown


FIELD_NAMES = {
    "N": "n",
    "K": "k",
    "direct %": "direct_accuracy",
    "accuracy %": "accuracy",
    "PCF %": "accuracy",
    "APOCJudge %": "accuracy",
    "Δ points": "delta_points",
    "Δ vs direct (points)": "delta_points",
    "McNemar p": "mcnemar_p",
    "CI low": "ci_low_points",
    "CI high": "ci_high_points",
    "cost (USD)": "cost_usd",
    "p": "p_value",
    **{name: name for name in ("ws", "wB", "wv", "wu")},
}
"""``report.json`` names of columns that :func:`field_name`'s rule does not name well."""


def field_name(column: str) -> str:
    """The ``report.json`` name of a column: :data:`FIELD_NAMES`, else snake case with ``%`` as
    ``pct`` and ``Δ`` as ``delta``."""
    if column in FIELD_NAMES:
        return FIELD_NAMES[column]
    text = column.replace("%", " pct").replace("Δ", "delta ").lower()
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def table_records(table: Table) -> list[dict[str, Any]]:
    """The table's rows as records (``run`` first when the table is about one run)."""
    names = [field_name(str(c)) for c in table.frame.columns]
    context = {"run": table.run} if table.run is not None else {}
    return [
        context | {name: value_or_none(_plain(v)) for name, v in zip(names, row, strict=True)}
        for row in table.frame.itertuples(index=False)
    ]


def report_json(report: Report) -> dict[str, Any]:
    """The report as data: ``{"title", "simulated", "tables": {key: [records]}, "about":
    {key: [{"title", "note", "simulated"}]}}``; tables sharing a key are listed together."""
    tables: dict[str, list[dict[str, Any]]] = {}
    about: dict[str, list[dict[str, Any]]] = {}
    for table in report.blocks(Table):
        key = table.key or field_name(table.title)
        tables.setdefault(key, []).extend(table_records(table))
        described = {"title": table.title, "note": table.note, "simulated": table.simulated}
        about.setdefault(key, []).append(described | ({"run": table.run} if table.run else {}))
    return {"title": report.title, "simulated": report.simulated, "tables": tables, "about": about}


SIMULATED_TAG = "Simulated judge: see the note at the top."
"""What a table or chart of simulated runs says; the note itself stands once, at the top."""


@dataclass(frozen=True)
class RenderedCharts:
    """Rendered charts by figure name (SVG, PNG), and why each failed figure failed."""

    svg: dict[str, str]
    png: dict[str, bytes]
    errors: dict[str, str]


def chart_svg(chart: Any) -> str:
    """The chart as SVG text (``vl-convert``)."""
    buffer = io.StringIO()
    chart.save(buffer, format="svg")
    return buffer.getvalue()


def chart_png(chart: Any) -> bytes:
    """The chart as PNG bytes at twice the size (``vl-convert``)."""
    buffer = io.BytesIO()
    chart.save(buffer, format="png", scale_factor=2)
    return buffer.getvalue()


def standalone_chart(figure: Figure) -> Any:
    """The figure's chart, titled as simulated when it is: an image travels without the note."""
    if not figure.simulated:
        return figure.chart
    mark = alt.TitleParams(  # in the colour of the HTML report's banner
        "Simulated judge", subtitle=SIMULATED_NOTE, anchor="start", color="#8a4b00"
    )
    return figure.chart.properties(title=mark)


def render_charts(report: Report, *, png: bool = True) -> RenderedCharts:
    """Render every figure (:func:`standalone_chart`); a failure is recorded, never raised."""
    charts = RenderedCharts(svg={}, png={}, errors={})
    for figure in report.blocks(Figure):
        try:
            chart = standalone_chart(figure)
            charts.svg[figure.name] = chart_svg(chart)
            if png:
                charts.png[figure.name] = chart_png(chart)
        except Exception as exc:  # any renderer failure: the report goes on without the chart
            charts.svg.pop(figure.name, None)
            charts.errors[figure.name] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            )
    return charts


@functools.cache
def _template(kind: str) -> jinja2.Template:
    """``report.j2`` writing ``kind``, every value but Markup escaped for it: inert Markdown
    (``md``) or escaped HTML."""
    escape = markdown_literal if kind == "md" else html.escape

    def escaped(value: Any) -> Markup:
        if isinstance(value, Markup):
            return value
        return Markup(escape(str(value)))  # noqa: S704 (escaped for the format)

    environment = jinja2.Environment(
        autoescape=True,  # a macro's output is Markup: escaped once, not again where it is used
        finalize=escaped,
        undefined=jinja2.StrictUndefined,
    )
    # a cell of a pipe table in report.md, inert
    environment.filters["cell"] = lambda text: Markup(markdown_literal(text, in_table=True))  # noqa: S704
    source = resources.files("pcf.reports").joinpath("report.j2").read_text(encoding="utf-8")
    return environment.from_string(source)


def render(
    report: Report, charts: RenderedCharts, kind: str, images: Mapping[str, str] | None = None
) -> str:
    """The report as Markdown (``kind`` ``md``) or as one self-contained HTML page (``html``:
    no script, no external resource; charts are inline SVG images), every text inert or escaped
    (``report.j2``). In Markdown, ``images`` maps figure names to their PNG files (others point to
    ``report.html``), and only the charts' errors are used."""
    svg = {
        name: "data:image/svg+xml;base64," + base64.b64encode(text.encode("utf-8")).decode()
        for name, text in charts.svg.items()
    }
    text = _template(kind).render(
        html=kind == "html",
        report=report,
        tables=_table_view,
        svg=svg,
        errors=charts.errors,
        images=images or {},
        simulated_note=f"Simulated judge: {SIMULATED_NOTE}.",
        simulated_tag=SIMULATED_TAG,
    )
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"  # one blank line between blocks


def report_json_text(report: Report) -> str:
    """``report.json`` (:func:`report_json`) as text."""
    return json.dumps(report_json(report), ensure_ascii=False, indent=1, allow_nan=False) + "\n"


REPORT_FILES = {"md": "text/markdown", "html": "text/html", "json": "application/json"}
"""The report's files for download, by extension: their MIME types."""


def report_file(report: Report, kind: str) -> str:
    """The report file of ``kind`` (:data:`REPORT_FILES`) as text, for a download."""
    if kind == "json":
        return report_json_text(report)
    return render(report, render_charts(report, png=False), kind)


def write_report(report: Report, out: Path) -> dict[str, Any]:
    """Write ``report.md``, ``report.html``, ``report.json`` and ``charts/<name>.png`` into
    ``out``; returns the paths written and ``chart_errors`` (figure name -> reason)."""
    out.mkdir(parents=True, exist_ok=True)
    charts = render_charts(report)
    images = {name: f"charts/{name}.png" for name in charts.png}
    if images:
        (out / "charts").mkdir(exist_ok=True)
    for name, data in charts.png.items():
        write_whole(out / images[name], data)
    write_whole(out / "report.md", render(report, charts, "md", images))
    write_whole(out / "report.html", render(report, charts, "html"))
    write_whole(out / "report.json", report_json_text(report))
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "json": str(out / "report.json"),
        "charts": [str(out / path) for path in images.values()],
        "chart_errors": charts.errors,
    }
