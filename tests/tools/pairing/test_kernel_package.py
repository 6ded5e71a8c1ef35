"""sgl_kernel_npu's side of the pairing check (sglang_ascend_hybrid.tools.pairing.kernel_package):
what counts as a name a module defines at runtime (``if TYPE_CHECKING:`` does not), compiled
modules, namespace packages and submodules."""

from __future__ import annotations

import pytest

from sglang_ascend_hybrid.patches.releases import installed_version
from sglang_ascend_hybrid.tools import pairing
from tests.tools.pairing.helpers import INSTALL_TAIL, decode_kernel_import, family_imports, states, write_kernel_tree


@pytest.mark.parametrize("body, state", [
    ("from ._impl import *\n", pairing.UNVERIFIABLE),
    ("def __getattr__(name):\n    raise AttributeError(name)\n", pairing.UNVERIFIABLE),
    ("__all__ = ['{sym}']\n", pairing.OK),
    ("try:\n    from x import {sym}\nexcept ImportError:\n    {sym} = None\n", pairing.OK),
    ("{sym}, other = 1, 2\n", pairing.OK),
    ("class {sym}:\n    pass\n", pairing.OK),
    ("def helper():\n    {sym} = 1\n", pairing.MISSING_SYMBOL),  # a local, not a module name
    ("class Box:\n    {sym} = 1\n", pairing.MISSING_SYMBOL),
    ("this is not python (\n", pairing.UNVERIFIABLE),
    # only a type checker sees these: absent when SGLang imports the module
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._impl import {sym}\n", pairing.MISSING_SYMBOL),
    ("import typing\nif typing.TYPE_CHECKING:\n    {sym} = 1\n", pairing.MISSING_SYMBOL),
    ("if TYPE_CHECKING:\n    from x import {sym}\n__all__ = ['{sym}']\n", pairing.MISSING_SYMBOL),
    ("if not not TYPE_CHECKING:\n    def {sym}():\n        pass\n", pairing.MISSING_SYMBOL),
    ("{sym}: int\n", pairing.MISSING_SYMBOL),  # an annotation binds nothing
    ("if TYPE_CHECKING:\n    pass\nelse:\n    {sym} = 1\n", pairing.OK),
    ("if not TYPE_CHECKING:\n    {sym} = 1\n", pairing.OK),
    ("if TYPE_CHECKING:\n    from x import {sym}\n{sym} = 1\n", pairing.OK),
    ("{sym}: int = 1\n", pairing.OK),
    ("if TYPE_CHECKING:\n    from ._impl import {sym}\ndef __getattr__(name):\n    pass\n", pairing.UNVERIFIABLE),
    # too deep for Python's parser (RecursionError / MemoryError from ast.parse): unverifiable, not a crash
    ("x = " + "1 + " * 20000 + "1\n{sym} = 1\n", pairing.UNVERIFIABLE),
    ("x = " + "-" * 20000 + "1\n{sym} = 1\n", pairing.UNVERIFIABLE),
    # names bound in module-level blocks
    ("first, *{sym} = [1, 2]\n", pairing.OK),  # a starred target binds its name
    ("[*{sym}] = [1]\n", pairing.OK),
    # the else of ``if not TYPE_CHECKING:`` runs for type checkers only
    ("if not TYPE_CHECKING:\n    pass\nelse:\n    {sym} = 1\n", pairing.MISSING_SYMBOL),
    ("if TYPE_CHECKING:\n    if TYPE_CHECKING:\n        pass\n    else:\n        {sym} = 1\n", pairing.MISSING_SYMBOL),
    # the blocks of other compound statements run at import
    ("with open(__file__) as fh:\n    {sym} = 1\n", pairing.OK),
    ("import sys\nif sys.version_info >= (3,):\n    {sym} = 1\n", pairing.OK),
    ("for _ in range(1):\n    {sym} = 1\n", pairing.OK),
    ("while True:\n    {sym} = 1\n    break\n", pairing.OK),
    ("try:\n    pass\nfinally:\n    {sym} = 1\n", pairing.OK),
])
def test_what_counts_as_defined(tmp_path, body, state):
    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module})
    parts = imp.module.split(".")
    root.joinpath(*parts[:-1], parts[-1] + ".py").write_text(body.format(sym=imp.symbol))
    report = pairing.check(kernel_path=[str(root)], files=[imp.file])
    assert states(report)[(imp.module, imp.symbol)] == state


def test_a_name_bound_only_for_type_checkers_is_missing_and_says_why(tmp_path):
    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module})
    parts = imp.module.split(".")
    path = root.joinpath(*parts[:-1], parts[-1] + ".py")
    path.write_text(f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._impl import {imp.symbol}\n")
    report = pairing.check(kernel_path=[str(root)], files=[imp.file])
    rec = next(r for r in report.records if r.imp == imp)
    assert (rec.state, rec.detail) == (pairing.MISSING_SYMBOL, f"{imp.module} binds {imp.symbol} only under "
                                       f"`if TYPE_CHECKING:`, so {imp.what} is absent at runtime")
    assert pairing.family_problems("gdn", report) == [
        f"sgl-kernel-npu pairing: SGLang {installed_version('sglang')}'s {imp.file}:{imp.line} imports {imp.symbol} "
        f"from {imp.module}, but the installed {imp.module} ({path}) does not define {imp.symbol}: install an "
        f"sgl-kernel-npu build whose {imp.module} defines {imp.symbol}"
        + (f" ({pairing.KNOWN[imp.module].provided_by})" if imp.module in pairing.KNOWN else "") + INSTALL_TAIL]


def test_compiled_extension_is_present_but_unverifiable(tmp_path):
    from importlib.machinery import EXTENSION_SUFFIXES

    imp = decode_kernel_import()
    root = write_kernel_tree(tmp_path, family_imports("gdn"), drop_modules={imp.module})
    parts = imp.module.split(".")
    root.joinpath(*parts[:-1], parts[-1] + EXTENSION_SUFFIXES[0]).write_bytes(b"\x7fELF")
    report = pairing.check(kernel_path=[str(root)], files=[imp.file])
    assert states(report)[(imp.module, imp.symbol)] == pairing.UNVERIFIABLE
    assert pairing.family_problems("gdn", report) == []


def test_namespace_packages_and_submodule_imports(tmp_path):
    sg = tmp_path / "sg" / "sglang" / "srt"
    sg.mkdir(parents=True)
    (sg / "m.py").write_text("from sgl_kernel_npu.attention.sinks import f\n"
                             "from sgl_kernel_npu import attention\n"
                             "from sgl_kernel_npu.attention import gone\n"
                             "import sgl_kernel_npu.attention.sinks\n"
                             "import sgl_kernel_npu.nothing\n")
    root = tmp_path / "k"
    (root / "sgl_kernel_npu" / "attention").mkdir(parents=True)  # no __init__.py, as in sgl-kernel-npu
    (root / "sgl_kernel_npu" / "__init__.py").write_text("")
    (root / "sgl_kernel_npu" / "attention" / "sinks.py").write_text("def f():\n    pass\n")
    report = pairing.check(str(sg.parent), [str(root)])
    assert [(r.imp.module, r.imp.symbol, r.state) for r in report.records] == [
        ("sgl_kernel_npu.attention.sinks", "f", pairing.OK),
        ("sgl_kernel_npu", "attention", pairing.OK),
        ("sgl_kernel_npu.attention", "gone", pairing.MISSING_SYMBOL),
        ("sgl_kernel_npu.attention.sinks", None, pairing.OK),
        ("sgl_kernel_npu.nothing", None, pairing.MISSING_MODULE),
    ]
