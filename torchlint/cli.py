"""Command line: `torchlint [check] [PATH...]`, `torchlint rule CODE`.

Exit codes: 0 no findings left, 1 findings left, 2 usage error, bad config or
internal error. Without a path, `check` lints the current folder; paths that hold
no Python file are a warning, not an error, as in ruff.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import gc
import importlib
import io
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, TextIO, Tuple

from torchlint import __version__
from torchlint.cache import Cache
from torchlint.config import (
    IGNORE, OUTPUT_FORMATS, Config, ConfigError, Resolved, resolve, resolve_codes, settings_report, tomllib,
)
from torchlint.discovery import MissingPath, UnreadableFolder, discover
from torchlint.engine.parallel import lint_file_bytes, lint_files
from torchlint.finding import FileResult, Finding
from torchlint.progress import Progress
from torchlint.reporters import REPORTERS, source_key

# The engine, the rules and the fixes import libcst (a third of a second): they are imported where
# they are used, so that a run answered from the cache starts as fast as Python does.
if TYPE_CHECKING:
    from torchlint import fixes as fixes_io

COMMANDS = ("check", "rule", "verify", "doctor", "server", "checkpoint")
# Commands that live with their feature; each module has `register(subparsers)` setting `handler`, and may add
# options to the commands registered before it (`rule --verify`).
FEATURE_COMMANDS = (
    "torchlint.verify.command", "torchlint.health", "torchlint.integrations.server.command", "torchlint.checkpoint",
)
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
# Formats a person reads, which end with a summary.
TEXT_FORMATS = ("full", "concise", "grouped")
NO_FILES = "No Python files found under the given path(s)"
# Formats whose output is JSON: `--statistics` answers them in JSON too.
JSON_FORMATS = ("json", "json-lines", "sarif", "gitlab")


def _debug(message: str, *args) -> None:
    """A debug message of the `torchlint` logger. `logging` is imported by `--verbose` (`_logging_if`), or by a program
    that embeds torchlint and configures logging; until then no handler can be listening, and a plain `check` does not
    pay for importing it (8 ms with what it imports, a tenth of torchlint's own start-up)."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("torchlint").debug(message, *args)


class UsageError(Exception):
    pass


def _codes_list(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _selection(text: str) -> List[str]:
    """`--select`: at least one code, prefix or name; an empty selection would check nothing and always pass."""
    codes = _codes_list(text)
    if not codes:
        raise argparse.ArgumentTypeError("selects no rule: give codes, prefixes or names (ALL for every rule)")
    return codes


def _jobs(text: str) -> int:
    """`--jobs N`: N worker processes; 0 means one per core, which is also the default; below 0 is a usage error."""
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (one per core) or more, got {jobs}")
    return jobs


def _per_file_ignore(text: str) -> Tuple[str, List[str]]:
    """`--per-file-ignores 'tests/*.py:TL501,TL303'`: a glob and the codes not reported in its files."""
    pattern, colon, codes = text.rpartition(":")
    if not colon or not pattern or not _codes_list(codes):
        raise argparse.ArgumentTypeError(f"expected GLOB:CODE[,CODE...], got {text!r}")
    return pattern, _codes_list(codes)


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `check` and `rule` alone when `command` is `check`: importing the feature
    commands' modules to describe them cost each run of `check` about 10 ms, and none of them adds to `check`."""
    parser = argparse.ArgumentParser(
        prog="torchlint",
        description="Find silent PyTorch bugs: `torchlint PATH...` is `torchlint check PATH...`.",
    )
    parser.add_argument("--version", action="version", version=f"torchlint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser("check", help="lint files and folders (the default command)")
    check.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (default: the current folder); `-` reads standard input")
    selection = check.add_argument_group("rule selection (codes, prefixes like TL1, or rule names; comma-separated)")
    selection.add_argument("--select", type=_selection, help="exactly these rules")
    selection.add_argument("--extend-select", type=_codes_list, help="these rules too")
    selection.add_argument("--ignore", type=_codes_list, help="not these rules")
    selection.add_argument(
        "--per-file-ignores", type=_per_file_ignore, action="append", metavar="GLOB:CODES",
        help="rules not reported in the files GLOB matches (repeatable; replaces the config's per-file-ignores)",
    )
    selection.add_argument(
        "--extend-per-file-ignores", type=_per_file_ignore, action="append", metavar="GLOB:CODES",
        help="as --per-file-ignores, on top of the config's",
    )
    selection.add_argument("--ignore-noqa", action="store_true", help="report what `# noqa` comments would silence")
    add_preview_option(selection)
    output = check.add_argument_group("output")
    output.add_argument("--output-format", choices=[name for name in OUTPUT_FORMATS if name in REPORTERS])
    output.add_argument("-o", "--output-file", type=Path, help="write the report to this file instead of standard output")
    output.add_argument(
        "--statistics", action="store_true",
        help="print the number of findings per rule, and whether --fix can fix them, instead of the findings (JSON with --output-format json)",
    )
    output.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
    output.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument(
        "--config", action="append", metavar="PATH | 'KEY = VALUE'",
        help="a pyproject.toml or torchlint.toml to use instead of the nearest one, or a config key in TOML that overrides "
        "the file's (`--config 'select = [\"TL1\"]'`; repeatable), as in ruff",
    )
    check.add_argument("--isolated", action="store_true", help="read no config file: defaults and the command line only")
    check.add_argument(
        "--show-settings", action="store_true",
        help="print the resolved settings and where each came from (default, a config file and key, an option), and exit without linting",
    )
    check.add_argument("--show-files", action="store_true", help="print the files a run would lint, and exit without linting")
    check.add_argument("--stdin-filename", help="the name standard input is reported under")
    check.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    check.add_argument("--jobs", "-j", type=_jobs, default=None, metavar="N", help="worker processes; 0 (the default): one per core")
    check.add_argument("--watch", action="store_true", help="lint again whenever a linted file changes (needs watchfiles: pip install 'torchlint[watch]')")
    check.add_argument("--force-exclude", action="store_true", help="apply excludes to paths named on the command line too")
    check.add_argument(
        "--exclude", type=_codes_list, action="extend", metavar="GLOBS",
        help="files and folders not to lint (comma-separated, repeatable): replaces the config's exclude and its defaults",
    )
    check.add_argument("--extend-exclude", type=_codes_list, action="extend", metavar="GLOBS", help="as --exclude, on top of the config's")
    check.add_argument(
        "-v", "--verbose", action="store_true",
        help="log on standard error which config file is used, how many files are linted, cache hits and the time taken",
    )
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
    fixing.add_argument("--fix-only", action="store_true", help="apply the fixes and report nothing about the findings that remain; exit 0")
    fixing.add_argument("--add-noqa", action="store_true", help="add `# noqa: CODE` to every line with a finding, keeping the codes already there")

    check.set_defaults(handler=run_check)

    rule = commands.add_parser("rule", help="explain a rule, or list them all with --all")
    rule.add_argument("code", nargs="?", help="a code (TL101) or a name (backward-under-no-grad)")
    rule.add_argument("--all", action="store_true", help="list every rule")
    rule.set_defaults(handler=run_rule)

    if command != "check":
        for module in FEATURE_COMMANDS:
            importlib.import_module(module).register(commands)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `torchlint PATH...` means `torchlint check PATH...`, as in ruff.
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "check")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    _stand_in_for_closed_streams()
    # A file name that is not valid text must still be printable, not crash the report.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    try:
        args = build_parser(argv[0] if argv[0] in COMMANDS else None).parse_args(argv)
        with _logging_if(getattr(args, "verbose", False)):
            code = args.handler(args)
        # Written now, not when Python exits, where a failure is a message about an "exception ignored" and exit 120.
        sys.stdout.flush()
        return code
    except (ConfigError, UsageError) as error:
        print(f"torchlint: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `torchlint check . | head -1`: the reader has what it wanted; nothing to say to anyone.
        _discard_standard_output()
        return EXIT_ERROR
    except OSError as error:
        # Mostly writing the report failed: a full disk (ENOSPC), a closed standard output (EBADF). The report is
        # lost, which one line says; a traceback would say no more.
        where = f"{error.filename}: " if error.filename else "cannot write the output: " if error.errno in _OUTPUT_ERRORS else ""
        _discard_standard_output()
        print(f"torchlint: error: {where}{error.strerror or error}", file=sys.stderr)
        return EXIT_ERROR


@contextlib.contextmanager
def _logging_if(verbose: bool) -> Iterator[None]:
    """`--verbose`: torchlint's debug messages (its logger's, no other library's) on standard error, as ruff's
    `[time][module][level] message`, for this run only (`main` may be called again in the same process)."""
    if not verbose:
        yield
        return
    import logging

    log = logging.getLogger("torchlint")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] %(message)s", "%H:%M:%S"))
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


# What writing standard output fails with: a full disk or quota, a file grown past its limit, a closed descriptor.
_OUTPUT_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EBADF, errno.EIO})


