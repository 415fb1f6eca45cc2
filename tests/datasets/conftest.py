"""Fixtures of the dataset tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.datasets.helpers import shared_data_dir


@pytest.fixture
def shared_data() -> Path:
    d = shared_data_dir()
    if d is None:
        pytest.skip("real data not found: set BOE_SHARED_DATA or place shared/data beside the repository")
    return d
