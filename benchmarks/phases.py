"""Where one cold process spends its CPU time, by phase, with the rules' own work and without it.

    python benchmarks/run.py --no-torchfix --no-full --no-doc   # once: prepares the sample and its listing
    python benchmarks/phases.py                                 # about 2 minutes on 2 cores
    python benchmarks/phases.py --reps 9
    python benchmarks/phases.py --instructions                  # also each run's instructions, under valgrind

The cold target of `benchmarks/run.py` compares one `torchlint check --no-cache --jobs 1` process with the
libcst parse floor. This script says what the difference is made of. Each repetition runs, in fresh processes
and in turn (so that a machine whose speed drifts slows them alike):

- `floor`: the floor of `benchmarks/run.py`, `libcst.parse_module` on every file torchlint parses;
- `torchlint`: the benchmark's cold command, with each phase's CPU time counted where it runs, nested phases
  taken out of the phase around them (a project file parsed while a rule follows a name into it counts as parse);
- `rules off`: the same, with every rule's visit, leave, reference and `finish` handler replaced by one that does
  nothing. What is left is the engine alone: reading, the prefilter, the parse, the walk with its call graph and
  fact recognizers, the report; the difference with `torchlint` is the rules' own work, the value model and the
  other analyses they ask for included.

Phases: `parse` (libcst, the engine's front included), `prefilter` (which rules run on a file, the first call
importing the rules), `set-up` (each file's walker), `walk` (the walk and every handler it calls), `finish` (the
rules' `finish`), and `rest`: the process's CPU time (`resource.getrusage`, user and system) less the phases:
Python and torchlint starting, discovery, reading and decoding, the report. Medians of the repetitions.

With `--instructions`, each of the three runs is also made once under `valgrind --tool=callgrind` (with
`PYTHONHASHSEED=0`, so that string hashing orders sets alike): the instructions a run executes do not depend on the
machine's speed or its neighbours, where the seconds do (this machine's drift by a tenth from one minute to the
next); a few minutes more.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402 - the benchmark's sample, config and floor

PHASES = ("parse", "prefilter", "set-up", "walk", "finish", "rest")

# Run by `python -c`: argv is the mode ("torchlint" or "rules-off") and the check's arguments. Prints the seconds
# of each phase as one JSON line on standard error (the report goes to a file).
CHILD = """
import json, resource, sys, time
from torchlint import cli
from torchlint.engine import parsing, runner
clock = time.process_time
spent = {}
inner = []

def counted(phase, function):
    def run(*args, **kwargs):
        inner.append(0.0)
        start = clock()
        try:
            return function(*args, **kwargs)
        finally:
            elapsed = clock() - start
            spent[phase] = spent.get(phase, 0.0) + elapsed - inner.pop()
            if inner:
                inner[-1] += elapsed
    return run

walker = runner._Walker
if sys.argv[1] == "rules-off":
    set_up = walker.__init__
    def nothing(*args):
        return None
    def without_handlers(self, ctx, rules):
        set_up(self, ctx, rules)
        for table in (self.visits, self.leaves):
            for node_type, handlers in table.items():
                table[node_type] = [(rule, nothing) for rule, _ in handlers]
        self.references = [(rule, nothing) for rule, _ in self.references]
        visits, leaves, recognizers = self._call_items
        self._call_items = (
            [((handler[0], nothing), parts, heads) for handler, parts, heads in visits],
            [((handler[0], nothing), parts, heads) for handler, parts, heads in leaves],
            recognizers,
        )
    walker.__init__ = without_handlers
    walker.finish = lambda self, rule: None
parsing.parse_module = counted("parse", parsing.parse_module)
runner.rules_to_run = counted("prefilter", runner.rules_to_run)
walker.__init__ = counted("set-up", walker.__init__)
walker.walk = counted("walk", walker.walk)
walker.finish = counted("finish", walker.finish)
try:
    cli.main(sys.argv[2:])
except SystemExit:
    pass
usage = resource.getrusage(resource.RUSAGE_SELF)
total = usage.ru_utime + usage.ru_stime
spent["rest"] = total - sum(spent.values())
spent["total"] = total
print(json.dumps(spent), file=sys.stderr)
"""

FLOOR_CHILD = run.FLOOR + """
import json, resource
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"total": usage.ru_utime + usage.ru_stime}), file=sys.stderr)
"""


def measure(command: List[str]) -> Dict[str, float]:
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    last = done.stderr.strip().splitlines()[-1:] or [""]
    try:
        return json.loads(last[0])
    except json.JSONDecodeError:
        raise SystemExit(f"{command[:3]} failed:\n{done.stderr}") from None


def instructions(command: List[str]) -> int:
    """The instructions `command` executes, counted by callgrind."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False, env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind gave no count for {command[:3]}:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="One cold torchlint process's CPU time by phase, against the floor.")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each run (medians are reported)")
    parser.add_argument("--instructions", action="store_true", help="also count each run's instructions with valgrind")
    args = parser.parse_args(argv)
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    sample = run.corpus.CACHE / "bench-x1"
    listing = run.BENCH / "parsed-x1.txt"
    config = run.BENCH / "torchlint.toml"
    if not (sample.is_dir() and listing.is_file() and config.is_file()):
        raise SystemExit("no benchmark sample yet: run `python benchmarks/run.py --no-torchfix --no-full --no-doc` first")
    check = [
        "check", "--config", str(config), "--no-respect-gitignore", "--output-format", "json", "--exit-zero",
        "--no-cache", "--jobs", "1", "--output-file", str(run.BENCH / "phases-report.json"), str(sample),
    ]
    commands = {
        "floor": [sys.executable, "-c", FLOOR_CHILD, str(listing)],
        "torchlint": [sys.executable, "-c", CHILD, "torchlint", *check],
        "rules off": [sys.executable, "-c", CHILD, "rules-off", *check],
    }
    runs: Dict[str, List[Dict[str, float]]] = {name: [] for name in commands}
    for _ in range(args.reps):
        for name, command in commands.items():
            runs[name].append(measure(command))
    floor = statistics.median(each["total"] for each in runs["floor"])
    print(f"One cold process on the benchmark sample, CPU seconds, medians of {args.reps} repetitions; floor {floor:.2f} s.\n")
    print("| phase | torchlint | rules off | torchlint - rules off |")
    print("|---|---|---|---|")
    for phase in (*PHASES, "total"):
        full = statistics.median(each.get(phase, 0.0) for each in runs["torchlint"])
        off = statistics.median(each.get(phase, 0.0) for each in runs["rules off"])
        name = f"**{phase}** (x floor: {full / floor:.2f} and {off / floor:.2f})" if phase == "total" else phase
        print(f"| {name} | {full:.3f} | {off:.3f} | {full - off:+.3f} |")
    if args.instructions:
        counted = {name: instructions(command) for name, command in commands.items()}
        print("\nInstructions (callgrind, one run each):\n")
        for name, count in counted.items():
            print(f"- {name}: {count / 1e9:.2f} G, {count / counted['floor']:.3f}x the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