class _ClosedOutput(io.TextIOBase):
    """What standard output is when the process started with it closed (`torchlint check f.py >&-`): writing to it
    fails as writing to a closed descriptor does, so a run that needs it says so, and one with `-o` does not."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _stand_in_for_closed_streams() -> None:
    """Python sets `sys.stdout`/`sys.stderr` to None when the process starts with that descriptor closed."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # nowhere to say anything: errors are only the exit code
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()


def _discard_standard_output() -> None:
    """Point standard output at /dev/null, so that what is still buffered for it does not fail again at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def run_rule(args) -> int:
    from torchlint.rules import all_rules

    if args.all:
        for rule in all_rules():
            tier = (" (opt-in)" if rule.opt_in else "") + (" (preview)" if rule.preview else "")
            print(f"{rule.code}  {rule.name:<36} {rule.family():<14} fix: {rule.fix_safety}{tier}")
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
    return resolve_config(args).config


def resolve_config(args) -> Resolved:
    """The run's settings from the config file and the command line (`args` of `check`, or of `verify`)."""
    start = Path.cwd()
    real_paths = [path for path in args.paths if path != "-"]
    if real_paths:
        common = os.path.commonpath([os.path.abspath(path) for path in real_paths])
        start = Path(common if os.path.isdir(common) else os.path.dirname(common))
    overrides = {
        "select": args.select,
        "extend-select": args.extend_select,
        "extend-ignore": args.ignore,
        "per-file-ignores": _per_file_table(getattr(args, "per_file_ignores", None)),
        "extend-per-file-ignores": _per_file_table(getattr(args, "extend_per_file_ignores", None)),
        "output-format": args.output_format,
        "fix": args.fix,
        "unsafe-fixes": args.unsafe_fixes,
        "ignore-noqa": getattr(args, "ignore_noqa", False) or None,
        "preview": getattr(args, "preview", None),
        "exclude": getattr(args, "exclude", None),
        "extend-exclude": getattr(args, "extend_exclude", None),
    }
    # Command-line selectors are checked first, so their mistakes are not blamed on a config file.
    for option, key, purpose in (("--select", "select", None), ("--extend-select", "extend-select", None), ("--ignore", "extend-ignore", IGNORE)):
        resolve_codes(overrides[key] or [], option, *([purpose] if purpose else []))
    for option, key in (("--per-file-ignores", "per-file-ignores"), ("--extend-per-file-ignores", "extend-per-file-ignores")):
        for codes in (overrides[key] or {}).values():
            resolve_codes(codes, option, IGNORE)
    config_path, inline = _config_option(args.config)
    isolated = getattr(args, "isolated", False)
    resolved = resolve(config_path, start, overrides, isolated=isolated, inline=inline)
    _log_settings(resolved, isolated, inline)
    if not resolved.config.select and not resolved.config.preview_left_out:
        # A run that checks nothing passes whatever the code: as likely a mistake as `--select ''`.
        raise UsageError(f"no rule is selected ({resolved.origins.get('select', 'default')}): the run would check nothing")
    for code in sorted(resolved.config.preview_left_out):
        print(f"torchlint: warning: {code} is in preview and does not run without `--preview` (or `preview = true`)", file=sys.stderr)
    return resolved


