"""Console script ``sglang-ascend-hybrid``."""

from __future__ import annotations

import argparse
import logging
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang-ascend-hybrid",
                                     description="Operator tools of the sglang-ascend-hybrid plugin.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="versions, NPU ops found, patch status, effective settings")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "doctor":
        from sglang_ascend_hybrid import doctor

        return doctor.main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
