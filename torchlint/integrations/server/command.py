"""`torchlint server`: the language server over stdio (docs/editors.md).

pygls is imported only when the command runs, so that `torchlint check` and the
other commands never need the `server` extra.
"""

from __future__ import annotations

import argparse
import sys

EXIT_ERROR = 2


def register(commands) -> None:
    server = commands.add_parser(
        "server", help="run the language server (LSP over standard input and output) for editors",
        description="Run the language server: diagnostics, quick fixes and rule pages in the editor (docs/editors.md).",
    )
    # Editors' LSP clients often pass `--stdio`; standard input and output are the only transport.
    server.add_argument("--stdio", action="store_true", help=argparse.SUPPRESS)
    server.add_argument(
        "--log-level", choices=("error", "warning", "info", "debug"), default="warning",
        help="what the server logs to standard error (default: warning)",
    )
    server.set_defaults(handler=run)


def run(args) -> int:
    try:
        from torchlint.integrations.server.server import serve
    except ImportError as error:
        message = f"the language server needs pygls and lsprotocol ({error}): pip install 'torchlint[server]'"
        print(f"torchlint: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    import logging  # the CLI registers this command for every run: only the server logs

    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="torchlint server %(levelname)s: %(message)s")
    return serve()
