"""Run in a fresh interpreter by test_plugin_sglang.py: loads the plugin the way
SGLang does (real entry points, real load_plugins) and prints facts as JSON."""

import json
import sys

facts = {}
from sglang.srt.plugins import load_plugins  # noqa: E402
from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: E402

load_plugins()
from sglang.srt.arg_groups import choices, resolution_hooks  # noqa: E402
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS  # noqa: E402

from sglang_ascend_hybrid import plugin  # noqa: E402
from sglang_ascend_hybrid.patches import apply  # noqa: E402
from sglang_ascend_hybrid.patches.status import STATUS  # noqa: E402

STATUS.refresh_applied()
# a model process imports its model module; the patches waiting for one ("on import") then apply
facts["import_errors"] = apply.import_pending()
import sglang.srt.layers.attention.mamba.causal_conv1d as conv_mod  # noqa: E402
import sglang.srt.models.lfm2 as lfm2  # noqa: E402

facts["lfm2_conv_rebound"] = (lfm2.causal_conv1d_fn is conv_mod.causal_conv1d_fn
                              and getattr(conv_mod.causal_conv1d_fn, "__wrapped__", None) is not None)
facts["status"] = {n: [s.state, s.reason] for n, s in STATUS.patches.items()}
facts["summary"] = STATUS.summary()
facts["factory_entry_point"] = getattr(ATTENTION_BACKENDS.get("ascend_hybrid"), "entry_point", None)
facts["in_choices"] = "ascend_hybrid" in choices.ATTENTION_BACKEND_CHOICES
facts["in_draft_choices"] = "ascend_hybrid" in choices.DRAFT_ATTENTION_BACKEND_CHOICES

snapshot = lambda: (  # noqa: E731
    list(choices.ATTENTION_BACKEND_CHOICES), list(choices.DRAFT_ATTENTION_BACKEND_CHOICES),
    sorted(ATTENTION_BACKENDS), {k: len(v) for k, v in resolution_hooks._HOOKS.items()},
    {k: len(v) for k, v in HookRegistry._hooks.items()}, sorted(HookRegistry._patched))
before = snapshot()
plugin.register()
plugin.register()
facts["second_register_changes_nothing"] = before == snapshot()

from sglang.srt.server_args import ServerArgs, prepare_server_args  # noqa: E402

parsed = {}
for flag in ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
             "--speculative-draft-attention-backend"):
    args = prepare_server_args(["--model-path", "/nonexistent/model", flag, "ascend_hybrid"])
    parsed[flag] = getattr(args, flag[2:].replace("-", "_"))
facts["parsed"] = parsed
try:
    prepare_server_args(["--model-path", "/nonexistent/model", "--attention-backend", "not_a_backend"])
    facts["unknown_rejected"] = False
except SystemExit:
    facts["unknown_rejected"] = True
engine_args = ServerArgs(model_path="/nonexistent/model", attention_backend="ascend_hybrid")
facts["engine_kwargs_attention_backend"] = engine_args.attention_backend
json.dump(facts, sys.stdout)
