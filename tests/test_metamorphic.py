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
    ("alias", "TL110"): "`from torch.nn.utils import clip_grad_value_ as <alias>`: the aliased clip is not a clip",
    ("alias", "TL111"): "`from torch.nn.utils import clip_grad_norm_ as <alias>`: the aliased clip is not a clip",
    ("alias", "TL208"): "`from tqdm import tqdm as <alias>`: batches of an aliased tqdm(loader) are not loader batches",
    ("compile", "TL106"): "a model rebound to `torch.compile(model)` is no longer known as a model for TL106",
    ("data-parallel", "TL106"): "a model rebound to `nn.DataParallel(model)` is no longer known as a model for TL106",
    ("data-parallel", "TL702"): "findings on a DataParallel-wrapped model",
    ("enumerate", "TL107"): "`for i, (x, y) in enumerate(enumerate(...))`-style indexes: the last-batch check is not seen",
    ("enumerate", "TL704"): "a loop wrapped in enumerate() hides the initialisation loop over modules",
    ("enumerate", "TL706"): "elements of enumerate(model.children()) are not known as modules",
    ("function", "TL106"): "a model passed as a parameter from main(): its evaluation loop is not followed",
    ("function", "TL201"): "a model passed as a parameter: `model.cuda()` in place is not followed",
    ("function", "TL204"): "float64 tensors passed as arguments: their flow into float32 code is not followed",
    ("functional", "TL113"): "a criterion bound to F.cross_entropy as a value",
    ("functional", "TL203"): "`criterion = F.cross_entropy` (a value) is not known as the class-index loss",
    ("functional", "TL205"): "a loss bound to a functional value",
    ("functional", "TL401"): "`criterion = F.cross_entropy` as a value: calling it is not known as cross-entropy",
    ("functional", "TL402"): "`criterion = F.binary_cross_entropy_with_logits` as a value is not followed",
    ("functional", "TL403"): "`criterion = F.nll_loss` as a value is not followed",
    ("functional", "TL404"): "a functional loss bound as a value is not paired with its input",
    ("functional", "TL611"): "the loss from a functional value is not known zero-dimensional",
    ("model-file", "TL106"): "a model class imported from another file: its evaluation loop is not followed",
    ("model-file", "TL701"): "a construction table in a class moved to another file",
    ("model-file", "TL707"): "a class moved to another file",
    ("rename", "TL202"): "a device variable renamed (`train_device` -> `v23`): TL202 reads the name, not the value",
    ("star-import", "TL102"): "names from `from common import *` of a project module",
    ("star-import", "TL103"): "names from `from common import *` of a project module",
    ("star-import", "TL112"): "names from `from common import *` of a project module",
    ("star-import", "TL204"): "`np`/`torch` from `from common import *`: numpy producers are not followed",
    ("star-import", "TL205"): "names from `from common import *` of a project module",
    ("star-import", "TL302"): "`DataLoader` from `from common import *` is not known as a DataLoader",
    ("star-import", "TL303"): "`DataLoader` from `from common import *` is not known as a DataLoader",
    ("star-import", "TL308"): "`DataLoader` from `from common import *` is not known as a DataLoader",
    ("star-import", "TL401"): "names from `from common import *` of a project module",
    ("star-import", "TL501"): "names from `from common import *` of a project module",
    ("star-import", "TL601"): "names from `from common import *` of a project module",
    ("star-import", "TL602"): "`autocast`/`GradScaler`/`Variable` from `from common import *` are not resolved",
    ("star-import", "TL605"): "names from `from common import *` of a project module",
    ("star-import", "TL608"): "torchvision model builders from `from common import *` are not resolved",
    ("star-import", "TL609"): "names from `from common import *` of a project module",
    ("star-import", "TL701"): "names from `from common import *` of a project module",
    ("star-import", "TL702"): "names from `from common import *` of a project module",
    ("star-import", "TL703"): "names from `from common import *` of a project module",
    ("star-import", "TL705"): "names from `from common import *` of a project module",
    ("star-import", "TL706"): "names from `from common import *` of a project module",
    ("star-import", "TL707"): "names from `from common import *` of a project module",
    ("tqdm", "TL302"): "`for batch in tqdm(loader)` at module level (or in a function it calls) is not a loader loop",
    ("tqdm", "TL704"): "a loop wrapped in tqdm() hides the initialisation loop over modules",
    ("tqdm", "TL706"): "elements of tqdm(model.children()) are not known as modules",
    ("trainer", "TL106"): "`self.model` set from a constructor argument: its evaluation loop is not followed",
    ("trainer", "TL201"): "`self.model.cuda()` of a model given to the constructor is not followed",
    ("trainer", "TL204"): "float64 tensors stored on self: their flow into float32 code is not followed",
    ("while", "TL103"): "a `while` loop over next(iterator): losses kept across its iterations",
    ("while", "TL107"): "a `while` loop over next(iterator): the last-batch evaluation is not seen",
    ("while", "TL208"): "`x = next(iterator)` of a loader iterator is not known as a loader batch",
    ("while", "TL301"): "a `while` loop over next(iterator)",
    ("while", "TL307"): "a `while` epoch loop is not an epoch loop for set_epoch",
    ("while", "TL308"): "a `while` loop over a loader's iterator",
    ("while", "TL704"): "a `while` loop over next(iterator) hides the initialisation loop over modules",
    ("while", "TL706"): "elements of next(iter(model.children())) are not known as modules",
}

REWRITES = {rewrite.name: rewrite for rewrite in all_rewrites()}
CASES = all_cases()
# One fixture file in SAMPLE_EVERY, chosen by a hash of its path: the same sample on every run and machine.
SAMPLE_EVERY = 10
SAMPLE = [case for case in CASES if int(hashlib.sha1(case.name.encode()).hexdigest(), 16) % SAMPLE_EVERY == 0]


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
