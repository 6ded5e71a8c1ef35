"""``python -m sglang_ascend_hybrid.patches > PATCHES.md``"""

import sys

from sglang_ascend_hybrid.patches.render import render_markdown

sys.stdout.write(render_markdown())