def _config_option(given) -> Tuple[Optional[Path], dict]:
    """`--config`, as ruff reads it: each value is a config file, or else one TOML `KEY = VALUE` of `[tool.torchlint]`
    (`tool.torchlint.KEY = VALUE` too). `verify`'s `--config` is a path (a `Path`)."""
    if given is None or isinstance(given, Path):
        return given, {}
    path: Optional[Path] = None
    inline: dict = {}
    for value in given:
        if os.path.isfile(value):
            if path is not None:
                raise UsageError(f"--config names two config files ({path}, {value}): give one, and the other keys inline")
            path = Path(value)
            continue
        try:
            table = tomllib.loads(value)
        except tomllib.TOMLDecodeError as error:
            if os.path.exists(value) or value.endswith(".toml") or os.sep in value:
                raise ConfigError(f"{value}: config file not found") from None
            raise UsageError(f"--config {value!r} is neither a config file nor a TOML `KEY = VALUE` override ({error})") from None
        tool = table.get("tool")
        if list(table) == ["tool"] and isinstance(tool, dict) and list(tool) == ["torchlint"] and isinstance(tool["torchlint"], dict):
            table = tool["torchlint"]
        if not table:
            raise UsageError(f"--config {value!r} sets no key")
        inline.update(table)
    return path, inline


