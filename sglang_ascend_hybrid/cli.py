"""Console script ``sglang-ascend-hybrid``.

Building the parser imports nothing heavy (no torch, no SGLang): ``--help`` and argument
errors answer at about the cost of a bare interpreter.  Each command's module is imported
only when that command runs.  Every message a command prints on stderr starts with
``sglang-ascend-hybrid <command>: `` (:func:`error`).
"""

from __future__ import annotations

import argparse
import os
import sys

from sglang_ascend_hybrid.tools.console import PROG, error


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, with the terminal width read without :mod:`shutil` (argparse imports
    it only for ``get_terminal_size``, and it pulls in the compression modules: a tenth of a bare
    interpreter's start).  Same answer: ``$COLUMNS``, else the terminal's, else 80."""

    def __init__(self, prog, *args, width=None, **kwargs):
        super().__init__(prog, *args, width=(terminal_columns() - 2) if width is None else width, **kwargs)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose formatter is :class:`_HelpFormatter`; subcommand parsers are of the
    same class (argparse's default ``parser_class``), so they get it too."""

    def __init__(self, *args, formatter_class=_HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def terminal_columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Operator tools of the sglang-ascend-hybrid plugin.")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="versions, NPU ops found, patch status, effective settings")
    d.add_argument("--report", action="store_true",
                   help="print one Markdown block to paste into an issue (nothing secret)")
    d.add_argument("--model-path", help="with --report: a model directory (or config.json) to plan")
    d.add_argument("--tp", type=int, default=1, help="with --report --model-path: the TP size to plan (default 1)")
    p = sub.add_parser("plan", help="what the plugin will run for a model config, per TP size")
    p.add_argument("--config", required=True, help="a Hugging Face config.json, or a directory holding one")
    p.add_argument("--tp", type=int, nargs="+", help="TP sizes (default: 1 2 4 8 16)")
    p.add_argument("--json", action="store_true",
                   help="print the plan as one versioned JSON document (docs/plan-json.md)")
    p.add_argument("--kernel-heads", help="value-head counts the GDN mega kernel accepts, e.g. 8,12,16 "
                   "(default: the installed sgl-kernel-npu's set, or the current release's)")
    p.add_argument("--mamba-ssm-dtype", choices=("float32", "bfloat16", "float16"),
                   help="the SSM state dtype you will launch with (default: SGLang's: the model config's, "
                        "else float32); decides which GDN kernels can serve")
    p.add_argument("--speculative-num-draft-tokens", type=int, metavar="N",
                   help="tokens per request of a speculative (MTP) verify step you will launch with (default 4, "
                        "SGLang's for these models); decides which batch sizes' verify gates the kernel tiles")
    st = sub.add_parser("selftest", help="check the plugin's ops against the pure-torch references on a device")
    add_selftest_arguments(st)
    r = sub.add_parser("rehearse", help="rehearse a launch on the emulated Ascend device (CPU): a tiny model of "
                       "the config, SGLang's real Engine with your flags, compared with transformers",
                       usage=f"{PROG} rehearse --model-path DIR [sglang flags ...]")
    r.add_argument("--model-path", required=True, help="a directory holding the model's config.json")
    return parser


def add_selftest_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``selftest`` subcommand's options, declared here so that building the parser does not
    import :mod:`sglang_ascend_hybrid.tools.selftest` (which imports torch)."""
    parser.add_argument("--device", choices=("cpu", "npu"), default="cpu",
                        help="cpu: device paths through the CPU emulators (times are the emulators'); "
                             "npu: the real kernels")
    parser.add_argument("--quick", action="store_true", help="smaller cases")


def invalid_settings(command: str) -> bool:
    """Print one line per invalid environment variable on stderr; True if any."""
    from sglang_ascend_hybrid.envs import problems

    found = problems()
    for problem in found:
        error(command, problem)
    return bool(found)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "rehearse":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # doctor reports invalid settings in its report; the other commands refuse to start.
    if args.command != "doctor" and invalid_settings(args.command):
        return 2
    if args.command == "doctor":
        from sglang_ascend_hybrid.tools import doctor

        return doctor.main(args)
    if args.command == "plan":
        from sglang_ascend_hybrid.tools import plan

        return plan.main(args)
    if args.command == "selftest":
        from sglang_ascend_hybrid.tools import selftest

        return selftest.main(args)
    if args.command == "rehearse":  # test and rehearsal tooling: the emulated device, in child processes
        from sglang_ascend_hybrid.testing.runtime import rehearse

        return rehearse.main(args, extra)
    return 2


if __name__ == "__main__":
    sys.exit(main())
