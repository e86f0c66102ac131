"""Command line: `torchlint [check] PATH...`, `torchlint rule CODE`.

Exit codes: 0 no findings left, 1 findings left, 2 usage error, bad config or
internal error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections import Counter
from pathlib import Path
from typing import List, Optional

from torchlint import __version__
from torchlint.config import OUTPUT_FORMATS, Config, ConfigError, load
from torchlint.discovery import MissingPath, discover
from torchlint.engine.runner import FileResult, lint_bytes, lint_file
from torchlint.finding import Finding
from torchlint.reporters import REPORTERS
from torchlint.rules import all_rules, rules_by_code

COMMANDS = ("check", "rule")
# Commands that live with their feature; each module has `register(subparsers)` setting `handler`.
FEATURE_COMMANDS: tuple = ()
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    pass


def _codes_list(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchlint",
        description="Find silent PyTorch bugs: `torchlint PATH...` is `torchlint check PATH...`.",
    )
    parser.add_argument("--version", action="version", version=f"torchlint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser("check", help="lint files and folders (the default command)")
    check.add_argument("paths", nargs="*", metavar="PATH", help="files or folders; `-` reads standard input")
    selection = check.add_argument_group("rule selection (codes, prefixes like TL1, or rule names; comma-separated)")
    selection.add_argument("--select", type=_codes_list, help="exactly these rules")
    selection.add_argument("--extend-select", type=_codes_list, help="these rules too")
    selection.add_argument("--ignore", type=_codes_list, help="not these rules")
    output = check.add_argument_group("output")
    output.add_argument("--output-format", choices=[name for name in OUTPUT_FORMATS if name in REPORTERS])
    output.add_argument("--statistics", action="store_true", help="print the number of findings per rule")
    output.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
    output.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument("--config", type=Path, help="a pyproject.toml or torchlint.toml to use instead of the nearest one")
    check.add_argument("--stdin-filename", help="the name standard input is reported under")
    check.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    check.add_argument("--jobs", "-j", type=int, default=None, help="worker processes (default: all cores)")
    check.add_argument("--force-exclude", action="store_true", help="apply excludes to paths named on the command line too")
    check.add_argument("--no-respect-gitignore", action="store_true", help="lint files that .gitignore excludes")

    check.set_defaults(handler=run_check)

    rule = commands.add_parser("rule", help="explain a rule, or list them all with --all")
    rule.add_argument("code", nargs="?", help="a code (TL101) or a name (backward-under-no-grad)")
    rule.add_argument("--all", action="store_true", help="list every rule")
    rule.set_defaults(handler=run_rule)

    for module in FEATURE_COMMANDS:
        importlib.import_module(module).register(commands)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `torchlint PATH...` means `torchlint check PATH...`, as in ruff.
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "check")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ConfigError, UsageError) as error:
        print(f"torchlint: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_ERROR


def run_rule(args) -> int:
    if args.all:
        for rule in all_rules():
            default = "" if not rule.opt_in else " (opt-in)"
            print(f"{rule.code}  {rule.name:<36} {rule.family():<14} fix: {rule.fix_safety}{default}")
        return EXIT_CLEAN
    if not args.code:
        raise UsageError("give a rule code or name, or --all")
    wanted = args.code.strip()
    for rule in all_rules():
        if wanted.upper() == rule.code or wanted == rule.name:
            print(rule.documentation(), end="")
            return EXIT_CLEAN
    raise UsageError(f"unknown rule {args.code!r}; `torchlint rule --all` lists them")


def load_config(args) -> Config:
    start = Path.cwd()
    real_paths = [path for path in args.paths if path != "-"]
    if real_paths:
        common = os.path.commonpath([os.path.abspath(path) for path in real_paths])
        start = Path(common if os.path.isdir(common) else os.path.dirname(common))
    overrides = {
        "select": args.select,
        "extend-select": args.extend_select,
        "extend-ignore": args.ignore,
        "output-format": args.output_format,
    }
    where = "command line"
    try:
        return load(args.config, start, overrides)
    except ConfigError as error:
        if str(error).startswith(where):
            raise ConfigError(str(error).replace(where, "--select/--ignore", 1)) from None
        raise


def run_check(args) -> int:
    if not args.paths:
        raise UsageError("no paths given; try `torchlint .`")
    config = load_config(args)
    results = collect(args, config)
    findings = sorted((finding for result in results for finding in result.findings), key=Finding.sort_key)
    sources = {result.filename: result.source.text for result in results if result.source is not None}
    output_format = config.output_format or ("full" if sys.stdout.isatty() else "concise")
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ and output_format == "full"
    out = sys.stdout
    out.write(REPORTERS[output_format](findings, sources, colour))
    if args.statistics:
        out.write(statistics(findings))
    if output_format in ("full", "concise") and not args.quiet:
        out.write(summary(findings))
    out.flush()
    return EXIT_FINDINGS if findings and not args.exit_zero else EXIT_CLEAN


def collect(args, config: Config) -> List[FileResult]:
    results = []
    files = []
    for path in args.paths:
        if path == "-":
            name = args.stdin_filename or "-"
            results.append(lint_bytes(sys.stdin.buffer.read(), name, config))
        else:
            files.append(path)
    try:
        found = list(discover(files, config, respect_gitignore=not args.no_respect_gitignore, force_exclude=args.force_exclude))
    except MissingPath as error:
        raise UsageError(f"{error}: no such file or folder") from None
    results.extend(lint_file(path, config, filename) for path, filename in found)
    return results


def statistics(findings: List[Finding]) -> str:
    counts = Counter(finding.code for finding in findings)
    rules = rules_by_code()
    lines = [f"{count:>5}  {code}  {rules[code].name}" for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    return "\n".join(lines) + ("\n" if lines else "")


def summary(findings: List[Finding]) -> str:
    if not findings:
        return "All checks passed!\n"
    noun = "finding" if len(findings) == 1 else "findings"
    safe = sum(1 for finding in findings if finding.fix is not None and finding.fix.applicability == "safe")
    unsafe = sum(1 for finding in findings if finding.fix is not None and finding.fix.applicability == "unsafe")
    line = f"Found {len(findings)} {noun}."
    if safe:
        line += f"\n[*] {safe} fixable with the `--fix` option."
    if unsafe:
        line += f"\n{unsafe} more fixable with `--fix --unsafe-fixes`."
    return line + "\n"