def _log_settings(resolved: Resolved, isolated: bool, inline: dict) -> None:
    config = resolved.config
    if config.path is not None:
        _debug("Using configuration file %s (project root %s)", config.path, config.root)
    else:
        _debug("%s: defaults and the command line (project root %s)", "--isolated" if isolated else "No configuration file found", config.root)
    if inline:
        _debug("Overridden by --config: %s", ", ".join(sorted(inline)))
    _debug("%d rules selected: %s", len(config.select), ", ".join(sorted(config.select)))


def add_preview_option(group) -> None:
    group.add_argument(
        "--preview", action=argparse.BooleanOptionalAction, default=None,
        help="run the rules in preview too (`torchlint rule --all` marks them); --no-preview overrides the config",
    )


def _per_file_table(pairs: Optional[List[Tuple[str, List[str]]]]) -> Optional[Dict[str, List[str]]]:
    if not pairs:
        return None
    table: Dict[str, List[str]] = {}
    for pattern, codes in pairs:
        table.setdefault(pattern, []).extend(codes)
    return table


def run_check(args) -> int:
    if not args.paths:
        args.paths = ["."]
    if args.watch:
        return run_watch(args)
    # One run, then the process ends: the collector is left off after the files are linted, where turning it back
    # on would make it traverse everything the run kept once more, for nothing (engine/parallel.py says why it is
    # deferred while they are linted).
    gc.disable()
    try:
        with output_stream(args) as out:
            return check_once(args, out)
    finally:
        # Python still runs the collector once when the process ends, collector off or not, and by then all the
        # run kept is cold in memory: on the benchmark sample that pass took a tenth of a one-process run. Frozen
        # objects are left out of it; the process is ending, and their memory goes back with it.
        gc.freeze()


def run_watch(args) -> int:
    """`--watch`: `check` now and after every change; a bad config while it is being edited is reported, not fatal."""
    from torchlint.watch import watch

    try:
        import watchfiles  # noqa: F401  (only whether it is installed)
    except ImportError:
        raise UsageError("--watch needs watchfiles: pip install 'torchlint[watch]'") from None
    if "-" in args.paths:
        raise UsageError("--watch cannot read standard input")
    if args.diff or args.add_noqa or args.show_settings or args.show_files:
        raise UsageError("--watch lints again on every change: it does not combine with --diff, --add-noqa, --show-settings or --show-files")

    def run() -> None:
        try:
            with output_stream(args) as out:
                check_once(args, out)
        except (ConfigError, UsageError) as error:
            print(f"torchlint: error: {error}", file=sys.stderr, flush=True)

    return watch(args.paths, run)


def check_once(args, out: TextIO) -> int:
    """One `check` run, reported on `out` (standard output, or the `--output-file`)."""
    started = time.perf_counter()
    try:
        return _check_once(args, out)
    finally:
        _debug("Done in %.2f s", time.perf_counter() - started)


def _check_once(args, out: TextIO) -> int:
    resolved = resolve_config(args)
    config = resolved.config
    if args.show_settings:
        out.write(settings_report(config, resolved.origins))
        return EXIT_CLEAN
    if args.show_files:
        files, _ = _discover(args, config, [path for path in args.paths if path != "-"])
        out.write("".join(f"{name}\n" for name in sorted({name for _, name in files})))
        return EXIT_CLEAN
    if args.add_noqa:
        return run_add_noqa(args, config)
    if args.fix_only:
        config = dataclasses.replace(config, fix=True)
    if config.fix or args.diff:
        return run_fix(args, config, out)
    results = collect(args, config)
    findings = sorted((finding for result in results for finding in result.findings), key=Finding.sort_key)
    report(args, config, findings, _sources(results), out, summary(findings, config.unsafe_fixes))
    return EXIT_FINDINGS if findings and not args.exit_zero else EXIT_CLEAN


