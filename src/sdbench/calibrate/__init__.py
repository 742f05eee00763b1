"""Calibration: fit physical card and host parameters to published raw-level rows.

A *fit group* is a set of scenarios that share a host profile.  Each group
says which profile fields are free (with bounds) and which measured rows
(``split == train``, raw-level: raw sector rows, mount, file open) constrain
them, named by scenario and row label.  Groups are data, one TOML file each in
``sdbench/data/fits/`` (format: docs/calibration-groups.md), read through the
option declarations of :mod:`sdbench.calibrate.fit_groups`; ``sdbench/data/fits/levels.toml`` declares the level
(raw, bridge, file) of every published row.  The simulator itself is the model: every evaluation runs the scenarios'
protocols on the virtual clock with the trial parameters, and
``scipy.optimize.least_squares`` minimises the relative errors.

Parameters that the rows cannot tell apart are pinned by a stated prior in
the group (e.g. card-side gaps between blocks of a multi-block read are pulled
towards zero, so the part common to every card is attributed to the host).
Discrete card state (update-block size, the fill it starts with) is searched
on a grid around the continuous fit.

Every fit ends with the Jacobian at its solution, and each fitted field's standard deviation from it (the
residual scatter, or the stated uncertainty of the figures when the fit is exact or agrees better than that:
docs/calibration.md); the profiles record it as ``fit_rel_sd`` (σ / value).  ``sdbench calibrate --from``
(:mod:`sdbench.usercal`) builds a group in memory from a user's measurements and fits it field by field
(:class:`FitStep`).

The shipped profiles in ``sdbench/data/{cards,hosts}`` are this package's
output: ``sdbench calibrate -o src/sdbench/data``.

The modules, each importing only those above it:

* :mod:`~sdbench.calibrate.fit_groups`: the fit groups as data (``sdbench/data/fits/``) and the profile kinds
  a fit sets;
* :mod:`~sdbench.calibrate.measurements`: the published rows (``measurements.csv``, ``published/``), their level,
  value and stated uncertainty;
* :mod:`~sdbench.calibrate.evaluation`: a group's scenarios run at trial values, and their rows' errors;
* :mod:`~sdbench.calibrate.uncertainty`: the Jacobian at a solution and each fitted field's σ;
* :mod:`~sdbench.calibrate.fitting`: the searches (least squares, grid, staged, sequential) and their result;
* :mod:`~sdbench.calibrate.profile_writer`: a fit's results written into profiles, and its σ as reports say it.

This package re-exports the names the rest of sdbench uses.
"""
from __future__ import annotations

from .fit_groups import DATA, TARGETS, FitGroup, FitStep, Param, groups, parse_group
from .fitting import FitResult, fit, fit_all, fit_group
from .measurements import (MEASUREMENT_REL_SD, PUBLISHED, Measurement, load_measurements, measurement_rel_sd,
                           rounding_rel_sd, row_level, row_value)
from .profile_writer import FITTED_BY, describe_sd, profile_text, sd_cells, write_profile, write_results
from .uncertainty import (MAX_REL_SD, SD_AT_BOUND, SD_LOWER_BOUND, SD_MEASUREMENT, SD_NOT_DETERMINED, SD_RESIDUALS,
                          Uncertainty, param_sd)

__all__ = [
    "DATA", "TARGETS", "FitGroup", "FitStep", "Param", "groups", "parse_group",
    "FitResult", "fit", "fit_all", "fit_group",
    "MEASUREMENT_REL_SD", "PUBLISHED", "Measurement", "load_measurements", "measurement_rel_sd", "rounding_rel_sd",
    "row_level", "row_value",
    "FITTED_BY", "describe_sd", "profile_text", "sd_cells", "write_profile", "write_results",
    "MAX_REL_SD", "SD_AT_BOUND", "SD_LOWER_BOUND", "SD_MEASUREMENT", "SD_NOT_DETERMINED", "SD_RESIDUALS",
    "Uncertainty", "param_sd",
]
