"""Tables for the terminal (rich) and for pasting (Markdown), from one description."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

DASH = "–"  # a value that is not known (e.g. no per-call samples)


def num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    return f"{x:.{digits}f}"


def size_text(nbytes: float, _pos: object = None) -> str:
    """A byte count in the largest binary unit it fills: ``16 KiB``, ``14.9 GiB`` (also a matplotlib tick
    formatter, hence ``_pos``)."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div:
            return f"{nbytes / div:g} {unit}" if nbytes % div == 0 else f"{nbytes / div:.1f} {unit}"
    return f"{nbytes:g} B"


def pct(x: float | None) -> str:
    return DASH if x is None else f"{x * 100:.1f} %"


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    right: set[int] = field(default_factory=set)       # right-aligned columns
    title: str = ""
    marked: set[tuple[int, int]] = field(default_factory=set)  # (row, column) cells to emphasise
    wraps: set[int] = field(default_factory=set)       # columns whose cells may break (HTML): ranges, notes

    def add(self, cells: list[str]) -> None:
        self.rows.append(cells)

    def markdown(self) -> str:
        def esc(s: str) -> str:
            return s.replace("|", "\\|").replace("\n", " ")

        out = []
        if self.title:
            out += [f"**{esc(self.title)}**", ""]
        out.append("| " + " | ".join(esc(h) for h in self.headers) + " |")
        out.append("|" + "|".join("---:" if i in self.right else "---" for i in range(len(self.headers))) + "|")
        for r, cells in enumerate(self.rows):
            shown = [f"**{esc(c)}**" if (r, i) in self.marked and c != DASH else esc(c) for i, c in enumerate(cells)]
            out.append("| " + " | ".join(shown) + " |")
        return "\n".join(out) + "\n"

    def rich(self):  # -> rich.table.Table
        from rich.table import Table as RichTable
        from rich.text import Text

        # the mark stays visible where colour is lost (pipes, logs)
        caption = "* best in its row" if self.marked else None
        t = RichTable(title=self.title or None, title_justify="left", header_style="bold", caption=caption,
                      caption_justify="left")
        for i, h in enumerate(self.headers):
            t.add_column(h, justify="right" if i in self.right else "left", overflow="fold")
        for r, cells in enumerate(self.rows):
            t.add_row(*(Text(c + " *", style="bold green") if (r, i) in self.marked else Text(c)
                        for i, c in enumerate(cells)))
        return t


def console(file=None):
    """A rich console that does not squeeze wide tables when output is not a terminal."""
    from rich.console import Console

    f = file or sys.stdout
    tty = hasattr(f, "isatty") and f.isatty()
    return Console(file=f, highlight=False, soft_wrap=False, width=None if tty else 220)