@contextlib.contextmanager
def output_stream(args) -> Iterator[TextIO]:
    """Where the report goes: standard output, or the `--output-file` (made with its folder, as ruff does).

    The file is written once the report is complete, atomically (`atomic.write_file`): a run that fails, or a disk
    that fills, leaves the previous report as it was, never an empty or truncated one.
    """
    if args.output_file is None:
        yield sys.stdout
        return
    from torchlint.atomic import write_file

    report_text = io.StringIO()
    yield report_text
    try:
        args.output_file.parent.mkdir(parents=True, exist_ok=True)
        write_file(str(args.output_file), report_text.getvalue().encode("utf-8", "surrogateescape"))
    except OSError as error:
        raise UsageError(f"{args.output_file}: cannot write the report: {error.strerror or error}") from None


def report(args, config: Config, findings: List[Finding], sources: Dict[str, str], out: TextIO, closing: str) -> None:
    """The findings in the chosen format (or, with --statistics, their counts), then the closing summary for people."""
    output_format = _output_format(config, out)
    if args.statistics:
        out.write(statistics_json(findings, output_format) if output_format in JSON_FORMATS else statistics(findings))
        out.flush()
        return
    colour = output_format in TEXT_FORMATS and out is sys.stdout and use_colour(out)
    out.write(REPORTERS[output_format](findings, sources, colour))
    if output_format in TEXT_FORMATS and not args.quiet:
        out.write(closing)
    out.flush()


def use_colour(stream: TextIO) -> bool:
    """As in ruff: FORCE_COLOR (not empty) or CLICOLOR_FORCE (not empty or 0) turn colour on anywhere, NO_COLOR (not
    empty) turns it off, and otherwise a terminal gets it. A report written to a file (`-o`) never has it."""
    environ = os.environ
    if environ.get("FORCE_COLOR") or environ.get("CLICOLOR_FORCE", "0") not in ("", "0"):
        return True
    if environ.get("NO_COLOR"):
        return False
    return stream.isatty()


def _output_format(config: Config, out: TextIO = sys.stdout) -> str:
    return config.output_format or ("full" if out.isatty() else "concise")


def _discover(args, config: Config, paths: List[str]) -> Tuple[List[Tuple[str, str]], List[UnreadableFolder]]:
    """The (path, name) of every file to lint, and the folders that could not be listed."""
    unreadable: List[UnreadableFolder] = []
    try:
        files = list(discover(
            paths, config, respect_gitignore=not args.no_respect_gitignore, force_exclude=args.force_exclude, unreadable=unreadable,
        ))
    except MissingPath as error:
        raise UsageError(f"{error}: no such file or folder") from None
    if not files and not unreadable and "-" not in args.paths:
        print(f"torchlint: warning: {NO_FILES}", file=sys.stderr)
    _debug("Found %d files to lint under %s", len(files), ", ".join(paths))
    for folder in unreadable:
        _debug("Cannot list %s: %s", folder.name, folder.reason)
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
            results.append(_lint_stdin(args.stdin_filename or "-", config))
        else:
            files.append(path)
    found, unreadable = _discover(args, config, files)
    cache = None if args.no_cache else _CountedCache.load(config)
    with Progress(sys.stderr, "checking", len(found), enabled=_shows_progress(args, config)):
        results.extend(lint_files(found, config, jobs=args.jobs, cache=cache))
    if cache is None:
        _debug("Cache: off (--no-cache)")
    else:
        _debug("Cache %s: %d hits, %d files linted", cache.path, cache.hits, len(found) - cache.hits)
    # Not through lint_files: a folder has no bytes to cache or lint.
    results.extend(FileResult(folder.name, _folder_findings(folder, config)) for folder in unreadable)
    return results


class _CountedCache(Cache):
    """The cache, counting the files it answered for (`--verbose`)."""

    hits = 0

    def lookup(self, filename: str, key: bytes) -> Optional[List[Finding]]:
        findings = super().lookup(filename, key)
        self.hits += findings is not None
        return findings


