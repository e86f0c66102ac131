"""How each rule's cost grows with the size of the file: linear, or worse.

    python benchmarks/scaling.py                  # every rule and the adversarial shapes; prints the table
    python benchmarks/scaling.py --rules TL205 TL101 --no-shapes
    python benchmarks/scaling.py --json out.json  # the measurements, for a later comparison

For every rule of the catalogue, its trigger (its positive fixture under fixtures/ with the most
findings of its code, else its documented example) is repeated 1, 4 and 16 times in one file and
each file is linted with every rule selected (`--select ALL --preview`). Repetitions are made independent by
renaming what the file binds at module level (`model` -> `model_r3` in the fourth copy; names that
are also attributes, parameters, keywords or imports keep theirs, so that an API still reads as
one), and `from __future__` imports are kept only at the top. Then three adversarial shapes grown
the same way: many `.cuda()` lines, a notebook with one `.cuda()` per cell, and one long chain of
`.float()` calls (issue 33).

The cost is counted, not timed: the number of Python function calls and calls of built-in
functions made while the file is linted (`sys.setprofile`'s `call` and `c_call` events), which
depends on the code and the input, not on the machine or its neighbours, so a test can assert on
it (tests/test_scaling.py). Work done inside one native call (libcst's parser, written in Rust)
counts once whatever it costs: the wall time is printed beside the count for that reason.

The growth from 1x to 16x is judged twice:
- `ratio` = (cost at 16x - overhead) / (cost at 1x - overhead), the overhead being the cost of
  linting a two-line file (`import torch`), the fixed price of a file: about 16 when linear;
- `marginal` = (cost 16x - cost 4x) / (cost 4x - cost 1x) / 4, which the fixed costs of the
  trigger itself (a rule's analysis done once per file) cancel out of: about 1 when linear, 4 when
  quadratic.
A case is flagged SUPERLINEAR when the ratio exceeds 16 x 1.5 or the marginal growth exceeds 1.5.
Exits 1 when any case is flagged.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, ScopeProvider

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SIZES = (1, 4, 16)
# Growth allowed beyond linear: a rule's per-repetition work may vary a little with what came before it (a set that
# grows, a lookup whose chain gets longer), but a cost that grows with the square of the file exceeds it at 16x.
SLACK = 1.5
OVERHEAD_FILE = "import torch\nimport torch.nn as nn\n"
_FIXTURE_CONFIG = "# fixture-config:"


@dataclass
class Cost:
    calls: int
    seconds: float
    findings: int


@dataclass
class Growth:
    case: str
    source: str
    costs: List[Cost]
    overhead: int

    @property
    def ratio(self) -> float:
        """NaN when the 1x file costs no more than the overhead (a file libcst cannot parse is not walked)."""
        first, last = self.costs[0].calls - self.overhead, self.costs[-1].calls - self.overhead
        return last / first if first > 0 else float("nan")

    @property
    def marginal(self) -> float:
        """(16x - 4x) / (4x - 1x), over the 4 it is for a linear cost."""
        one, four, sixteen = (cost.calls for cost in self.costs)
        step = (SIZES[2] - SIZES[1]) / (SIZES[1] - SIZES[0])
        return (sixteen - four) / (four - one) / step if four > one else float("inf")

    @property
    def superlinear(self) -> bool:
        return self.ratio > SIZES[-1] * SLACK or self.marginal > SLACK  # (NaN compares False)


def _count_calls() -> Tuple[Callable[[], int], Callable[[], None]]:
    count = 0

    def on_event(frame, event, arg) -> None:
        nonlocal count
        if event == "call" or event == "c_call":
            count += 1

    sys.setprofile(on_event)

    def stop() -> None:
        sys.setprofile(None)

    return (lambda: count), stop


def config_table(text: str) -> dict:
    """`--select ALL` plus the config a fixture sets on its first lines (`# fixture-config: torch-version = "2.1"`)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    lines = [line.split(_FIXTURE_CONFIG, 1)[1] for line in text.splitlines() if line.startswith(_FIXTURE_CONFIG)]
    table = tomllib.loads("\n".join(lines))
    table.setdefault("select", ["ALL"])
    return table


