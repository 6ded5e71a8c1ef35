"""Fixtures for the launch-resolution tests: the example model configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._families import FAMILIES, config_dir


@pytest.fixture(scope="session")
def example_configs() -> dict[str, Path]:
    return {family: config_dir(family) for family in FAMILIES}
