"""What an older SGLang release runs of a parametrized test, for CI time.

The base release (constraints.txt) runs every parametrization. An older release runs the ones that
meet its own code (SGLang's model classes, pools, routes) at least once per test; the others repeat
the same release-dependent path on another family, dtype or case and are ``base_release_only``
there (tests/conftest.py deselects them outside the base environment).
"""

from __future__ import annotations

import pytest
from _pytest.mark.structures import ParameterSet

BASE_ONLY = pytest.mark.base_release_only


def older_releases_run(params, keep) -> list:
    """``params`` (values, tuples of values or ``pytest.param``) with every one whose index is not in
    ``keep`` marked ``base_release_only``."""
    keep = set(keep)
    if not keep or not keep <= set(range(len(params))):
        raise ValueError(f"keep={sorted(keep)}: expected indices of some of the {len(params)} params")
    out = []
    for i, p in enumerate(params):
        if not isinstance(p, ParameterSet):
            p = pytest.param(*p) if isinstance(p, tuple) else pytest.param(p)
        if i not in keep:
            p = pytest.param(*p.values, marks=[*p.marks, BASE_ONLY], id=p.id)
        out.append(p)
    return out
