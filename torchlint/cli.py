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
from typing import TYPE_CHECKING, Dict, List, Optional, TextIO, Tuple

from torchlint import __version__
from torchlint.cache import Cache
from torchlint.config import OUTPUT_FORMATS, Config, ConfigError, load, resolve_codes, settings_report
from torchlint.discovery import MissingPath, UnreadableFolder, discover
from torchlint.engine.parallel import lint_file_bytes, lint_files
from torchlint.finding import FileResult, Finding
from torchlint.reporters import REPORTERS

# The engine, the rules and the fixes import libcst (a third of a second): they are imported where
# they are used, so that a run answered from the cache starts as fast as Python does.
if TYPE_CHECKING:
    from torchlint import fixes as fixes_io

COMMANDS = ("check", "rule", "verify", "doctor")
# Commands that live with their feature; each module has `register(subparsers)` setting `handler`.
FEATURE_COMMANDS = ("torchlint.verify.command", "torchlint.health")
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
# Formats a person reads, which end with a summary.
TEXT_FORMATS = ("full", "concise")


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
    check.add_argument(
        "--show-settings", action="store_true",
        help="print the resolved settings (config file, torch-version and where it came from, rules, excludes) and exit without linting",
    )
    check.add_argument("--stdin-filename", help="the name standard input is reported under")
    check.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    check.add_argument("--jobs", "-j", type=int, default=None, help="worker processes (default: all cores)")
    check.add_argument("--force-exclude", action="store_true", help="apply excludes to paths named on the command line too")
    check.add_argument("--no-respect-gitignore", action="store_true", help="lint files that .gitignore excludes")
    fixing = check.add_argument_group("fixes")
    fixing.add_argument("--fix", action=argparse.BooleanOptionalAction, default=None, help="apply safe fixes in place (config: fix)")
    fixing.add_argument(
        "--unsafe-fixes", action=argparse.BooleanOptionalAction, default=None,
        help="also apply fixes that may change behaviour (config: unsafe-fixes)",
    )
    fixing.add_argument("--diff", action="store_true", help="print the diff the fixes would make and write nothing; exit 1 if there is one")
    fixing.add_argument("--show-fixes", action="store_true", help="list the findings that were fixed")
    fixing.add_argument("--exit-non-zero-on-fix", action="store_true", help="exit 1 when anything was fixed, even if no finding remains")

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
    # A file name that is not valid text must still be printable, not crash the report.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
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
    from torchlint.rules import all_rules

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
        "fix": args.fix,
        "unsafe-fixes": args.unsafe_fixes,
    }
    # Command-line selectors are checked first, so their mistakes are not blamed on a config file.
    for option, key in (("--select", "select"), ("--extend-select", "extend-select"), ("--ignore", "extend-ignore")):
        resolve_codes(overrides[key] or [], f"{option}")
    return load(args.config, start, overrides)


def run_check(args) -> int:
    if args.show_settings:
        sys.stdout.write(settings_report(load_config(args)))
        return EXIT_CLEAN
    if not args.paths:
        raise UsageError("no paths given; try `torchlint .`")
    config = load_config(args)
    if config.fix or args.diff:
        return run_fix(args, config)
    results = collect(args, config)
    findings = sorted((finding for result in results for finding in result.findings), key=Finding.sort_key)
    sources = {result.filename: result.source.text for result in results if result.source is not None}
    report(args, config, findings, sources, sys.stdout, summary(findings, config.unsafe_fixes))
    return EXIT_FINDINGS if findings and not args.exit_zero else EXIT_CLEAN


def report(args, config: Config, findings: List[Finding], sources: Dict[str, str], out: TextIO, closing: str) -> None:
    """The findings in the chosen format, then statistics and, for the text formats, the closing summary."""
    output_format = _output_format(config)
    colour = out.isatty() and "NO_COLOR" not in os.environ and output_format == "full"
    out.write(REPORTERS[output_format](findings, sources, colour))
    if args.statistics:
        out.write(statistics(findings))
    if output_format in TEXT_FORMATS and not args.quiet:
        out.write(closing)
    out.flush()


def _output_format(config: Config) -> str:
    return config.output_format or ("full" if sys.stdout.isatty() else "concise")


def _discover(args, config: Config, paths: List[str]) -> Tuple[List[Tuple[str, str]], List[UnreadableFolder]]:
    """The (path, name) of every file to lint, and the folders that could not be listed."""
    unreadable: List[UnreadableFolder] = []
    try:
        files = list(discover(
            paths, config, respect_gitignore=not args.no_respect_gitignore, force_exclude=args.force_exclude, unreadable=unreadable,
        ))
    except MissingPath as error:
        raise UsageError(f"{error}: no such file or folder") from None
    return files, unreadable


def _folder_findings(folder: UnreadableFolder, config: Config) -> List[Finding]:
    """A folder that could not be listed is a TL000 of its own, like an unreadable file: its files went unchecked."""
    from torchlint.engine.runner import parse_error
    from torchlint.rules.syntax.parse_error import ParseError

    if ParseError.code not in config.codes_for(folder.name):
        return []
    return [parse_error(folder.name, f"cannot read folder: {folder.reason}")]


def collect(args, config: Config) -> List[FileResult]:
    results = []
    files = []
    for path in args.paths:
        if path == "-":
            name = args.stdin_filename or "-"
            results.append(lint_file_bytes(sys.stdin.buffer.read(), name, config))
        else:
            files.append(path)
    found, unreadable = _discover(args, config, files)
    cache = None if args.no_cache else Cache.load(config)
    results.extend(lint_files(found, config, jobs=args.jobs, cache=cache))
    # Not through lint_files: a folder has no bytes to cache or lint.
    results.extend(FileResult(folder.name, _folder_findings(folder, config)) for folder in unreadable)
    return results