def lint_cost(filename: str, data: bytes, table: dict) -> Cost:
    """Lint `data` as `filename`, alone in a new folder (nothing read from another file, nothing cached from an
    earlier measurement), counting the calls."""
    from torchlint.config import build
    from torchlint.engine.parallel import lint_file_bytes

    with tempfile.TemporaryDirectory(prefix="torchlint-scaling-") as folder:
        root = Path(folder)
        (root / filename).write_bytes(data)
        # Every rule is measured, preview ones too (`--preview`): a rule leaving preview must already scale.
        config = build({"preview": True, **table}, root=root, path=None, where="scaling", torch_requirement_from=root)
        started = time.perf_counter()
        count, stop = _count_calls()
        try:
            result = lint_file_bytes(data, str(root / filename), config)
        finally:
            stop()
        return Cost(count(), time.perf_counter() - started, len(result.findings))


def overhead() -> int:
    """The cost of linting a file with nearly nothing in it: what any file pays."""
    lint_cost("overhead.py", OVERHEAD_FILE.encode(), {"select": ["ALL"]})  # first use: imports, caches
    return lint_cost("overhead.py", OVERHEAD_FILE.encode(), {"select": ["ALL"]}).calls


def growth(case: str, source: str, filename: str, grown: Callable[[int], bytes], table: dict, base: int) -> Growth:
    """The cost of `grown(times)` for each size, after one unmeasured lint of the smallest (first uses)."""
    lint_cost(filename, grown(SIZES[0]), table)
    return Growth(case, source, [lint_cost(filename, grown(times), table) for times in SIZES], base)


# ------------------------------------------------------------------------------------------------ repeating triggers

