"""GDN decode (SGLang's ``decode`` verb): one token per request on the SSM state pool, one ladder.

:class:`DecodeCall` is one step (SGLang's gating inputs, or precomputed gates for the public op),
:data:`DECODE` the ladder (``gdn_serving_decode``: ``triton_decode`` -> ``npu_recurrent`` ->
``torch``, :mod:`.ladder`), :func:`run_decode` runs it.  Beside it: the contract of the Triton
decode kernels SGLang imports (:mod:`.contract`), the probe of their state layout (:mod:`.probe`)
and the fp64 definition both are checked against (:mod:`.naive`).
"""

from sglang_ascend_hybrid.ops.gdn.decode.call import DecodeCall, check_decode_inputs, check_decode_values
from sglang_ascend_hybrid.ops.gdn.decode.contract import installed_decode_entry
from sglang_ascend_hybrid.ops.gdn.decode.ladder import (
                                                        DECODE,
                                                        decode_rungs,
                                                        decode_static_reasons,
                                                        npu_recurrent_reason,
                                                        probe_before_serving,
                                                        run_decode,
                                                        triton_decode_reason,
)

__all__ = ["DecodeCall", "check_decode_inputs", "check_decode_values", "installed_decode_entry", "DECODE",
           "decode_rungs", "decode_static_reasons", "npu_recurrent_reason", "probe_before_serving", "run_decode",
           "triton_decode_reason"]
