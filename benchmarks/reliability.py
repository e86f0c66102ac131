"""The long reliability run: fuzz campaigns, and every corpus file through `--fix --unsafe-fixes` (docs/reliability.md).

    python benchmarks/reliability.py                  # the documented run
    python benchmarks/reliability.py --programs 200 --mutations 2 --no-corpus   # a quick one

The fuzzers are tests/test_fuzz.py's, run for longer:

- programs: hypothesmith's grammar-generated Python and the torch-flavoured
  programs, each linted with every rule and fixed with unsafe fixes; no internal
  error, no broken or unsettled fix, the fixed text parses and compiles, and fixing
  it again changes nothing;
- mutations: every fixture and every corpus file mutated `--mutations` times
  (truncated, lines deleted, duplicated or re-indented, NUL, invalid UTF-8, a BOM in
  the middle, CR-only line endings), linted and fixed in process: TL000 or findings,
  never an internal error, never a fix that breaks code that compiled;
- corpus: a copy of the wheels corpus (benchmarks/corpus.py) fixed by the CLI in a
  subprocess; every output must parse and compile as far as its original did, and a
  second run must fix nothing. The report counts changed files and fixes per rule.

Any failure is counted and printed with what reproduces it; the run exits 1 then.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPOSITORY / "tests"))

import corpus  # noqa: E402


def _compiles(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, "<fixed>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


# ---------------------------------------------------------------- generated programs


def run_programs(kind: str, count: int, seed: int) -> Tuple[int, List[str]]:
    """`count` generated programs through check_program; (programs run, failures)."""
    import hypothesmith
    from hypothesis import given, seed as hypothesis_seed, settings
    from hypothesis import strategies as st

    import test_fuzz

    strategy = hypothesmith.from_grammar() if kind == "grammar" else test_fuzz.torch_programs()
    versions = sorted(test_fuzz.CONFIGS)
    seen = [0]

    @hypothesis_seed(seed)
    @settings(max_examples=count, **test_fuzz.FUZZ)
    @given(strategy, st.booleans(), st.sampled_from(versions))
    def campaign(code, unsafe, version):
        seen[0] += 1
        test_fuzz.check_program(code, unsafe, test_fuzz.CONFIGS[version])

    try:
        campaign()
    except Exception:  # hypothesis re-raises the shrunk failure: report it, the run goes on
        return seen[0], [f"{kind} program: {traceback.format_exc(limit=3)}"]
    return seen[0], []


# ---------------------------------------------------------------- mutated files


def _mutate_one(task: Tuple[str, int, int]) -> Tuple[int, List[str]]:
    """Mutate one file `rounds` times; lint and fix each mutant in process. (mutants tried, failures)."""
    from test_fuzz import CONFIG, internal_errors, mutate

    from torchlint.engine.runner import lint_bytes
    from torchlint.fixes import fix_bytes

    path, rounds, seed = task
    original = Path(path).read_bytes()
    rng = random.Random(f"{seed}:{path}")
    failures = []
    for attempt in range(rounds):
        data, applied = mutate(original, rng)
        what = f"{path} after {applied} (seed {seed}, attempt {attempt})"
        try:
            findings = lint_bytes(data, "mutant.py", CONFIG).findings
            fixed = fix_bytes(data, "mutant.py", CONFIG, unsafe=True)
            problems = internal_errors(findings) + internal_errors(fixed.findings) + fixed.result.problems
            if fixed.changed and not _compiles(fixed.result.text) and _compiles(fixed.source.text):
                problems.append("the fixes broke code that compiled")
        except Exception:
            problems = [traceback.format_exc(limit=3)]
        failures += [f"{what}: {problem}" for problem in problems]
    return rounds, failures


def run_mutations(files: List[Path], rounds: int, seed: int, jobs: int) -> Tuple[int, List[str]]:
    tasks = [(str(path), rounds, seed) for path in files]
    tried, failures = 0, []
    with ProcessPoolExecutor(jobs) as pool:
        for count, found in pool.map(_mutate_one, tasks, chunksize=8):
            tried += count
            failures += found
    return tried, failures


# ---------------------------------------------------------------- the corpus through the CLI

_FIXED_FILE = re.compile(r"^- (?P<file>.+):$")
_FIXED_COUNT = re.compile(r"^    (?P<count>\d+) x (?P<code>TL\d{3}) \((?P<name>[^)]+)\)$")


def _fix_run(folder: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "torchlint", "check", "--fix", "--unsafe-fixes", "--select", "ALL", "--no-cache",
        "--no-respect-gitignore", "--exit-zero", "--show-fixes", "--quiet", "--output-format", "concise", ".",
    ]
    return subprocess.run(command, capture_output=True, cwd=folder, text=True, errors="replace")


def fixed_by_rule(stdout: str) -> Tuple[Counter, Counter]:
    """(fixes per rule, files fixed per rule) from the `--show-fixes` listing."""
    fixes, files = Counter(), Counter()
    for line in stdout.splitlines():
        match = _FIXED_COUNT.match(line)
        if match:
            code = f"{match['code']} ({match['name']})"
            fixes[code] += int(match["count"])
            files[code] += 1
    return fixes, files


def run_corpus(source: Path) -> Dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="torchlint-reliability-") as scratch:
        copy = Path(scratch) / "corpus"
        shutil.copytree(source, copy)
        (copy / "torchlint.toml").write_text("")  # this config, not one found above the scratch folder
        originals = {path: path.read_bytes() for path in sorted(copy.rglob("*.py"))}
        started = time.perf_counter()
        first = _fix_run(copy)
        seconds = time.perf_counter() - started
        second = _fix_run(copy)
        changed, corrupted, failures = 0, [], []
        for path, before in originals.items():
            after = path.read_bytes()
            if after == before:
                continue
            changed += 1
            new, old = after.decode("utf-8", "replace"), before.decode("utf-8", "replace")
            try:
                ast.parse(new)
            except (SyntaxError, ValueError):
                corrupted.append(f"{path.relative_to(copy)}: does not parse after --fix")
                continue
            if _compiles(old) and not _compiles(new):
                corrupted.append(f"{path.relative_to(copy)}: compiled before --fix, not after")
        for run, completed in (("first", first), ("second", second)):
            if completed.returncode not in (0, 1) or "Traceback" in completed.stderr:
                failures.append(f"{run} --fix run exited {completed.returncode}: {completed.stderr[-2000:]}")
            failures += [f"{run} --fix run: {line}" for line in completed.stderr.splitlines() if line.startswith("torchlint:")]
        if fixed_by_rule(second.stdout)[0]:
            failures.append(f"a second --fix run fixed more: {dict(fixed_by_rule(second.stdout)[0])}")
        fixes, files = fixed_by_rule(first.stdout)
        return {
            "files": len(originals), "changed": changed, "corrupted": corrupted, "failures": failures,
            "fixes": fixes, "files_by_rule": files, "seconds": seconds,
        }


# ---------------------------------------------------------------- the report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=2000, help="grammar-generated programs, and as many torch-flavoured ones")
    parser.add_argument("--mutations", type=int, default=10, help="mutants of each fixture and corpus file")
    parser.add_argument("--corpus-files", type=int, default=0, help="mutate only this many corpus files, sampled (0: all)")
    parser.add_argument("--no-corpus", action="store_true", help="skip the corpus (no download)")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)

    from conftest import FIXTURES

    failures: List[str] = []
    started = time.perf_counter()
    print("torchlint reliability run", " ".join(sys.argv[1:]) or "(defaults)", flush=True)

    if not args.no_corpus:
        report = run_corpus(corpus.ensure())
        failures += report["failures"] + report["corrupted"]
        print(
            f"corpus: {report['files']} files through --fix --unsafe-fixes in {report['seconds']:.0f} s, "
            f"{report['changed']} changed, {sum(report['fixes'].values())} fixes, {len(report['corrupted'])} corrupted",
            flush=True,
        )
        for code, count in sorted(report["fixes"].items(), key=lambda item: (-item[1], item[0])):
            print(f"  {code}: {count} fixes in {report['files_by_rule'][code]} files")
        _print_failures(report["failures"] + report["corrupted"])

    counts = {}
    for kind in ("grammar", "torch"):
        counts[kind], found = run_programs(kind, args.programs, args.seed)
        failures += found
        print(f"programs, {kind}: {counts[kind]} run, {len(found)} failing", flush=True)
        _print_failures(found)

    files = sorted(FIXTURES.rglob("*.py"))
    corpus_files: List[Path] = []
    if not args.no_corpus:
        corpus_files = corpus.python_files(corpus.ensure())
        if args.corpus_files:
            corpus_files = sorted(random.Random(args.seed).sample(corpus_files, min(args.corpus_files, len(corpus_files))))
    mutants, found = run_mutations(files + corpus_files, args.mutations, args.seed, args.jobs)
    failures += found
    print(f"mutations: {mutants} mutants of {len(files)} fixture and {len(corpus_files)} corpus files, {len(found)} failing", flush=True)
    _print_failures(found)

    print(f"failures: {len(failures)}; {time.perf_counter() - started:.0f} s in all")
    return 1 if failures else 0


def _print_failures(failures: List[str]) -> None:
    for failure in failures:
        print("  -", failure, flush=True)


if __name__ == "__main__":
    sys.exit(main())