def repeated(text: str, times: int) -> str:
    """`text` `times` times over, each copy after the first with its module-level names renamed (`_r1`, `_r2`, ...)
    and without its `from __future__` imports (allowed only at the top of a file); copied as it is when libcst cannot
    parse it (TL000's trigger)."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return "\n".join([text.rstrip("\n") + "\n"] * times)
    names = _renamable(module)
    copies = [text.rstrip("\n") + "\n"]
    for index in range(1, times):
        copy = module.visit(_Renamer(names, f"_r{index}"))
        copy = copy.with_changes(body=[statement for statement in copy.body if not _future_import(statement)])
        copies.append("\n" + copy.code.rstrip("\n") + "\n")
    return "".join(copies)


def _future_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) and small.module.value == "__future__"
        for small in statement.body
    )


def _renamable(module: cst.Module) -> Set[str]:
    """The names the module binds at its top level (assignments, `def`, `class`, loop and `with` targets), less those
    also written where a rename would change meaning: attributes, parameters, keywords, imports, dunders."""
    scopes = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
    bound: Set[str] = set()
    for scope in set(scopes.values()):
        if isinstance(scope, GlobalScope):
            for assignment in scope.assignments:
                node = getattr(assignment, "node", None)
                if not isinstance(node, (cst.Import, cst.ImportFrom)):
                    bound.add(assignment.name)
    kept = _KeptNames()
    module.visit(kept)
    return {name for name in bound - kept.names if not name.startswith("__")}


class _KeptNames(cst.CSTVisitor):
    def __init__(self):
        self.names: Set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.names.add(node.attr.value)

    def visit_Param(self, node: cst.Param) -> None:
        self.names.add(node.name.value)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.names.add(node.keyword.value)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        written = node.asname.name if node.asname is not None else node.name
        for part in cst.helpers.get_full_name_for_node(written).split("."):
            self.names.add(part)


class _Renamer(cst.CSTTransformer):
    def __init__(self, names: Set[str], suffix: str):
        self.names = names
        self.suffix = suffix

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=updated.value + self.suffix) if updated.value in self.names else updated


def trigger(rule) -> Tuple[str, str, str]:
    """(where it comes from, file name, text) of the rule's trigger: its positive fixture with the most findings of
    its code (the smallest on a tie), else its documented example."""
    from torchlint.engine.expectations import expected_findings

    best: Optional[Tuple[int, int, Path]] = None
    for path in FIXTURES.rglob(f"{rule.code}_*.py"):
        if "examples" in path.parts or "projects" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        count = sum(1 for _, _, code in expected_findings(text) if code == rule.code)
        if count and (best is None or (-count, len(text)) < (-best[0], best[1])):
            best = (count, len(text), path)
    if best is not None:
        path = best[2]
        return str(path.relative_to(ROOT)), path.name, path.read_text(encoding="utf-8", errors="replace")
    from textwrap import dedent

    return "documented example", f"{rule.code.lower()}_example.py", dedent(rule.example).lstrip("\n")


def rule_growth(rule, base: int) -> Growth:
    source, filename, text = trigger(rule)
    table = config_table(text)
    return growth(rule.code, source, filename, lambda times: repeated(text, times).encode(), table, base)


# ------------------------------------------------------------------------------------------------ adversarial shapes

def cuda_lines(count: int) -> bytes:
    """A script of `count` lines each moving a new tensor with `.cuda()`: TL205 reports every one."""
    return ("import torch\n\n" + "".join(f"x{index} = torch.zeros({index}).cuda()\n" for index in range(count))).encode()


def cuda_cells(count: int) -> bytes:
    """A notebook of `count` code cells, each with one `.cuda()`."""
    cells = [_cell("import torch")] + [_cell(f"y{index} = torch.ones(2).cuda()") for index in range(count)]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(notebook, indent=1).encode()


def _cell(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}


def float_chain(length: int) -> bytes:
    """One expression of `length` chained `.float()` calls: every call node of the chain holds all the calls inside
    it, so anything that walks the chain from each call costs the square of its length."""
    return ("import torch\n\nt = torch.zeros(3)\nx = t" + ".float()" * length + "\n").encode()


# name -> (file name, shape, size of the 1x file)
SHAPES: Dict[str, Tuple[str, Callable[[int], bytes], int]] = {
    "many .cuda() lines": ("cuda_lines.py", cuda_lines, 64),
    "notebook, one .cuda() per cell": ("cuda_cells.ipynb", cuda_cells, 64),
    "chain of .float() calls": ("float_chain.py", float_chain, 50),
}


def shape_growth(name: str, base: int, unit: Optional[int] = None) -> Growth:
    filename, shape, default_unit = SHAPES[name]
    size = unit or default_unit
    return growth(name, f"{size} per 1x", filename, lambda times: shape(size * times), {"select": ["ALL"]}, base)


# ------------------------------------------------------------------------------------------------ the report

def table(results: Sequence[Growth]) -> str:
    rows = [
        "| case | trigger | findings 1x / 4x / 16x | calls 1x | calls 4x | calls 16x | ratio | marginal | seconds 1x / 16x | |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        one, four, sixteen = result.costs
        rows.append(
            f"| {result.case} | {result.source} | {one.findings} / {four.findings} / {sixteen.findings} "
            f"| {one.calls} | {four.calls} | {sixteen.calls} | {_figure(result.ratio, 1)} | {_figure(result.marginal, 2)} "
            f"| {one.seconds:.2f} / {sixteen.seconds:.2f} | {'SUPERLINEAR' if result.superlinear else ''} |"
        )
    return "\n".join(rows)


def _figure(value: float, digits: int) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", nargs="*", help="only these codes (default: every rule)")
    parser.add_argument("--no-rules", action="store_true", help="only the adversarial shapes")
    parser.add_argument("--no-shapes", action="store_true", help="only the rules")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args(argv)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))  # as the CLI does for deep trees
    from torchlint.rules import all_rules

    base = overhead()
    print(f"overhead (a two-line file): {base} calls", file=sys.stderr)
    results: List[Growth] = []
    if not args.no_rules:
        for rule in all_rules():
            if args.rules and rule.code not in args.rules:
                continue
            results.append(rule_growth(rule, base))
            print(table(results[-1:]).splitlines()[-1], file=sys.stderr)
    if not args.no_shapes:
        for name in SHAPES:
            results.append(shape_growth(name, base))
            print(table(results[-1:]).splitlines()[-1], file=sys.stderr)
    print(f"overhead: {base} calls; bound: ratio <= {SIZES[-1] * SLACK:g}, marginal <= {SLACK:g}\n")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(
            [
                dict(asdict(result), **{name: None if math.isnan(value) else value for name, value in (
                    ("ratio", result.ratio), ("marginal", result.marginal))})
                for result in results
            ],
            indent=1,
        ))
    flagged = [result.case for result in results if result.superlinear]
    if flagged:
        print(f"\nsuperlinear: {', '.join(flagged)}", file=sys.stderr)
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
