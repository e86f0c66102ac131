"""The metamorphic suite's CI sample (issue 34); benchmarks/metamorphic.py runs every fixture.

Each rewrite in tests/metamorphic/rewrites.py keeps a program's meaning (a loop wrapped in tqdm, moved into a
function, a model moved to another file...). On a deterministic sample of the fixtures, every rewrite must keep
each expected finding of a default rule on the same statement, and add no finding no marker explains (on a trap:
none at all). The pairs the analysis does not follow yet are in GAPS, one table with a reason each: a sampled
failure of a pair outside it fails, and a pair in it that no longer fails on its rule's fixtures fails too, so the
table can only shrink.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import libcst as cst
import pytest

from metamorphic.harness import all_cases, run
from metamorphic.rewrites import MARK_COMMENT, Rewrite, all_rewrites

# (rewrite, rule): why the rule's findings do not survive the rewrite yet. Misses and findings no marker explains
# alike; benchmarks/metamorphic.py --details lists each one.
GAPS = {
    ("data-parallel", "TL502"): "`nn.DataParallel(model)` saved whole pickles the wrapper's class too: a load under `safe_globals([Net, nn.Linear])` is refused (`Unsupported global: GLOBAL torch.nn.parallel.data_parallel.DataParallel`, checked on torch 2.13), so TL502's finding on the rewritten allow-listed traps is true (the rewrite changes the program)",
    ("data-parallel", "TL707"): "`nn.DataParallel(model)` of a module made on a device: the wrapper may move it (to its first device), so TL707's finding stays",
    ("model-file", "TL201"): "`device/TL206_method_called_per_batch.py`: the `.cuda()` value `init_cell` returns meets the `.to(device)` model in the trainer, which the value model sees by following `self.model.init_cell(...)` to the method of a class of the file; moved to model.py, the `.cuda()` is linted in a file that does not see its importers' calls of the method, and the trainer's file reports only its own `.cuda()` calls",
    ("notebook", "TL203"): "`loss/TL401_library_function_trap.py`, `projects/library_module_imported_by_no_file/steps.py`: a library module's public function becomes a notebook's own, which no file can import: its one caller, the notebook's `fit()`, passes `nn.CrossEntropyLoss()`, so the float labels TL203 reports are all it gets (the rewrite changes the program)",
    ("model-file", "TL106"): "`autograd/TL106_model_from_comprehension_or_copy.py`: a model reaching `evaluate(env, net)` through a comprehension's loop variable or `copy.deepcopy`, once its class moves to model.py, is not followed to the imported class by the question whether the parameter holds a model (a reach gap, not a change of meaning)",
    ("notebook", "TL611"): "`api/TL611_criterion_passed_as_parameter_trap.py`: a module nothing runs or imports, whose public `train()` may be given any criterion from outside the project, becomes a notebook's own cells, which nothing outside can call: its one caller, `main()`, passes `nn.NLLLoss(...)`, so the `loss.data[0]` TL611 reports is what it gets (the rewrite changes the program)",
    ("notebook", "TL106"): "a `test_*` function of a file that imports pytest becomes a notebook cell, which pytest never collects: TL106 rightly reports it",
    ("star-import", "TL502"): "`projects/sys_path_imports/scripts/evaluate.py`: the imports moved into common.py run before the `sys.path` edits the script makes after them, so the rewritten program cannot import the model's module (the rewrite changes the program)",
}

REWRITES = {rewrite.name: rewrite for rewrite in all_rewrites()}
CASES = all_cases()


def _rank(case) -> int:
    """A fixed pseudo-random order of the fixture files (a hash of the path): the same sample on every machine."""
    return int(hashlib.sha1(case.name.encode()).hexdigest(), 16)


# For every default rule the first of its positive fixture files in that order, and one trap file in TRAPS_EVERY.
TRAPS_EVERY = 10
_FIRST_OF_EACH_RULE = {
    min((case for case in CASES if code in case.codes), key=_rank).name for code in {c for case in CASES for c in case.codes}
}
SAMPLE = [case for case in CASES if case.name in _FIRST_OF_EACH_RULE or (case.is_trap and _rank(case) % TRAPS_EVERY == 0)]


@lru_cache(maxsize=None)
def outcome(case_name: str, rewrite_name: str):
    case = next(case for case in CASES if case.name == case_name)
    return run(case, REWRITES[rewrite_name])


def failures(result, tolerated=()):
    """What a rewrite broke: expected findings missed and findings no marker explains, outside `tolerated`."""
    found = [f"missed {code} on line {result.case.marked.rows[marker]}" for marker, code in result.missed()
             if (result.rewrite, code) not in tolerated]
    found += [f"{code} not expected at {path}:{row}" + (f" (cell {cell})" if cell else "")
              for path, cell, row, code in result.unexplained if (result.rewrite, code) not in tolerated]
    return found


def test_the_sample_holds_positives_and_traps_of_every_family():
    families = {case.name.split("/")[0] for case in SAMPLE}
    assert {"autograd", "data", "device", "loss", "model", "api"} <= families
    assert any(case.is_trap for case in SAMPLE) and any(not case.is_trap for case in SAMPLE)


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_the_rewrite_keeps_every_finding_on_its_statement(rewrite):
    broken = {}
    applied = 0
    for case in SAMPLE:
        result = outcome(case.name, rewrite)
        if result is None:
            continue
        applied += 1
        tolerated = () if rewrite == "identity" else GAPS
        if failures(result, tolerated):
            broken[case.name] = failures(result, tolerated)
    assert applied, f"{rewrite} applies to no sampled fixture: the sample tests nothing of it"
    assert broken == {}


@pytest.mark.parametrize("pair", sorted(GAPS), ids=lambda pair: f"{pair[0]}-{pair[1]}")
def test_a_known_gap_still_fails(pair):
    """A gap is shown on its rule's own fixtures (those that expect it or are named for it), else on the projects."""
    rewrite, code = pair
    own = [case for case in CASES if code in case.codes or case.name.rpartition("/")[2].startswith(code)]
    projects = [case for case in CASES if case.name.startswith("projects/") and case not in own]
    for case in own + projects:
        result = outcome(case.name, rewrite)
        if result is not None and (result.missed(code) or any(found[3] == code for found in result.unexplained)):
            return
    pytest.fail(f"{rewrite} now keeps {code}'s findings on its fixtures: remove {pair} from GAPS")


