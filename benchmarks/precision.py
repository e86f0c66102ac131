"""The precision review: `python benchmarks/precision.py` (docs/precision.md records the last review).

Lints a real-code corpus with every rule, groups the findings per rule, and prints, for
each rule, every finding when there are at most `--limit`, else a seeded sample of
`--limit` findings stratified by package or repository (they take turns, each in its own
seeded order, so one package full of one idiom cannot fill the sample). Two corpora:
`--corpus wheels` (benchmarks/corpus.py: library code of pinned wheels, the default) and
`--corpus training` (benchmarks/training_corpus.py: training scripts and notebooks of
public repositories at recorded commits, 20 findings a rule) and `--corpus holdout` (a
held-out round: the named repositories of benchmarks/holdout-repos.txt, each linted at its
root with the default selection and `--preview`, as a user who clones it would, so that its own settings and project
intent apply; 20 findings a rule).
Each printed finding carries a few lines of source around it, for a person to judge
true or false positive against the rule's definition in the spec.

    python benchmarks/precision.py                      # lint, then print the summary and samples
    python benchmarks/precision.py --json /tmp/c.json   # reuse a lint already written as JSON
    python benchmarks/precision.py --rule TL203 --context 8
    python benchmarks/precision.py --summary            # per-rule, per-package counts only
    python benchmarks/precision.py --corpus training --json /tmp/t.json
    python benchmarks/precision.py --corpus holdout --seed 20261203 owner/name owner/name ...
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import training_corpus  # noqa: E402

SEED = 20240603
LIMITS = {"wheels": 40, "training": 20, "holdout": 20}
HOLDOUT = training_corpus.CACHE / "holdout"
FOLDERS = {"wheels": corpus.CORPUS, "training": training_corpus.CORPUS, "holdout": HOLDOUT}
# Set by main(): the corpus the findings come from.
CORPUS = corpus.CORPUS


def lint_command(folder: Path) -> List[str]:
    return [
        sys.executable, "-m", "torchlint", "check", "--no-respect-gitignore", "--select", "ALL",
        "--exit-zero", "--output-format", "json", str(folder),
    ]


def lint_round(repositories: Sequence[str]) -> List[dict]:
    """Each held-out repository linted from its root, paths made absolute so that they sort by repository."""
    findings: List[dict] = []
    for name in repositories:
        root = HOLDOUT / name.replace("/", "+")
        if not (root / training_corpus.COMPLETE).is_file():
            raise SystemExit(f"{name} is not extracted: run benchmarks/training_corpus.py --repos-file benchmarks/holdout-repos.txt --into {HOLDOUT}")
        # The default selection, preview rules included: what a user meets, and what the preview tier is judged on.
        command = [sys.executable, "-m", "torchlint", "check", "--no-respect-gitignore", "--no-cache", "--preview", "--exit-zero", "--output-format", "json", "."]
        # Linted from a copy outside this checkout, as a clone stands alone: in the cache folder, the project
        # settings lookup walks up to torchlint's own pyproject.toml and reads its torch requirement as the repository's.
        with tempfile.TemporaryDirectory(prefix="holdout-") as scratch:
            clone = Path(scratch) / root.name
            shutil.copytree(root, clone, symlinks=True)
            completed = subprocess.run(command, cwd=clone, check=True, capture_output=True, text=True)
        for finding in json.loads(completed.stdout):
            finding["filename"] = str(root / finding["filename"])
            findings.append(finding)
    return findings


def load_findings(json_path: Optional[Path], name: str, repositories: Sequence[str] = ()) -> List[dict]:
    if json_path is not None:
        return json.loads(json_path.read_text(encoding="utf-8"))
    if name == "holdout":
        return lint_round(repositories)
    if name == "wheels":
        corpus.ensure()
    elif training_corpus.ensure(training_corpus.read_repos(), verbose=False):
        raise SystemExit("some repositories of benchmarks/training-repos.txt are not extracted: run benchmarks/training_corpus.py")
    completed = subprocess.run(lint_command(FOLDERS[name]), check=True, capture_output=True, text=True)
    return json.loads(completed.stdout)


def package_of(filename: str) -> str:
    # Paths look like .../corpus/<package>-<version>/<module path> or .../training/<owner>+<name>/<path>.
    parts = Path(filename).resolve().relative_to(CORPUS).parts
    return parts[0]


def stratified_sample(findings: Sequence[dict], limit: int, seed: int) -> List[dict]:
    if len(findings) <= limit:
        return list(findings)
    rng = random.Random(seed)
    per_package: Dict[str, List[dict]] = collections.defaultdict(list)
    for finding in findings:
        per_package[package_of(finding["filename"])].append(finding)
    queues = []
    for package in sorted(per_package):
        queue = list(per_package[package])
        rng.shuffle(queue)
        queues.append(queue)
    chosen: List[dict] = []
    while len(chosen) < limit:
        for queue in queues:
            if queue and len(chosen) < limit:
                chosen.append(queue.pop())
    return sorted(chosen, key=lambda f: (f["filename"], f["location"]["row"], f["location"]["column"]))


def context_of(finding: dict, lines_around: int) -> str:
    lines = _source_lines(finding)
    row = finding["location"]["row"]
    first, last = max(1, row - lines_around), min(len(lines), row + lines_around)
    return "\n".join(
        f"{'>' if number == row else ' '}{number:5d}| {lines[number - 1]}" for number in range(first, last + 1)
    )


def _source_lines(finding: dict) -> List[str]:
    """The lines a finding's row counts in: the file's, or for a notebook its code cell's."""
    text = Path(finding["filename"]).read_text(encoding="utf-8", errors="replace")
    cell = finding.get("cell")
    if cell is None:
        return text.splitlines()
    import nbformat

    notebook = nbformat.reads(text, as_version=4)
    return notebook.cells[cell - 1].source.splitlines()


