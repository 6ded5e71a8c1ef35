"""doctor's probe section: every recorded verdict with what it means, and the decode-layout probe of
the installed Triton GDN decode kernel run where the kernel is reachable."""

from __future__ import annotations

import io

import pytest

from sglang_ascend_hybrid.emulators import gdn_decode
from sglang_ascend_hybrid.ops import seam
from sglang_ascend_hybrid.ops.gdn.decode import contract as dc
from sglang_ascend_hybrid.tools import doctor


def _render(data) -> str:
    buf = io.StringIO()
    doctor.render_probes(data, buf.write)
    return buf.getvalue()


def test_without_the_kernel_doctor_says_it_was_not_probed():
    data = doctor.collect_probes()
    assert data["verdicts"] == []
    assert data["decode_entry"] == dc.installed_decode_entry()
    assert "not installed here: not probed" in _render(data)


@pytest.mark.parametrize("layout,verdict", [("key_first", dc.KEY_FIRST), ("value_first", dc.VALUE_FIRST)])
def test_doctor_shows_each_pool_dtype_verdict_and_its_meaning(layout, verdict):
    entry = dc.installed_decode_entry()
    with seam.install_emulators(gdn_decode.emulators(entry, layout=layout)):
        data = doctor.collect_probes()
    text = _render(data)
    assert [v["verdict"] for v in data["verdicts"]] == [verdict, verdict]
    assert {v["signature"].split(" pool=")[1].split()[0] for v in data["verdicts"]} == {"bfloat16", "float32"}
    assert dc.LAYOUT_VERDICTS[verdict] in text and "relative error value-first" in text
    assert all(v["usable"] == (verdict == dc.VALUE_FIRST) for v in data["verdicts"])