def test_the_gaps_are_pairs_of_rewrites_and_default_rules():
    from metamorphic.harness import default_codes

    assert {rewrite for rewrite, _ in GAPS} <= set(REWRITES) - {"identity"}
    assert {code for _, code in GAPS} <= default_codes()


class DropsMarkedCalls(Rewrite):
    """Not meaning-preserving on purpose: each marked statement loses its code (`pass` keeps the marker)."""

    name = "drops-marked-calls"

    def rewrite(self, module, source):
        class Drop(cst.CSTTransformer):
            def leave_SimpleStatementLine(self, original, updated):
                if MARK_COMMENT.search(updated.trailing_whitespace.comment.value if updated.trailing_whitespace.comment else ""):
                    return updated.with_changes(body=[cst.Pass()])
                return updated

        return module.visit(Drop())


def test_a_rewrite_that_breaks_the_program_is_caught():
    case = next(case for case in CASES if case.name == "autograd/TL102_no_zero_grad.py")
    assert failures(run(case, REWRITES["identity"])) == []
    assert failures(run(case, DropsMarkedCalls())) != []


def test_every_marker_survives_and_every_output_compiles():
    """`run` raises where a rewrite loses a marker or writes a program Python cannot compile."""
    for case in SAMPLE:
        for rewrite in REWRITES:
            outcome(case.name, rewrite)
