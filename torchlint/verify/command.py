"""`torchlint verify PATH...` and `torchlint rule CODE --verify`.

Nothing heavy is imported at module import: the linter loads this module for
every command, and torch only ever runs inside the witnesses' own processes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from torchlint.finding import Finding

_COUNTED = (("confirmed", "confirmed"), ("not-reproduced", "not reproduced"), ("skipped", "skipped"))


def register(subparsers) -> None:
    from torchlint.cli import _codes_list, add_preview_option

    verify = subparsers.add_parser("verify", help="lint, then confirm each finding by running it with torch")
    verify.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    verify.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto", help="where witnesses run (default: cuda when available)")
    verify.add_argument("--output-format", choices=("full", "concise", "json"))
    verify.add_argument("--jobs", "-j", type=int, default=None, help="witnesses run at once (default: all cores)")
    verify.add_argument("--select", type=_codes_list, help="exactly these rules")
    verify.add_argument("--extend-select", type=_codes_list, help="these rules too")
    verify.add_argument("--ignore", type=_codes_list, help="not these rules")
    add_preview_option(verify)
    verify.add_argument("--config", type=Path, help="a pyproject.toml or torchlint.toml to use instead of the nearest one")
    verify.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    verify.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    # What `cli.load_config` and `cli.collect` read from a `check` command line.
    verify.set_defaults(
        handler=run_verify, stdin_filename=None, no_respect_gitignore=False, force_exclude=False,
        fix=None, unsafe_fixes=None, no_cache=True,
    )

    rule = subparsers.choices.get("rule")
    if rule is not None:
        rule.add_argument("--verify", action="store_true", help="run the rule's canonical witness and print the evidence")
        rule.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto", help="where --verify runs")
        rule.set_defaults(handler=run_rule)


def run_verify(args) -> int:
    from torchlint import cli
    from torchlint.verify.run import verify
    from torchlint.verify.sandbox import Pool

    if "-" in args.paths:
        raise cli.UsageError("verify needs files: standard input cannot be verified")
    config = cli.load_config(args)
    # The witness server imports torch while the files are linted.
    with Pool() as pool:
        results = cli.collect(args, config)
        findings = sorted((finding for result in results for finding in result.findings), key=Finding.sort_key)
        sources = {result.filename: result.source.text for result in results if result.source is not None}
        jobs = args.jobs or os.cpu_count() or 1
        progress = _progress if sys.stderr.isatty() else None
        verifications = verify(findings, sources, config, pool, args.device, jobs, progress)
        missing = [name for name, active in (pool.protections or {}).items() if not active]
    if progress:
        sys.stderr.write("\r\x1b[K")
    if missing:
        sys.stderr.write(f"torchlint verify: witnesses ran without: {', '.join(missing)} (refused by the kernel; see docs/verify.md)\n")
    output_format = args.output_format or config.output_format or "full"
    if output_format == "json":
        payload = [dict(finding.as_json(), verification=result.as_json()) for finding, result in zip(findings, verifications)]
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_text(findings, verifications))
    if not args.quiet:
        # With JSON on standard output, the summary goes to standard error.
        stream = sys.stderr if output_format == "json" else sys.stdout
        stream.write(summary(verifications) + "\n")
    return cli.EXIT_FINDINGS if findings and not args.exit_zero else cli.EXIT_CLEAN


def _progress(done: int, total: int) -> None:
    sys.stderr.write(f"\r\x1b[Kverifying: {done}/{total} witnesses run")
    sys.stderr.flush()


def render_text(findings, verifications) -> str:
    from torchlint.reporters.text import header

    lines = []
    for finding, result in zip(findings, verifications):
        lines.append(header(finding))
        lines.append(f"  {result.status}: {result.evidence or '-'} [torch {result.torch or '-'}, {result.device}]")
    return "".join(line + "\n" for line in lines)


def summary(verifications) -> str:
    counts = {key: 0 for key, _ in _COUNTED}
    for result in verifications:
        counts[result.status.partition(" ")[0]] += 1
    return ", ".join(f"{counts[key]} {label}" for key, label in _COUNTED)


def run_rule(args) -> int:
    from torchlint import cli

    if not getattr(args, "verify", False):
        return cli.run_rule(args)
    from torchlint.rules import all_rules
    from torchlint.verify.run import run_canonical
    from torchlint.verify.witnesses import load_all

    if args.all:
        raise cli.UsageError("--verify takes one rule, not --all; `torchlint verify PATH` verifies findings")
    wanted = (args.code or "").strip()
    rule = next((rule for rule in all_rules() if wanted.upper() == rule.code or wanted == rule.name), None)
    if rule is None:
        raise cli.UsageError(f"unknown rule {args.code!r}; `torchlint rule --all` lists them")
    if rule.code not in load_all():
        print(f"{rule.code} {rule.name}: no witness for this rule")
        return cli.EXIT_CLEAN
    result = run_canonical(rule.code, args.device)
    print(f"{rule.code} {rule.name}: {result.status}")
    print(f"  evidence: {result.evidence or '-'}")
    print(f"  torch {result.torch or '-'}, device {result.device}")
    return cli.EXIT_CLEAN if result.status == "confirmed" else cli.EXIT_FINDINGS
