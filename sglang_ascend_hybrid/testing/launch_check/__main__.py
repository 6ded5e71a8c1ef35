"""``python -m sglang_ascend_hybrid.testing.launch_check``: :func:`.cli.main`."""

import sys

from sglang_ascend_hybrid.testing.launch_check.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
