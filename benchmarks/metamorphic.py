"""The metamorphic suite in full (issue 34): every fixture x every meaning-preserving rewrite.

For each positive fixture (one that expects a finding of a default rule) and each rewrite that applies to it
(tests/metamorphic/rewrites.py: tqdm/enumerate wrappers, the loop into a function or a Trainer class, renamed
variables, aliased imports, argparse hyper-parameters, the model in another file, DataParallel/compile, a `while`
loop, the functional loss as a value, notebook cells, a star import of a project module), the finding must be on
the same statement of the rewritten program; for each trap, the rewritten program must stay silent. Prints recall
per rewrite and per rule (found/expected), the traps kept silent, and every (rewrite, rule) pair that is not
invariant; tests/test_metamorphic.py runs a sample of the same in CI and holds the table of known gaps.

    python benchmarks/metamorphic.py              # the summary, then the pairs that are not invariant
    python benchmarks/metamorphic.py --markdown   # the tables docs/precision.md records
    python benchmarks/metamorphic.py --rewrite while --rewrite tqdm --details

Ends with the comparison against the known gaps of tests/test_metamorphic.py (GAPS): a pair that is not invariant
and not listed, or listed and now invariant; `--check` makes either an exit status of 1.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The rewrites live with the tests (they are not part of torchlint); the tests folder comes first on the path so
# that `metamorphic` is that package and not this script.
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(1, str(ROOT))

from metamorphic.harness import all_cases, run, tally  # noqa: E402
from metamorphic.rewrites import all_rewrites  # noqa: E402


def percent(found: int, total: int) -> str:
    return f"{100 * found / total:.1f}%" if total else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rewrite", action="append", help="only these rewrites (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    parser.add_argument("--details", action="store_true", help="print every missed expectation and false alarm")
    parser.add_argument("--check", action="store_true", help="exit 1 where the run disagrees with GAPS")
    options = parser.parse_args(argv)
    rewrites = [rewrite for rewrite in all_rewrites() if not options.rewrite or rewrite.name in options.rewrite]
    cases = all_cases()
    started = time.monotonic()
    outcomes = []
    per_rewrite = collections.OrderedDict()
    for rewrite in rewrites:
        row = per_rewrite[rewrite.name] = collections.Counter()
        for case in cases:
            outcome = run(case, rewrite)
            if outcome is None:
                continue
            outcomes.append(outcome)
            row["applied"] += 1
            row["expected"] += len(outcome.expectations)
            row["found"] += sum(found for *_, found in outcome.expectations)
            if case.is_trap:
                row["traps"] += 1
                row["silent"] += not outcome.unexplained
            else:
                row["positives"] += 1
                row["unexplained on positives"] += len(outcome.unexplained)
            if options.details:
                for marker, code in outcome.missed():
                    print(f"missed  {rewrite.name:13} {code} {case.name}:{case.marked.rows[marker]}")
                for path, cell, row_number, code in outcome.unexplained:
                    where = f"cell {cell} " if cell else ""
                    print(f"extra   {rewrite.name:13} {code} {case.name} -> {path}:{where}{row_number}")
    elapsed = time.monotonic() - started
    pairs = tally([outcome for outcome in outcomes if outcome.rewrite != "identity"])
    per_rule = collections.defaultdict(collections.Counter)
    for (rewrite, code), counts in pairs.items():
        per_rule[code]["found"] += counts.found
        per_rule[code]["expected"] += counts.expected
        per_rule[code]["unexplained"] += counts.unexplained
    positives = sum(not case.is_trap for case in cases)
    date = datetime.date.today().isoformat()
    print(f"{len(cases)} fixture files ({positives} positive, {len(cases) - positives} traps) x {len(rewrites)} rewrites, "
          f"{elapsed:.0f} s, {date}")
    print()
    if options.markdown:
        print("| rewrite | applies to | found / expected | recall | traps silent | findings no marker explains (positives) |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, row in per_rewrite.items():
            print(f"| {name} | {row['applied']} | {row['found']}/{row['expected']} | {percent(row['found'], row['expected'])} "
                  f"| {row['silent']}/{row['traps']} | {row['unexplained on positives']} |")
        print()
        print("| rule | found / expected | recall | findings no marker explains |")
        print("|---|---:|---:|---:|")
        for code in sorted(per_rule):
            row = per_rule[code]
            print(f"| {code} | {row['found']}/{row['expected']} | {percent(row['found'], row['expected'])} | {row['unexplained']} |")
        print()
        print("| rewrite | rule | found / expected | findings no marker explains |")
        print("|---|---|---:|---:|")
        for (rewrite, code), counts in sorted(pairs.items()):
            if counts.failures:
                print(f"| {rewrite} | {code} | {counts.found}/{counts.expected} | {counts.unexplained} |")
        return compare_with_gaps(pairs, {rewrite.name for rewrite in rewrites}, options.check)
    print(f"{'rewrite':14} {'applies':>7} {'found/expected':>15} {'recall':>7} {'traps silent':>13} {'extra on positives':>19}")
    for name, row in per_rewrite.items():
        print(f"{name:14} {row['applied']:7} {row['found']:>7}/{row['expected']:<7} {percent(row['found'], row['expected']):>7} "
              f"{row['silent']:>6}/{row['traps']:<6} {row['unexplained on positives']:19}")
    print()
    print(f"{'rule':6} {'found/expected':>15} {'recall':>7} {'extra':>6}   (all rewrites but identity)")
    for code in sorted(per_rule):
        row = per_rule[code]
        print(f"{code:6} {row['found']:>7}/{row['expected']:<7} {percent(row['found'], row['expected']):>7} {row['unexplained']:6}")
    print()
    print("Pairs that are not invariant (rewrite, rule: found/expected, findings no marker explains):")
    for (rewrite, code), counts in sorted(pairs.items()):
        if counts.failures:
            print(f"  {rewrite:14} {code}: {counts.found}/{counts.expected}, {counts.unexplained} extra")
    return compare_with_gaps(pairs, {rewrite.name for rewrite in rewrites}, options.check)


def compare_with_gaps(pairs, rewrites, check: bool) -> int:
    from test_metamorphic import GAPS

    failing = {pair for pair, counts in pairs.items() if counts.failures}
    listed = {pair for pair in GAPS if pair[0] in rewrites}
    print()
    print(f"Known gaps (tests/test_metamorphic.py GAPS): {len(listed)} pairs; not invariant here: {len(failing)} pairs")
    for pair in sorted(failing - listed):
        print(f"  not in GAPS, fails: {pair}")
    for pair in sorted(listed - failing):
        print(f"  in GAPS, now invariant (remove it): {pair}")
    return 1 if check and failing != listed else 0


if __name__ == "__main__":
    sys.exit(main())
