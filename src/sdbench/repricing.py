"""Rows at other parameters by re-pricing a recorded run (:mod:`sdbench.ledger`) instead of running it again.

A range member or a fit's trial differs from the run it varies only in profile fields.  When the run was
recorded (its requests to the driver models, the priced charges above them, its timed calls) and can be
re-priced, :func:`replayed_rows` builds the member's stack with a replaying recording (driver models that
move no data), replays the record into it and gives the rows the member's run would give: the same requests
in the same order, timed by the member's drivers, cards and chips, with the charges above them priced by its
profiles.  The filesystems do not run again, which is where most of a run's time goes.

That stands in for a run only while the member changes nothing the requests depend on: :func:`unpriceable`
says why a recording or a member cannot be re-priced (the caller runs it instead).
"""
from __future__ import annotations

from typing import Any

from .errors import SdbenchError
from .ledger import Price, Recording, replay
from .records import Row, make_row

#: profile fields read above the driver models (a block cache's and the filesystems' CPU clock): a member
#: that changes one is run, not re-priced
ABOVE_DRIVERS: dict[tuple[str, str], frozenset[str]] = {
    ("sd", "host_params"): frozenset({"cpu_hz"}),
    ("flash", "host_params"): frozenset({"cpu_hz"}),
}


def member_unpriceable(overrides: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Why a member with these profile overrides cannot be re-priced ("" if it can)."""
    for table, values in overrides.items():
        above = ABOVE_DRIVERS.get(table, frozenset()) & set(values)
        if above:
            return f"it changes {table[0]}.{table[1]}.{sorted(above)[0]}, which the layers above the drivers read"
    return ""


def _pricer(drivers: list[Any]) -> Any:
    """Price -> ns with the profiles of a replaying stack's drivers."""
    profiles: dict[str, Any] = {}
    for d in drivers:
        profiles.update(d.priced_profiles())

    def price_ns(price: Price) -> float:
        return price.ns(profiles[price.section])
    return price_ns


def replayed_rows(member: Any, rec: Recording, central: tuple[Row, ...], labels: Any = None) -> tuple[Row, ...]:
    """The rows scenario ``member`` (a variant of the recorded scenario in profile fields only) would give, by
    replaying ``rec``; ``central`` are the recorded run's rows (labels, ops, sizes).  ``labels``: only these
    rows (the replay stops after their last timed call).  SdbenchError when the member's stack cannot be built
    (a profile value the model refuses)."""
    into = Recording(replaying=True)
    built = member.build(recording=into)
    try:
        drivers = into.drivers
        samples = replay(rec, drivers, built.clock, _pricer(drivers),
                         None if labels is None else rec.end_of(labels))
    finally:
        built.close()
    out = []
    for r in central:
        if labels is not None and r.label not in labels:
            continue
        got = samples.get(r.label)
        if not got or len(got) != r.runs:
            raise ReplayMismatch(f"row {r.label!r}: {len(got or ())} timed calls replayed of {r.runs}")
        out.append(make_row(r.label, r.op, r.bytes, got))
    return tuple(out)


class ReplayMismatch(SdbenchError):
    """A replay that does not give the recorded run's rows (a row not timed call by call): run instead."""


def check_replay(sc: Any, rec: Recording, central: tuple[Row, ...]) -> str:
    """"" when replaying ``rec`` into ``sc``'s own stack gives exactly the recorded rows' times, else why not:
    the test that the record holds everything the rows' times depend on."""
    try:
        again = replayed_rows(sc, rec, central)
    except ReplayMismatch as e:
        return str(e)
    for a, b in zip(again, central):
        if a.samples_ms != b.samples_ms:
            return f"row {a.label!r} replays at {a.time_ms:.6g} ms, not {b.time_ms:.6g} ms"
    return ""
