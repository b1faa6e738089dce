"""Rendering a report: tables formatted as text, Markdown, one self-contained HTML page, and
the charts as SVG and PNG (``vl-convert``); a chart that cannot be rendered is named in the
report and the tables are written regardless."""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from pcf.analysis.markdown import escape_markdown, markdown_literal
from pcf.analysis.results import SIMULATED_LABEL, SIMULATED_NOTE
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
    if value is None or (isinstance(value, float) and math.isnan(value)):
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


def _md_cell(text: str) -> str:
    return markdown_literal(text, in_table=True)


def markdown_table(frame: pd.DataFrame) -> str:
    """A pipe table of the formatted frame, every cell inert (:func:`markdown_literal`)."""
    shown = display_frame(frame)
    numeric = _numeric(frame)
    header = "| " + " | ".join(_md_cell(c) for c in shown.columns) + " |"
    rule = "|" + "|".join("---:" if c in numeric else "---" for c in shown.columns) + "|"
    body = [
        "| " + " | ".join(_md_cell(v) for v in row) + " |" for row in shown.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def page_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as the app's page shows it (st.table renders Markdown in its cells): formatted
    as the report prints it, the text cells inert (:func:`escape_markdown`)."""
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
"""Record names of the report's columns in ``report.json``; any other column is named by
:func:`field_name`'s rule. Accuracies and ``*_pct`` fields are percent, deltas points."""


def field_name(column: str) -> str:
    """The ``report.json`` name of a column: :data:`FIELD_NAMES`, else lower case with ``%``
    as ``pct``, ``Δ`` as ``delta`` and every other run of non-alphanumerics as ``_``."""
    if column in FIELD_NAMES:
        return FIELD_NAMES[column]
    text = column.replace("%", " pct").replace("Δ", "delta ").lower()
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def _json_value(value: Any) -> Any:
    """A cell as JSON: Python numbers and strings, None for a missing value."""
    value = _plain(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def table_records(table: Table) -> list[dict[str, Any]]:
    """The table's rows as records (``run`` first when the table is about one run)."""
    names = [field_name(str(c)) for c in table.frame.columns]
    context = {"run": table.run} if table.run is not None else {}
    return [
        context | {name: _json_value(v) for name, v in zip(names, row, strict=True)}
        for row in table.frame.itertuples(index=False)
    ]


def report_json(report: Report) -> dict[str, Any]:
    """The report as data: ``{"title", "simulated", "tables": {key: [records]}, "about":
    {key: [{"title", "note", "simulated"}]}}``; tables sharing a key are listed together."""
    tables: dict[str, list[dict[str, Any]]] = {}
    about: dict[str, list[dict[str, Any]]] = {}
    for table in report.tables():
        key = table.key or field_name(table.title)
        tables.setdefault(key, []).extend(table_records(table))
        described = {"title": table.title, "note": table.note, "simulated": table.simulated}
        about.setdefault(key, []).append(described | ({"run": table.run} if table.run else {}))
    return {"title": report.title, "simulated": report.simulated, "tables": tables, "about": about}


SIMULATED_TAG = "Simulated judge: see the note at the top."
"""What a table or chart of simulated runs says; the note itself stands once, at the top."""


def _simulated_note() -> str:
    return f"Simulated judge: {SIMULATED_LABEL.removeprefix('simulated judge: ')}."


@dataclass(frozen=True)
class RenderedCharts:
    """Charts rendered for the files: SVG text and PNG bytes by figure name, and the reason
    for every figure that could not be rendered."""

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
    """The figure's chart as a file of its own shows it: a chart of the simulated judge says so
    in its title, since an image travels without the report's note."""
    if not figure.simulated:
        return figure.chart
    mark = alt.TitleParams(  # in the colour of the HTML report's banner
        "Simulated judge", subtitle=SIMULATED_NOTE, anchor="start", color="#8a4b00"
    )
    return figure.chart.properties(title=mark)


def render_charts(report: Report, *, png: bool = True) -> RenderedCharts:
    """Render every figure (:func:`standalone_chart`); a failure is recorded with its reason,
    never raised."""
    svg: dict[str, str] = {}
    pngs: dict[str, bytes] = {}
    errors: dict[str, str] = {}
    for figure in report.figures():
        try:
            chart = standalone_chart(figure)
            svg[figure.name] = chart_svg(chart)
            if png:
                pngs[figure.name] = chart_png(chart)
        except Exception as exc:  # any renderer failure: the report goes on without the chart
            svg.pop(figure.name, None)
            errors[figure.name] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            )
    return RenderedCharts(svg, pngs, errors)


def render_markdown(
    report: Report, charts: RenderedCharts, images: Mapping[str, str] | None = None
) -> str:
    """The report as Markdown with pipe tables.

    Args:
        report: the report.
        charts: its rendered charts (only their errors are used here).
        images: figure name -> relative path of its PNG file; figures without a file point to
            ``report.html``.
    """
    images, md = images or {}, markdown_literal  # every text inert: names come from anyone
    lines = [f"# {md(report.title)}", ""]
    if report.intro:
        lines += [md(report.intro), ""]
    if report.simulated:
        lines += [f"> **{md(_simulated_note())}**", ""]
    for section in report.sections:
        lines += [f"## {md(section.title)}", ""]
        for block in section.blocks:
            if isinstance(block, str):
                lines += [md(block), ""]
                continue
            lines += [f"### {md(block.title)}", ""]
            if isinstance(block, Table):
                lines += [markdown_table(block.frame), ""]
            elif block.name in charts.errors:
                reason = md(charts.errors[block.name])
                lines += [f"*The chart could not be rendered ({reason}).*", ""]
            elif block.name in images:
                lines += [f"![{md(block.title)}]({images[block.name]})", ""]
            else:
                lines += ["*The chart is in report.html.*", ""]
            if block.note:
                lines += [md(block.note), ""]
            if block.simulated:
                lines += [f"*{SIMULATED_TAG}*", ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
  color: #1f2933; background: #fff; }
main { max-width: 1160px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 1.7rem; margin-bottom: .4rem; }
h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 1px solid #d9dee3;
  padding-bottom: .3rem; }
h3 { font-size: 1rem; margin: 1.4rem 0 .5rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: .86rem; }
th, td { border: 1px solid #d9dee3; padding: 4px 8px; text-align: left; white-space: nowrap; }
th { background: #f2f4f6; white-space: normal; vertical-align: bottom; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #fafbfc; }
p.note { color: #52606d; font-size: .85rem; margin: .4rem 0; max-width: 60rem; }
p.simulated, div.banner { color: #8a4b00; background: #fff4e5; border-left: 4px solid #f0a030;
  padding: 4px 10px; font-size: .85rem; }
div.banner { font-size: .95rem; padding: 8px 12px; }
p.error { color: #a61b1b; }
img.chart { max-width: 100%; height: auto; }
"""


def html_table(frame: pd.DataFrame) -> str:
    """An HTML table of the formatted frame, every cell escaped."""
    shown = display_frame(frame)
    numeric = _numeric(frame)

    def cls(column: str) -> str:
        return ' class="num"' if column in numeric else ""

    head = "".join(f"<th{cls(c)}>{html.escape(c)}</th>" for c in shown.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{cls(c)}>{html.escape(v)}</td>" for c, v in zip(shown.columns, row, strict=True)
        )
        + "</tr>"
        for row in shown.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Report, charts: RenderedCharts) -> str:
    """The report as one self-contained HTML page: no script, no external resource; charts are
    inline SVG images (data URIs)."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(report.title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{esc(report.title)}</h1>",
    ]
    if report.intro:
        parts.append(f"<p>{esc(report.intro)}</p>")
    if report.simulated:
        parts.append(f'<div class="banner"><strong>{esc(_simulated_note())}</strong></div>')
    for section in report.sections:
        parts.append(f"<section><h2>{esc(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, str):
                parts.append(f"<p>{esc(block)}</p>")
                continue
            parts.append(f"<h3>{esc(block.title)}</h3>")
            if isinstance(block, Table):
                parts.append(f'<div class="scroll">{html_table(block.frame)}</div>')
            elif block.name in charts.svg:
                data = base64.b64encode(charts.svg[block.name].encode("utf-8")).decode("ascii")
                parts.append(
                    f'<figure><img class="chart" alt="{esc(block.title)}" '
                    f'src="data:image/svg+xml;base64,{data}"></figure>'
                )
            else:
                reason = charts.errors.get(block.name, "no renderer")
                parts.append(
                    f'<p class="error">The chart could not be rendered ({esc(reason)}).</p>'
                )
            if block.note:
                parts.append(f'<p class="note">{esc(block.note)}</p>')
            if block.simulated:
                parts.append(f'<p class="simulated">{esc(SIMULATED_TAG)}</p>')
        parts.append("</section>")
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def report_json_text(report: Report) -> str:
    """``report.json`` (:func:`report_json`) as text."""
    return json.dumps(report_json(report), ensure_ascii=False, indent=1, allow_nan=False) + "\n"


REPORT_FILES = {"md": "text/markdown", "html": "text/html", "json": "application/json"}
"""The report's files for download, by extension: their MIME types."""


def report_file(report: Report, kind: str) -> str:
    """``report.md``, ``report.html`` or ``report.json`` (``kind``: a key of
    :data:`REPORT_FILES`) as text, for a download; the Markdown names no PNG file."""
    if kind == "json":
        return report_json_text(report)
    charts = render_charts(report, png=False)
    return render_markdown(report, charts) if kind == "md" else render_html(report, charts)


def write_report(report: Report, out: Path) -> dict[str, Any]:
    """Write ``report.md``, ``report.html``, ``report.json`` (:func:`report_json`) and
    ``charts/<name>.png`` into ``out``.

    Returns:
        The paths written (``markdown``, ``html``, ``json``, ``charts``) and ``chart_errors``
        (figure name -> reason) for the charts that could not be rendered.
    """
    out.mkdir(parents=True, exist_ok=True)
    charts = render_charts(report)
    images = {}
    if charts.png:
        (out / "charts").mkdir(exist_ok=True)
    for name, data in charts.png.items():
        (out / "charts" / f"{name}.png").write_bytes(data)
        images[name] = f"charts/{name}.png"
    markdown, page = render_markdown(report, charts, images), render_html(report, charts)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    (out / "report.html").write_text(page, encoding="utf-8")
    (out / "report.json").write_text(report_json_text(report), encoding="utf-8")
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "json": str(out / "report.json"),
        "charts": [str(out / path) for path in images.values()],
        "chart_errors": charts.errors,
    }
