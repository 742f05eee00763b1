"""The one ``-f/--format`` vocabulary of the commands that print results, and how they print tables.

Every command with ``-f`` takes names from :data:`VOCABULARY` only, declared here with :func:`format_enum` and
:func:`format_option`:

``md``      Markdown: every table sdbench prints is a Markdown table (it pastes into an issue or a README)
``json``    the command's results as one JSON document
``csv``     one line per table row, for spreadsheets
``espidf``, ``sdfat``, ``fio``  a tool's own output: what a protocol prints as the tool it mirrors does (the
            protocol registry's text formats), and what ``import`` reads (the importers' formats)

A command offers the names that make sense for what it prints (``FORMATS`` lists them), in this order. A new
command or a new kind of output adds its names here, so that ``-f json`` means the same everywhere.
"""
from __future__ import annotations

import csv
import io
import json
import re
from enum import Enum
from typing import Any

import typer

from ..workloads.registry import text_formats

#: the generic formats and what each gives
GENERIC = {"md": "Markdown tables", "json": "a JSON document", "csv": "CSV, one line per table row"}


def native_formats() -> dict[str, str]:
    """The protocols' own output formats (name -> what it is), from the protocol registry."""
    return {name: f"{name}'s own output" for name in text_formats()}


def import_formats() -> tuple[str, ...]:
    from ..importers import FORMATS as READ

    return READ


def vocabulary() -> dict[str, str]:
    """Every name ``-f`` can take, in the order help texts list them."""
    tools = {name: f"{name}'s own output" for name in import_formats() if name not in GENERIC}
    return {**GENERIC, **native_formats(), **tools}


#: the formats each command offers ("natives": the protocols' own formats), first the default where the command
#: has a fixed one
FORMATS: dict[str, tuple[str, ...]] = {
    "run": ("md", "json", "csv", "natives"),
    "runs": ("md", "json", "csv"),
    "show": ("md", "json", "csv"),
    "compare": ("md", "json", "csv"),
    "export": ("json", "csv", "md", "natives"),
    "capacity": ("md", "json"),
    "probe": ("md", "json"),
    "powerloss": ("md", "json"),
    "logger": ("md", "json"),
    "import": ("imports",),
}


def names_of(command: str) -> tuple[str, ...]:
    out: list[str] = []
    for n in FORMATS[command]:
        out += list(native_formats()) if n == "natives" else list(import_formats()) if n == "imports" else [n]
    return tuple(out)


def format_enum(command: str) -> Any:
    """The Enum ``command``'s -f option is typed with (its names from the vocabulary)."""
    return Enum(f"{command.title()}Format", {n: n for n in names_of(command)}, type=str)  # type: ignore[misc]


def format_option(command: str, default: str | None = None, *, tail: str = "", **what: str) -> Any:
    """``-f/--format`` of ``command``: its names, each with what it gives there (``what``: name -> text, for the
    names whose meaning this command makes more precise than the vocabulary's); ``tail``: what the option is, when
    it is not the output's format."""
    known = vocabulary()
    parts = [f"{n}: {what.get(n, known[n])}" for n in names_of(command)]
    notes = [tail] if tail else []
    notes += [f"default: {default}"] if default is not None else []
    more = f" ({'; '.join(notes)})" if notes else ""
    return typer.Option(default, "--format", "-f", help="; ".join(parts) + more + ".", show_default=False)


def table_text(table: Any, fmt: str) -> str:
    """A table (report.text.Table: headers, rows) as ``fmt``: md, json (a list of objects, one per row, keyed by
    the headers) or csv."""
    if fmt == "json":
        numeric = getattr(table, "right", set())  # the right-aligned columns hold figures; the rest is text
        rows = [{h: _json_cell(c, i in numeric) for i, (h, c) in enumerate(zip(table.headers, row))}
                for row in table.rows]
        return json.dumps(rows, ensure_ascii=False, indent=1) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(table.headers)
        w.writerows(table.rows)
        return buf.getvalue()
    return str(table.markdown())


def _json_cell(cell: Any, numeric: bool) -> Any:
    """A table cell as JSON: the dash of an unknown value as null; in a column of figures a whole number as a
    number; the rest as shown (text, a figure with its unit, a formatted decimal)."""
    from ..report.text import DASH

    if cell == DASH:
        return None
    if numeric and isinstance(cell, str) and _WHOLE.fullmatch(cell):
        return int(cell)
    return cell


#: a whole number as a table prints it in a column of figures (no leading zeros, at most 18 digits)
_WHOLE = re.compile(r"-?(0|[1-9][0-9]{0,17})")


def print_table(table: Any, fmt: Any) -> None:
    typer.echo(table_text(table, format_name(fmt)), nl=False)


def format_name(fmt: Any) -> str:
    return "md" if fmt is None else str(getattr(fmt, "value", fmt))


def md_table(title: str | None, headers: list[str], rows: list[list[Any]], numbers: bool = True,
             echo: bool = True) -> str:
    """A Markdown table with aligned columns (numbers right-aligned unless ``numbers`` is False), printed unless
    ``echo`` is False; returns its text."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(box=box.MARKDOWN, title=title, title_justify="left")
    for i, h in enumerate(headers):
        t.add_column(h, justify="right" if i and numbers else "left", overflow="fold")
    for r in rows:
        t.add_row(*[_cell(x) for x in r])
    # render without colour or padding lines, so the table pastes into Markdown as it is
    buf = io.StringIO()
    Console(file=buf, width=250, color_system=None, highlight=False).print(t)
    text = "\n".join(line.rstrip() for line in buf.getvalue().splitlines() if line.strip())
    if echo:
        typer.echo(text)
    return text


def _cell(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0:
            return "0"
        return f"{x:,.0f}" if abs(x) >= 1000 else (f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}")
    return str(x)


def is_json(fmt: Any) -> bool:
    return format_name(fmt) == "json"