def print_summary(by_rule: Dict[str, List[dict]]) -> None:
    print(f"{'rule':<7} {'name':<36} {'findings':>8}  per package")
    for code in sorted(by_rule):
        findings = by_rule[code]
        packages = collections.Counter(package_of(f["filename"]) for f in findings)
        spread = ", ".join(f"{name.rsplit('-', 1)[0]} {count}" for name, count in packages.most_common())
        print(f"{code:<7} {findings[0]['name']:<36} {len(findings):>8}  {spread}")


def print_samples(by_rule: Dict[str, List[dict]], limit: int, seed: int, lines_around: int) -> None:
    for code in sorted(by_rule):
        findings = by_rule[code]
        sample = stratified_sample(findings, limit, seed)
        print(f"\n{'=' * 100}\n{code} {findings[0]['name']}: {len(findings)} findings, {len(sample)} shown (seed {seed})")
        for index, finding in enumerate(sample, 1):
            where = Path(finding["filename"]).resolve().relative_to(CORPUS)
            cell = f":cell {finding['cell']}" if finding.get("cell") is not None else ""
            print(f"\n--- {code} #{index} {where}{cell}:{finding['location']['row']}:{finding['location']['column']}")
            print(f"    {finding['message']}")
            print(context_of(finding, lines_around))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=sorted(FOLDERS), default="wheels", help="which corpus the findings are of")
    parser.add_argument("--json", type=Path, help="findings already written by the lint command, instead of linting")
    parser.add_argument("--rule", action="append", default=[], help="only these codes (repeatable)")
    parser.add_argument("--limit", type=int, help="findings shown per rule (all when fewer; default 40 wheels, 20 training)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--context", type=int, default=4, help="source lines shown each side of a finding")
    parser.add_argument("--summary", action="store_true", help="print only the per-rule counts")
    parser.add_argument("--write-json", type=Path, help="also write the findings linted to this file")
    parser.add_argument("repositories", nargs="*", help="with --corpus holdout: the round's repositories (owner/name)")
    options = parser.parse_args(argv)
    global CORPUS
    CORPUS = FOLDERS[options.corpus]
    limit = options.limit or LIMITS[options.corpus]

    if options.json is None and options.corpus != "holdout":
        print("lint command:", " ".join(lint_command(CORPUS)), file=sys.stderr)
    if options.corpus == "holdout" and options.json is None and not options.repositories:
        parser.error("--corpus holdout lints the repositories named after the options")
    findings = load_findings(options.json, options.corpus, options.repositories)
    if options.write_json is not None:
        options.write_json.write_text(json.dumps(findings, indent=1), encoding="utf-8")
    by_rule: Dict[str, List[dict]] = collections.defaultdict(list)
    for finding in findings:
        if not options.rule or finding["code"] in options.rule:
            by_rule[finding["code"]].append(finding)
    print_summary(by_rule)
    if not options.summary:
        print_samples(by_rule, limit, options.seed, options.context)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
