"""Test-wide set-up: results go to a temporary database, never the user's."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_results_db(tmp_path, monkeypatch):
    monkeypatch.setenv("SDBENCH_DB", str(tmp_path / "results.sqlite"))
