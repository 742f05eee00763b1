"""Option kinds the commands share: sizes.

Every option that is a size takes the same forms, through one parser: bytes, with binary suffixes or an
exponent (``4096``, ``4k``, ``1M``, ``64MiB``, ``2g``, ``1e6``), or in hex (``0x100000``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from ..errors import ConfigError
from ..options import INT_LIMIT
from ..workloads.fio import parse_size

SIZE_FORMS = "bytes, or with a suffix: 4k, 1M, 64MiB, 1e6, or in hex: 0x100000"


def size_parser(flag: str, minimum: int = 0, maximum: int = INT_LIMIT - 1) -> Callable[[Any], int]:
    """``flag``'s value as bytes (the one size parser), checked against its bounds."""
    def parse(value: Any) -> int:
        n = parse_size(value, flag)
        if not minimum <= n <= maximum:
            bound = f"at least {minimum} B" if n < minimum else f"at most {maximum} B"
            raise ConfigError(f"{flag} {value}: {n} B; it must be {bound}")
        return n
    return parse


def size_option(default: int | None, *flags: str, help: str, minimum: int = 0,
                maximum: int = INT_LIMIT - 1) -> Any:
    """An option that is a size (``help`` says what it is, and its default where it has one; the forms it takes
    are added)."""
    return typer.Option(default, *flags, parser=size_parser(flags[0], minimum, maximum), metavar="SIZE",
                        help=f"{help} ({SIZE_FORMS}).", show_default=False)