# ---------------------------------------------------------------- --fix and --diff


def run_fix(args, config: Config) -> int:
    """Fix every file (or print the diff), then report what remains, as `check` does."""
    from torchlint import fixes as fixes_io

    fixes = collect_fixes(args, config)
    for fix in fixes:
        for problem in fix.result.problems:
            print(f"torchlint: {problem}", file=sys.stderr)
    broken = any(fix.result.broken for fix in fixes)
    if args.diff:
        return _print_diffs(args, fixes, broken)
    # As in ruff, the code read from standard input comes back fixed on standard output, the report on standard error.
    out = sys.stderr if any(fix.path is None for fix in fixes) else sys.stdout
    for fix in fixes:
        if not fix.changed or fix.path is None:
            continue
        problem = fixes_io.write(fix)
        if problem:
            print(f"torchlint: {problem}", file=sys.stderr)
            fix.result.revert()
    _echo_stdin(fixes)
    fixed = [finding for fix in fixes for finding in fix.result.fixed]
    findings = sorted((finding for fix in fixes for finding in fix.findings), key=Finding.sort_key)
    sources = {fix.filename: fix.result.text for fix in fixes if fix.source is not None}
    if args.show_fixes and fixed:
        (out if _output_format(config) in TEXT_FORMATS else sys.stderr).write(fixed_listing(fixed))
    report(args, config, findings, sources, out, fix_summary(len(fixed), findings, config.unsafe_fixes))
    if broken:
        return EXIT_ERROR
    if args.exit_zero:
        return EXIT_CLEAN
    return EXIT_FINDINGS if findings or (args.exit_non_zero_on_fix and fixed) else EXIT_CLEAN


def collect_fixes(args, config: Config) -> List[fixes_io.FileFix]:
    from torchlint import fixes as fixes_io
    from torchlint.fixes.files import unfixable

    fixes = []
    files = []
    for path in args.paths:
        if path == "-":
            name = args.stdin_filename or "-"
            fixes.append(fixes_io.fix_bytes(sys.stdin.buffer.read(), name, config, config.unsafe_fixes))
        else:
            files.append(path)
    found, unreadable = _discover(args, config, files)
    fixes.extend(fixes_io.fix_file(path, filename, config, config.unsafe_fixes) for path, filename in found)
    fixes.extend(unfixable(folder.name, folder.path, None, _folder_findings(folder, config)) for folder in unreadable)
    return fixes


def _echo_stdin(fixes: List[fixes_io.FileFix]) -> None:
    """Standard input always comes back, fixed or not, so that editors can pipe code through `--fix -`."""
    for fix in fixes:
        if fix.path is None:
            sys.stdout.flush()
            sys.stdout.buffer.write(fix.output())
            sys.stdout.buffer.flush()


def _print_diffs(args, fixes: List[fixes_io.FileFix], broken: bool) -> int:
    from torchlint import fixes as fixes_io

    changed = [fix for fix in fixes if fix.changed]
    sys.stdout.write("".join(fixes_io.unified_diff(fix.result.original, fix.result.text, fix.filename) for fix in changed))
    sys.stdout.flush()
    if not args.quiet:
        count = sum(len(fix.result.fixed) for fix in changed)
        remaining = sum(len(fix.findings) for fix in fixes)
        print(f"Would fix {count} {_noun(count)} ({remaining} would remain).", file=sys.stderr)
    if broken:
        return EXIT_ERROR
    return EXIT_FINDINGS if changed and not args.exit_zero else EXIT_CLEAN


def fixed_listing(fixed: List[Finding]) -> str:
    lines = [f"Fixed {len(fixed)} {_noun(len(fixed))}:"]
    by_file: Dict[str, Counter] = {}
    for finding in fixed:
        by_file.setdefault(finding.filename, Counter())[(finding.code, finding.name)] += 1
    for filename in sorted(by_file):
        lines.append(f"- {filename}:")
        counts = sorted(by_file[filename].items(), key=lambda item: (-item[1], item[0]))
        lines += [f"    {count} x {code} ({name})" for (code, name), count in counts]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- summaries


def statistics(findings: List[Finding]) -> str:
    counts = Counter((finding.code, finding.name) for finding in findings)
    lines = [f"{count:>5}  {code}  {name}" for (code, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    return "\n".join(lines) + ("\n" if lines else "")


def _noun(count: int) -> str:
    return "finding" if count == 1 else "findings"


def _fixable(findings: List[Finding], unsafe: bool, option: str, unsafe_option: str) -> str:
    """How many findings a fix run would fix, and how many more with unsafe fixes, in the markers' words."""
    safe = sum(1 for finding in findings if finding.fix is not None and finding.fix.applicability == "safe")
    more = sum(1 for finding in findings if finding.fix is not None and finding.fix.applicability == "unsafe")
    if unsafe:
        safe, more = safe + more, 0
    lines = ""
    if safe:
        lines += f"\n[*] {safe} fixable with {option}."
    if more:
        lines += f"\n[~] {more} more fixable with {unsafe_option}."
    return lines


def summary(findings: List[Finding], unsafe: bool = False) -> str:
    if not findings:
        return "All checks passed!\n"
    line = f"Found {len(findings)} {_noun(len(findings))}."
    return line + _fixable(findings, unsafe, "the `--fix` option", "`--fix --unsafe-fixes`") + "\n"


def fix_summary(fixed: int, remaining: List[Finding], unsafe: bool) -> str:
    if not fixed and not remaining:
        return "All checks passed!\n"
    total = fixed + len(remaining)
    line = f"Found {total} {_noun(total)} ({fixed} fixed, {len(remaining)} remaining)."
    return line + _fixable(remaining, unsafe, "another `--fix` run", "`--unsafe-fixes`") + "\n"
