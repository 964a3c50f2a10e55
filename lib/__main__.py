"""`python -m lib <verb>`: the workbook's command line, and only its dispatcher. Each floor of lib/ registers its own
verbs (`add_verbs`: in its cli.py, or in the loose module itself), in the order a user meets them: running,
measuring, reporting, gating, exporting, serving, benchmarking, then the import check. Heavy imports happen only when
a verb runs. Bad input (ValueError, FileNotFoundError, RuntimeError) exits 2 with one line on stderr."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    from . import gate, imports
    from .bench import cli as bench
    from .evaluation import cli as evaluation
    from .export import cli as export
    from .pipeline import cli as pipeline
    from .reporting import cli as reporting
    from .serve import cli as serve

    parser = argparse.ArgumentParser(prog="python -m lib", description="Agent RL workbook")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for floor in (pipeline, evaluation, reporting, gate, export, serve, bench, imports):
        floor.add_verbs(verbs)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