def _shows_progress(args, config: Config) -> bool:
    """A progress line only where a person reads the report (`progress.py` adds: on a terminal, after a moment)."""
    # `verify` has formats of its own. Standard output as it is now: a closed one has a stand-in (`main`).
    output_format = getattr(args, "output_format", None) or _output_format(config, sys.stdout)
    return output_format in TEXT_FORMATS and not args.quiet and not getattr(args, "statistics", False)


def _lint_stdin(name: str, config: Config) -> FileResult:
    from torchlint import source as file_sources

    data = _standard_input()
    result = lint_file_bytes(data, name, config)
    if result.source is None and result.findings:
        # A notebook's cells are quoted from its text (`_sources`), which standard input cannot give twice.
        with contextlib.suppress(file_sources.SourceError):
            result.source = file_sources.decode(data)
    return result


def _standard_input() -> bytes:
    """What `-` names; a closed standard input (`torchlint check - <&-`) is a usage error, not a traceback."""
    if sys.stdin is None:
        raise UsageError("`-` reads standard input, which is closed")
    return sys.stdin.buffer.read()


def _sources(results: List[FileResult]) -> Dict[str, str]:
    return _quoted([(result.filename, result.source.text if result.source else None, result.findings) for result in results])


def _quoted(files: List[Tuple[str, Optional[str], List[Finding]]]) -> Dict[str, str]:
    """What the reporters quote, from (name, text or None, findings) of each file: each file's text and, for a
    notebook with findings in its cells, each cell's."""
    from torchlint import source as file_sources

    sources = {filename: text for filename, text, _ in files if text is not None}
    for filename, text, findings in files:
        if not any(finding.cell is not None for finding in findings):
            continue
        from torchlint.notebook import cell_sources

        if text is None:
            # A notebook linted afresh keeps no text (its findings count in cells): its name is its path.
            try:
                text = file_sources.decode(file_sources.read_bytes(filename)).text
            except (OSError, file_sources.SourceError):
                continue
        sources[filename] = text  # the notebook's JSON, where the formats that cannot name a cell point
        sources.update((source_key(filename, cell), cell_text) for cell, cell_text in cell_sources(text).items())
    return sources


# ---------------------------------------------------------------- --add-noqa

# Codes no `# noqa` is written for: a file that does not parse is never suppressed line by line, and a comment for an
# unused comment would be one more to maintain.
_NOT_SUPPRESSIBLE = frozenset({"TL000", "TL001"})


def run_add_noqa(args, config: Config) -> int:
    """Write `# noqa: CODE` on every line of a Python file with a finding; notebooks are left as they are."""
    from torchlint import fixes as fixes_io
    from torchlint import source as file_sources
    from torchlint.engine.noqa import add_noqa
    from torchlint.fixes.files import FIXABLE_SUFFIXES

    if "-" in args.paths:
        raise UsageError("--add-noqa writes the files it lints: it cannot read standard input")
    found, _ = _discover(args, config, args.paths)
    added = 0
    for path, filename in found:
        if not path.endswith(FIXABLE_SUFFIXES):
            continue
        try:
            data = file_sources.read_bytes(path)
            source = file_sources.decode(data)
        except (OSError, file_sources.SourceError):
            continue  # its TL000 is reported by any run: no line of it can be suppressed
        findings = [finding for finding in lint_file_bytes(data, filename, config).findings if finding.code not in _NOT_SUPPRESSIBLE]
        text, count = add_noqa(source.text, findings)
        if not count:
            continue
        problem = fixes_io.write(fixes_io.FileFix(filename, path, data, source, fixes_io.FixResult(source.text, text)))
        if problem:
            print(f"torchlint: {problem}", file=sys.stderr)
        else:
            added += count
    if not args.quiet:
        print(f"Added {added} noqa {'directive' if added == 1 else 'directives'}.", file=sys.stderr)
    return EXIT_CLEAN


# ---------------------------------------------------------------- --fix and --diff


