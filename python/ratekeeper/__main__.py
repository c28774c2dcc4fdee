"""Command line: ``python -m ratekeeper demo``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ratekeeper", description="ratekeeper rate limiter")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="show decisions, waits and refusals for a few peers")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ratekeeper import _demo

        _demo.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
