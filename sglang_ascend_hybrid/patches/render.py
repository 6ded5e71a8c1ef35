"""PATCHES.md, generated from the registry (``python -m sglang_ascend_hybrid.patches > PATCHES.md``)."""

from __future__ import annotations

import re

from sglang_ascend_hybrid.patches.model import Target, as_target
from sglang_ascend_hybrid.patches.verification import internals

# "owner/repo#N": an upstream issue or pull request (GitHub redirects /issues/N to a pull request).
UPSTREAM_REF = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)#(?P<number>[0-9]+)$")


def _on(target: Target) -> str:
    return f" (on sglang{target.releases})" if target.releases else ""


def _upstream(text: str) -> str:
    ref = UPSTREAM_REF.match(text)
    if ref is None:
        return text
    return f"[{text}](https://github.com/{ref['repo']}/issues/{ref['number']})"


def render_markdown() -> str:
    """PATCHES.md, generated from :data:`sglang_ascend_hybrid.patches.PATCHES`."""
    from sglang_ascend_hybrid import patches

    lines = [
        "# Patch registry",
        "",
        "Every upstream symbol sglang-ascend-hybrid touches. Generated from",
        "`sglang_ascend_hybrid/patches/registry.py` by `python -m sglang_ascend_hybrid.patches > PATCHES.md`;",
        "the test suite fails when this file is stale or a target is missing from the tested SGLang.",
        "",
        "At startup `register()` checks each target statically (the installed source is parsed, not",
        "imported), registers hooks through SGLang's `HookRegistry` (which also rebinds",
        "`from X import Y` copies), records applied / skipped / failed per patch, and logs a one-line",
        "summary. `sglang-ascend-hybrid doctor` prints the record. Under",
        "`--attention-backend ascend_hybrid` a failed patch stops startup with the target and the",
        "SGLang version; under `ascend` it is a warning.",
        "",
        "Each patch states the SGLang releases whose route reaches its target. On other releases it",
        "is **not needed** (the release takes another route, whose symbols are verified instead: a",
        "missing one is still a failure) or **unavailable** (the release offers no mechanism for the",
        "fix; `doctor` says why). Neither stops strict startup. On a release newer than the tested",
        "range every target is still verified, what exists is applied, and one WARNING at startup",
        "names the untested release and the patches that did not apply. README's compatibility",
        "table shows what CI verified on each tested release.",
        "",
        "Each patch also names the upstream issue or pull request that would make it unnecessary, or",
        "says why there is none.",
        "",
        "| name | upstream target | kind | runtime |",
        "|---|---|---|---|",
    ]
    for p in patches.PATCHES:
        kind = f"{p.kind} ({p.hook_type})" if p.hook_type else p.kind
        lines.append(f"| `{p.name}` | `{p.target}` | {kind} | {p.runtime} |")
    for p in patches.PATCHES:
        lines += ["", f"## `{p.name}`", "", f"- **Target**: `{p.target}`"]
        for extra in map(as_target, p.extra_targets):
            lines.append(f"- **Also checked**: `{extra.path}`{_on(extra)}")
        if internals(p):
            lines.append("- **Upstream internals relied on (checked too)**: "
                         + ", ".join(f"`{t}`" for t in internals(p)))
        lines.append(f"- **SGLang releases**: {('sglang' + p.releases) if p.releases else 'every supported release'}")
        if p.elsewhere is not None:
            route = [as_target(t) for t in p.elsewhere.route]
            lines.append(f"- **Other releases**: {p.elsewhere.state}: {p.elsewhere.why}"
                         + ("; checked there instead: " + ", ".join(f"`{t.path}`{_on(t)}" for t in route)
                            if route else ""))
        lines += [
            f"- **Plugin code**: `{p.hook}`" + (f" ({p.hook_type.upper()} hook)" if p.hook_type else ""),
            f"- **Why**: {p.why}",
            f"- **How**: {p.how}",
            f"- **Verified at startup**: {p.verification}"
            + (f"; applied when SGLang first builds the attention backend on NPU (never at plugin "
               f"discovery, which must not import {', '.join(p.requires)}); skipped when "
               f"{', '.join(p.requires)} is not installed" if p.requires else ""),
            f"- **Remove when**: {p.removal}",
            f"- **Upstream**: {_upstream(p.upstream)}",
        ]
    return "\n".join(lines) + "\n"
