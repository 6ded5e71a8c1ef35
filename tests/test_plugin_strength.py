"""Plugin / strict-mode properties the other plugin tests leave unchecked (issue 16):

* ``register`` and ``register_multimodal`` never raise, and the swallowed error is logged
  with its traceback (a silent swallow fails);
* strict mode reaches subprocesses: a child Python started after ``record_request`` (as SGLang
  starts its scheduler / detokenizer) sees it, one started before or after a reset does not;
* the in-process record stands on its own (an environment rewritten later does not undo it).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_ascend_hybrid import mode, plugin
from sglang_ascend_hybrid.envs import ENV
from tests.test_plugin_unit import fake_sglang  # noqa: F401  (fixture)

PACKAGE_ROOT = str(Path(mode.__file__).resolve().parent.parent)


@pytest.mark.parametrize("entry,text", [("register", "registration failed unexpectedly"),
                                        ("register_multimodal", "diffusion registration failed unexpectedly")])
def test_registration_never_raises_and_logs_the_error(entry, text, fake_sglang, monkeypatch,  # noqa: F811
                                                      caplog):
    def boom(runtime):
        raise RuntimeError("unexpected internal state")

    monkeypatch.setattr(plugin, "_register_runtime", boom)
    with caplog.at_level(logging.ERROR, logger="sglang_ascend_hybrid"):
        getattr(plugin, entry)()  # must not raise
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert text in errors[0].getMessage()
    assert errors[0].exc_info is not None and "unexpected internal state" in str(errors[0].exc_info[1])


def _child_sees_strict(env) -> str:
    """What a fresh Python process (SGLang's subprocesses) reports; it imports the same copy of
    the package as this process."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", "from sglang_ascend_hybrid import mode; "
                          "print(mode.hybrid_requested())"],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_strict_mode_is_inherited_by_subprocesses(monkeypatch):
    monkeypatch.setenv(ENV.STRICT.name, "0")  # restored (removed) after the test
    mode._reset_for_tests()
    try:
        assert _child_sees_strict(os.environ) == "False"
        mode.record_request()
        assert os.environ[ENV.STRICT.name] == "1"
        assert _child_sees_strict(os.environ) == "True"
        mode._reset_for_tests()
        assert ENV.STRICT.name not in os.environ and not mode.hybrid_requested()
        assert _child_sees_strict(os.environ) == "False"
    finally:
        mode._reset_for_tests()


def test_in_process_record_does_not_depend_on_the_environment(monkeypatch):
    monkeypatch.setenv(ENV.STRICT.name, "0")
    mode._reset_for_tests()
    try:
        assert not mode.hybrid_requested()
        mode.record_request()
        os.environ[ENV.STRICT.name] = "0"  # e.g. a launcher rewriting the environment later
        assert mode.hybrid_requested() is True
    finally:
        mode._reset_for_tests()
