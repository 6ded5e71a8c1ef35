"""The plugin's device ops, one folder per op family (``conv/``, ``gdn/``, ``attention/``): each has
its NPU ops' contract, a ladder of rungs ending in the torch path (the pure-torch rung that serves any
call), the public op, and an fp64 ``naive_*`` oracle for the tests.

Shared here: :mod:`.seam` (the one way device kernels are reached), :mod:`.ladder` (rungs, the ladder,
the forced-backend resolver), :mod:`.signature` (what every ladder keys on), :mod:`.catalog` (every
ladder), :mod:`.errors`, :mod:`.host`, :mod:`.probes`, :mod:`.index_dtype`, :mod:`.row_copy`,
:mod:`.cpu_workspace`. Nothing here imports the SGLang-integration layer or the operator tools.
"""
