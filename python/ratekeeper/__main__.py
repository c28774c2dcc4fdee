"""Command line: ``python -m ratekeeper demo``, ``check-config FILE`` and ``serve``."""

from __future__ import annotations

import argparse
import sys


def check_config(path: str) -> int:
    """Validates a TOML / YAML config file and prints its routing table: exit 0, or 2 with the error."""
    from ratekeeper import config

    try:
        limiter = config.limiter_from_file(path)
    except (ValueError, TypeError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: {path}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"{path}: valid\n")
    print(config.routing_table(limiter))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ratekeeper", description="ratekeeper rate limiter")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="show decisions, waits and refusals for a few peers")
    check = commands.add_parser(
        "check-config", help="validate a .toml / .yaml config file and print its routing table (exit 2 if invalid)"
    )
    check.add_argument("file", help="the config file (.toml, .yaml or .yml)")
    serve = commands.add_parser(
        "serve", help="seed 002's HTTP server: every path answers 200 ok, rate limited per X-Account-ID (uvicorn)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="the port to listen on (default 8080)")
    args = parser.parse_args(argv)
    if args.command == "check-config":
        return check_config(args.file)
    if args.command == "serve":
        from ratekeeper import _serve

        try:
            _serve.serve(args.host, args.port)
        except ImportError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    if args.command == "demo":
        from ratekeeper import _demo

        _demo.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
