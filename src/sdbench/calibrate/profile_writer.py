"""Writing profiles: a fit's results into card, host and flash profiles (write_results, write_profile), their
comments kept, and how a fitted field's σ is reported (describe_sd, sd_cells)."""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from .. import profiles
from ..options import parse_toml, read_text_file, toml_string
from ..output_files import write_atomically
from ..stack.cardpop import card_population
from .fit_groups import DATA, TARGETS, _INT_FIELDS, _table, groups
from .fitting import FitResult
from .uncertainty import MAX_REL_SD, Uncertainty


#: the words that start the header block `sdbench calibrate` writes into a profile it fitted; the group follows
FITTED_BY = profiles.FITTED_MARK
_FITTED_RE = re.compile(r"fitted by `sdbench calibrate ([^`\s]*)")
_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*=")


def _fmt(name: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, dict) and name == "unfitted":  # field -> its value before any fit
        return "{ " + ", ".join(f"{k} = {_fmt(k, x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, dict):  # fit_rel_sd: field -> σ / value, three significant digits
        return "{ " + ", ".join(f"{k} = {_fmt_sd(x)}" for k, x in v.items()) + " }" if v else "{}"
    if name in _INT_FIELDS:
        return str(int(round(v)))
    return repr(round(float(v), 3))


def _comment_text(text: str) -> str:
    """``text`` fit for a TOML comment line: characters that would end the line or that TOML refuses in a
    comment (control characters, line and paragraph separators) escaped."""
    if all(c == "\t" or c.isprintable() for c in text):
        return text
    return "".join(c if c == "\t" or c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def _fmt_sd(v: float) -> str:
    text = f"{float(v):.3g}"
    return text if any(c in text for c in ".en") else text + ".0"


@dataclass
class ProfileLayout:
    """The comments of a profile file, kept when the file is written again with new values."""

    header: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (fit group or None, comment lines)
    before: dict[str, list[str]] = field(default_factory=dict)  # comment lines right above a field's line
    lines: dict[str, str] = field(default_factory=dict)          # each field's own line, as written
    tail: list[str] = field(default_factory=list)                 # comments after the last field


def profile_layout(text: str) -> ProfileLayout:
    """The layout of a profile's text: the comment blocks above its first field (a block starts at a line
    saying which `sdbench calibrate` group fitted it), the comments above each field, each field's line."""
    out = ProfileLayout()
    pending: list[str] = []
    seen_key = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if not seen_key:
                m = _FITTED_RE.search(stripped)
                if m or not out.header:
                    out.header.append((m.group(1) if m else None, [stripped]))
                else:
                    out.header[-1][1].append(stripped)
            else:
                pending.append(stripped)
            continue
        m = _KEY_RE.match(line)
        if m:
            seen_key = True
            out.before[m.group(1)] = pending
            out.lines[m.group(1)] = line.rstrip()
            pending = []
    out.tail = pending
    return out


def profile_text(kind: str, table: dict[str, Any], header: list[str], layout: ProfileLayout | None = None,
                 changed: set[str] | frozenset[str] = frozenset()) -> str:
    """A profile's TOML: the header comment blocks (``header``, the block of this fit, replaces the layout's
    block of the same fit group or comes after the others), then the table's fields in declaration order,
    each below the comments the layout had above it and on the line it had unless it is in ``changed``."""
    layout = layout or ProfileLayout()
    cls = TARGETS[kind][2]
    mine = _FITTED_RE.search(header[0]) if header else None
    group = mine.group(1) if mine else None
    blocks = [(g, lines) for g, lines in layout.header if g is not None]
    plain = [lines for g, lines in layout.header if g is None]
    new = [f"# {_comment_text(h)}" for h in header]
    if new:
        at = next((i for i, (g, _) in enumerate(blocks) if g == group), None)
        if at is None:
            blocks.append((group, new))
        else:
            blocks[at] = (group, new)
    lines = [ln for _, block in blocks for ln in block] + [ln for block in plain for ln in block]
    for k in (f.name for f in fields(cls)):
        if k not in table or (k in ("fit_rel_sd", "unfitted") and not table[k]):
            continue
        lines += layout.before.get(k, [])
        old = layout.lines.get(k)
        if old is not None and k not in changed and k not in ("fit_rel_sd", "unfitted") \
                and _line_value(old, k) == table[k]:
            lines.append(old)
        else:
            lines.append(f"{k} = {_fmt(k, table[k])}")
    lines += layout.tail
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # never write a profile that does not load
    return text


def _line_value(line: str, key: str) -> Any:
    try:
        return tomllib.loads(line).get(key, MISSING)
    except tomllib.TOMLDecodeError:
        return MISSING


def write_profile(kind: str, name: str, updates: dict[str, float], out_dir: Path, header: list[str],
                  rel_sd: dict[str, float] | None = None) -> Path:
    """Write profile ``name`` = the profile with ``updates`` applied, to out_dir/<folder>/<name>.toml.

    The profile starts from out_dir's copy when there is one (a run of several groups fills in one file), else
    from the shipped one; its comments stay. ``fit_rel_sd`` gets ``rel_sd`` (σ / value of the fields this fit
    tells) for the fields in ``updates``; what it records for other fields (fitted by other groups) stays.
    ``unfitted`` keeps, for each field a fit ever changed, the value it had before the first fit: for a card
    that took the field from the population (``timing_from``), the population's value then."""
    _, folder, _, _ = TARGETS[kind]
    path = out_dir / folder / f"{name}.toml"
    if path.is_file():
        text = read_text_file(path, f"{kind} profile")
        table = parse_toml(text, str(path))
    else:
        table = _table(kind, name)
        res = DATA / folder / f"{name}.toml"
        text = res.read_text() if res.is_file() else ""
    unfitted = dict(table.get("unfitted") or {})
    fitted_before = table.get("fit_rel_sd") if isinstance(table.get("fit_rel_sd"), dict) else {}
    # a group that fitted this profile before names itself in its header: its fields hold that fit's values
    # (those it fitted without a σ too), not the sources'
    group = re.match(r"fitted by `sdbench calibrate [^`]+`", header[0]) if header else None
    refit = group is not None and group.group(0) in text
    held = card_population().medians if kind == "card" and table.get("timing_from") == "population" else {}
    for k in updates:
        # only a first fit records: a card that took the field from the population had the population's value
        before = table.get(k, held.get(k))
        if k not in unfitted and k not in fitted_before and not refit and isinstance(before, (int, float)) \
                and not isinstance(before, bool):
            unfitted[k] = before
    table["unfitted"] = {k: unfitted[k] for k in (f.name for f in fields(TARGETS[kind][2])) if k in unfitted}
    table.update(updates)
    old_sd = table.get("fit_rel_sd") if isinstance(table.get("fit_rel_sd"), dict) else {}
    sd = {k: v for k, v in old_sd.items() if k not in updates}
    sd.update({k: v for k, v in (rel_sd or {}).items() if k in updates})
    order = [f.name for f in fields(TARGETS[kind][2])]
    table["fit_rel_sd"] = {k: sd[k] for k in order if k in sd}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, profile_text(kind, table, header, profile_layout(text), set(updates)))
    return path


def describe_sd(u: Uncertainty) -> str:
    """A field's σ as the reports say it: "σ 1.53 % of 226.1 (from the measurement)", or why there is none."""
    rel = u.rel_sd
    if rel is not None:
        return f"σ {rel * 100:.3g} % of {u.value:.6g} (from the {u.status})"
    if u.sd is not None and u.value:
        return (f"σ {u.sd / abs(u.value) * 100:.3g} % of {u.value:.6g}, not recorded: the rows tell it only "
                f"together with other fields")
    if u.sd is not None:
        return f"σ {u.sd:.3g} at 0 (from the {u.status}; a relative σ of 0 is not defined)"
    return f"no σ ({u.status})"


def sd_cells(u: Uncertainty) -> tuple[str, str]:
    """(σ / value, where it comes from) of a field for a report table."""
    rel = u.rel_sd
    if rel is not None:
        return f"{rel * 100:.3g} %", u.status
    if u.sd is not None and u.value:
        return f"{u.sd / abs(u.value) * 100:.3g} %", f"{u.status}; above {MAX_REL_SD * 100:.0f} %: not recorded"
    return "-", u.status


def _sd_lines(uncertainty: list[Uncertainty], target: str | None = None,
              names: set[str] | None = None) -> list[str]:
    """Header lines: each fitted field's σ and where it comes from."""
    out = []
    for u in uncertainty:
        if (target is not None and u.target != target) or (names is not None and u.name not in names):
            continue
        out.append(f"  {u.name}: {describe_sd(u)}")
    return out


def write_results(res: FitResult, out_dir: Path) -> list[Path]:
    paths = []
    by_scen: dict[str, list[tuple[str, float, float]]] = {}
    for s, row, m, p in res.residuals:
        by_scen.setdefault(s, []).append((row, m, p))
    for s, params in res.card_params.items():
        if not params:
            continue
        hdr = [f"{FITTED_BY} {res.group}` from the train rows of {s}:"]
        hdr += [f"  {row}: measured {m:g}, model {p:.4g} ({(p - m) / m * 100:+.1f} %)" for row, m, p in
                by_scen.get(s, [])]
        sd_lines = _sd_lines(res.uncertainty, f"card:{s}")
        if sd_lines:
            hdr += ["standard deviations (fit_rel_sd; docs/calibration.md):", *sd_lines]
        paths.append(write_profile("card", res.card_names[s], params, out_dir, hdr, res.card_rel_sd.get(s, {})))
    if res.host_params:
        host = res.host or groups()[res.group].host
        hdr = [f"fields {', '.join(sorted(res.host_params))} {FITTED_BY} {res.group}`"]
        sd_lines = _sd_lines(res.uncertainty, "host")
        if sd_lines:
            hdr += ["standard deviations (fit_rel_sd; docs/calibration.md):", *sd_lines]
        paths.append(write_profile("host", host, res.host_params, out_dir, hdr, res.host_rel_sd))
    for (kind, name), params in res.other.items():
        hdr = [f"fields {', '.join(sorted(params))} {FITTED_BY} {res.group}` from:"]
        hdr += [f"  {s}: {row}: measured {m:g}, model {p:.4g} ({(p - m) / m * 100:+.1f} %)"
                for s, row, m, p in res.residuals]
        sd_lines = _sd_lines([u for u in res.uncertainty if u.target.startswith(f"{kind}:")], None, set(params))
        if sd_lines:
            hdr += ["standard deviations (fit_rel_sd; docs/calibration.md):", *sd_lines]
        paths.append(write_profile(kind, name, params, out_dir, hdr, res.other_rel_sd.get((kind, name), {})))
    return paths


def relative_error(measured: float, predicted: float) -> float:
    return (predicted - measured) / measured if measured else math.inf