def run_fix(args, config: Config, out: TextIO) -> int:
    """Fix every file (or print the diff), then report what remains, as `check` does (`--fix-only`: only what was fixed)."""
    from torchlint import fixes as fixes_io

    fixes = collect_fixes(args, config)
    for fix in fixes:
        for problem in fix.result.problems:
            print(f"torchlint: {problem}", file=sys.stderr)
    broken = any(fix.result.broken for fix in fixes)
    if args.diff:
        return _print_diffs(args, fixes, broken, out)
    # As in ruff, the code read from standard input comes back fixed on standard output, the report on standard error.
    if out is sys.stdout and any(fix.path is None for fix in fixes):
        out = sys.stderr
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
    sources = _quoted([(fix.filename, fix.result.text if fix.source else None, fix.findings) for fix in fixes])
    text_format = _output_format(config, out) in TEXT_FORMATS
    if args.show_fixes and fixed:
        (out if text_format else sys.stderr).write(fixed_listing(fixed))
    if args.fix_only:
        if text_format and not args.quiet:
            out.write(f"Fixed {len(fixed)} {_noun(len(fixed))}.\n" if fixed else "No findings fixed.\n")
    else:
        report(args, config, findings, sources, out, fix_summary(len(fixed), findings, config.unsafe_fixes))
    if broken:
        return EXIT_ERROR
    if args.exit_zero:
        return EXIT_CLEAN
    if args.exit_non_zero_on_fix and fixed:
        return EXIT_FINDINGS
    return EXIT_FINDINGS if findings and not args.fix_only else EXIT_CLEAN


def collect_fixes(args, config: Config) -> List[fixes_io.FileFix]:
    from torchlint import fixes as fixes_io
    from torchlint.fixes.files import unfixable

    fixes = []
    files = []
    for path in args.paths:
        if path == "-":
            name = args.stdin_filename or "-"
            fixes.append(fixes_io.fix_bytes(_standard_input(), name, config, config.unsafe_fixes))
        else:
            files.append(path)
    found, unreadable = _discover(args, config, files)
    with Progress(sys.stderr, "fixing" if not args.diff else "checking", len(found), enabled=_shows_progress(args, config)) as progress:
        for path, filename in found:
            fixes.append(fixes_io.fix_file(path, filename, config, config.unsafe_fixes))
            progress.advance()
    fixes.extend(unfixable(folder.name, folder.path, None, _folder_findings(folder, config)) for folder in unreadable)
    return fixes


def _echo_stdin(fixes: List[fixes_io.FileFix]) -> None:
    """Standard input always comes back, fixed or not, so that editors can pipe code through `--fix -`."""
    for fix in fixes:
        if fix.path is None:
            sys.stdout.flush()
            sys.stdout.buffer.write(fix.output())
            sys.stdout.buffer.flush()


def _print_diffs(args, fixes: List[fixes_io.FileFix], broken: bool, out: TextIO) -> int:
    from torchlint import fixes as fixes_io

    changed = [fix for fix in fixes if fix.changed]
    out.write("".join(fixes_io.unified_diff(fix.result.original, fix.result.text, fix.filename) for fix in changed))
    out.flush()
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


def _rule_counts(findings: List[Finding]) -> List[dict]:
    """Per rule, most findings first: its code, name, count, and how many `--fix` and `--unsafe-fixes` would fix."""
    rows: Dict[str, dict] = {}
    for finding in findings:
        row = rows.setdefault(finding.code, {"code": finding.code, "name": finding.name, "count": 0, "safe": 0, "unsafe": 0})
        row["count"] += 1
        if finding.fix is not None:
            row[finding.fix.applicability] += 1
    return sorted(rows.values(), key=lambda row: (-row["count"], row["code"]))


def statistics(findings: List[Finding]) -> str:
    """The table `--statistics` prints: count, code, `[*]` when `--fix` fixes some (`[~]`: only with unsafe fixes), name."""
    lines = []
    for row in _rule_counts(findings):
        marker = "[*]" if row["safe"] else "[~]" if row["unsafe"] else "   "
        lines.append(f"{row['count']:>5}  {row['code']}  {marker} {row['name']}")
    return "\n".join(lines) + ("\n" if lines else "")


def statistics_json(findings: List[Finding], output_format: str = "json") -> str:
    """`--statistics` in a JSON format: an array of one object per rule, as ruff prints them, with the fix counts
    (`json-lines`: one object a line)."""
    rows = [
        {"code": row["code"], "name": row["name"], "count": row["count"], "fixable": row["safe"] > 0,
         "fixable_count": row["safe"], "unsafe_fixable_count": row["unsafe"]}
        for row in _rule_counts(findings)
    ]
    if output_format == "json-lines":
        return "".join(json.dumps(row) + "\n" for row in rows)
    return json.dumps(rows, indent=2) + "\n"


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
