"""`torchlint check --watch`: lint, then lint again whenever a file that can change the findings changes.

What is watched: the linted paths' Python files, stubs and notebooks, and the config
files (`pyproject.toml`, `torchlint.toml`), through `watchfiles` (the `watch` extra).
Each run is a whole `check` run with the same options; a bad config while it is being
edited is reported and the watch goes on.
"""

from __future__ import annotations

import sys
import time

from torchlint.config import ConfigError

# Besides watchfiles' Python suffixes (.py, .pyx, .pyd).
_EXTRA_SUFFIXES = (".pyi", ".ipynb", ".toml")


def watch(args) -> int:
    from torchlint import cli

    try:
        import watchfiles
    except ImportError:
        raise cli.UsageError("--watch needs watchfiles: pip install 'torchlint[watch]'") from None
    if "-" in args.paths:
        raise cli.UsageError("--watch cannot read standard input")
    if args.diff or args.add_noqa or args.show_settings or args.show_files:
        raise cli.UsageError("--watch lints again on every change: it does not combine with --diff, --add-noqa, --show-settings or --show-files")
    _run(args, "Starting linter in watch mode...")
    for changes in watchfiles.watch(*args.paths, watch_filter=watchfiles.PythonFilter(extra_extensions=_EXTRA_SUFFIXES)):
        _run(args, f"File change detected ({len(changes)} {'path' if len(changes) == 1 else 'paths'}), linting again...")
    return cli.EXIT_CLEAN


def _run(args, why: str) -> None:
    from torchlint import cli

    print(f"[{time.strftime('%H:%M:%S')}] {why}", file=sys.stderr, flush=True)
    try:
        with cli.output_stream(args) as out:
            cli.check_once(args, out)
    except (ConfigError, cli.UsageError) as error:
        print(f"torchlint: error: {error}", file=sys.stderr, flush=True)
