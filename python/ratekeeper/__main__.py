"""Command line: ``python -m ratekeeper demo``, ``check-config FILE``, ``serve``, ``top URL`` and
``inspect NAME``."""

from __future__ import annotations

import argparse
import sys


def check_config(path: str) -> int:
    """Validates a TOML / YAML config file and prints its routing table: exit 0, or 2 with the error."""
    from ratekeeper import Limiter, config

    try:
        limiter = Limiter.from_file(path)
    except (ValueError, TypeError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: {path}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"{path}: valid\n")
    print(config.routing_table(limiter))
    return 0


def _positive(text: str) -> float:
    seconds = float(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return seconds


def _count(text: str) -> int:
    try:
        reads = int(text)
    except ValueError:
        reads = 0
    if reads < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of reads, 1 or more, got {text!r}")
    return reads


def metrics_url(target: str) -> str:
    """The metrics URL ``top`` reads: ``host:port`` and ``host:port/path`` are taken as plain HTTP, and a
    URL without any path (a bare ``host:port`` too) gets ``/metrics``; a path given, ``/`` included, stays."""
    import urllib.parse

    url = target if "://" in target else f"http://{target}"
    parts = urllib.parse.urlsplit(url)
    if not parts.path:
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


def show_top(url: str, namespace: str, every: float | None, count: int | None) -> int:
    """Prints who the service at ``url`` is limiting: exit 0, or 2 if it cannot be read."""
    from ratekeeper import _top

    try:
        return _top.run(metrics_url(url), namespace, every, count)
    except (_top.ScrapeError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def inspect_region(name: str | None, path: str | None, as_json: bool) -> int:
    """Prints what a shared region holds, read without writing to it: exit 0, or 2 with one line saying why
    it cannot be read (a missing, foreign, corrupt or truncated file)."""
    import json

    from ratekeeper import InvalidArgument, Shared, _core

    try:
        region = Shared(name, path=path)
        stats = _core._inspect_region(region.path)
    except (ValueError, TypeError, OSError) as error:
        # A refused file's message names it and the cause: its location ("path: ") adds nothing here.
        message = error.msg if isinstance(error, InvalidArgument) and error.loc == ("path",) else str(error)
        print(f"ratekeeper inspect: {' '.join(message.split())}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"{stats['path']}: {stats['keys']:,} keys of {stats['max_keys']:,}")
    print(f"decisions: {stats['allowed']:,} allowed, {stats['refused']:,} refused (every process)")
    print(f"evicted {stats['evictions']:,}, idle dropped {stats['dropped']:,}")
    print(f"clock: {stats['clock']}")
    if stats["groups"]:
        print("\nkeys by group:")
        for group, keys in sorted(stats["groups"].items(), key=lambda item: -item[1]):
            print(f"  {group:<32} {keys:>12,}")
    if stats["top_refused"]:
        print("\npeers refused most:")
        for peer, refusals in stats["top_refused"]:
            print(f"  {peer:<32} {refusals:>12,}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the command; output cut short by its reader (``| head``) ends quietly, as other tools do."""
    try:
        status = _run(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would flush stdout again at exit and print a second error: point it at devnull first.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return status


def _run(argv: list[str] | None) -> int:
    from ratekeeper import __version__

    parser = argparse.ArgumentParser(
        prog="python -m ratekeeper", description="ratekeeper: a rate limiter for Python services, in Rust"
    )
    parser.add_argument("--version", action="version", version=f"ratekeeper {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="show decisions, waits and refusals for a few peers")
    check = commands.add_parser(
        "check-config", help="validate a .toml / .yaml config file and print its routing table (exit 2 if invalid)"
    )
    check.add_argument("file", help="the config file (.toml, .yaml or .yml)")
    serve = commands.add_parser(
        "serve",
        help="an HTTP server limiting per X-Account-ID with per-account quotas: every path answers 200 ok (uvicorn)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="the port to listen on (default 8080)")
    top = commands.add_parser(
        "top", help="who a running service is limiting: requests by group and the peers refused most, from its /metrics"
    )
    top.add_argument(
        "url", help="the service's Prometheus endpoint: http://127.0.0.1:8080/metrics, or 127.0.0.1:8080 (/metrics)"
    )
    top.add_argument("--namespace", default="ratekeeper", help="the collector's namespace (default ratekeeper)")
    top.add_argument("--every", type=_positive, metavar="SECONDS", help="read again every SECONDS (Ctrl-C stops)")
    top.add_argument("--count", type=_count, metavar="N", help="with --every: stop after N reads")
    inspect = commands.add_parser(
        "inspect", help="what a shared region (backend=rk.Shared) holds: keys, groups, the peers refused most"
    )
    inspect.add_argument("name", nargs="?", help="the region's name (rk.Shared(NAME)); or give --path")
    inspect.add_argument("--path", help="the region's file (rk.Shared(path=...))")
    inspect.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args(argv)
    if args.command == "inspect":
        return inspect_region(args.name, args.path, args.json)
    if args.command == "top":
        return show_top(args.url, args.namespace, args.every, args.count)
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
