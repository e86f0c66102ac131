"""The TL6xx fixes, applied as a user's `--fix --unsafe-fixes` would: every edit of the rule's findings,
back to front. The result must parse, equal the expected text, and, where the rewrite claims to keep
behaviour, compute the same on CPU as the original.
"""

import textwrap

import libcst as cst
import pytest
from conftest import lint

TORCH = "2.6"  # the default minimum torch: every replacement in the table exists


def apply_fixes(code: str, rule: str) -> str:
    findings = [finding for finding in lint(code, select=[rule], torch_version=TORCH) if finding.fix is not None]
    lines = code.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(location) -> int:
        return starts[location.row - 1] + location.column - 1

    edits = {edit for finding in findings for edit in finding.fix.edits}
    edits = sorted(edits, key=lambda edit: (offset(edit.location), offset(edit.end_location)))
    for before, after in zip(edits, edits[1:]):
        assert offset(before.end_location) <= offset(after.location), f"overlapping edits: {before} {after}"
    for edit in reversed(edits):
        code = code[: offset(edit.location)] + edit.content + code[offset(edit.end_location):]
    return code


SETUP = """
import torch
torch.manual_seed(0)
x = torch.rand(5) * 1e-3
a, b = torch.randn(3), torch.randn(4)
weights = torch.empty(3, 4)
"""

# (rule, original, expected after the fixes, how to compare `result` on CPU: "equal", "close" or None)
CASES = {
    "autocast-keeps-torch-alias": ("TL602", """
        import torch as T
        with T.cuda.amp.autocast(dtype=T.bfloat16) as ctx:
            result = (ctx.device, ctx.fast_dtype, ctx._enabled)
    """, """
        import torch as T
        with T.amp.autocast("cuda", dtype=T.bfloat16) as ctx:
            result = (ctx.device, ctx.fast_dtype, ctx._enabled)
    """, "equal"),
    "autocast-through-module-alias": ("TL602", """
        import torch
        import torch.cuda.amp as amp
        with amp.autocast() as ctx:
            result = (ctx.device, ctx.fast_dtype, ctx._enabled)
    """, """
        import torch
        import torch.cuda.amp as amp
        with torch.amp.autocast("cuda") as ctx:
            result = (ctx.device, ctx.fast_dtype, ctx._enabled)
    """, "equal"),
    "autocast-imported-alone-adds-import-torch": ("TL602", """
        \"\"\"Docstring.\"\"\"
        from __future__ import annotations
        from torch.cuda.amp import autocast
        with autocast(enabled=False) as ctx:
            result = (ctx.device, ctx._enabled)
    """, """
        \"\"\"Docstring.\"\"\"
        from __future__ import annotations
        import torch
        from torch.cuda.amp import autocast
        with torch.amp.autocast("cuda", enabled=False) as ctx:
            result = (ctx.device, ctx._enabled)
    """, None),  # `from __future__` must stay first, so this one is not exec'd after SETUP
    "autocast-positional-is-not-rewritten": ("TL602", """
        import torch
        with torch.cuda.amp.autocast(False):
            pass
    """, None, None),
    "grad-scaler": ("TL602", """
        import torch
        scaler = torch.cuda.amp.GradScaler(init_scale=4.0, enabled=False)
        result = (scaler._device, scaler.is_enabled(), scaler.state_dict())
    """, """
        import torch
        scaler = torch.amp.GradScaler("cuda", init_scale=4.0, enabled=False)
        result = (scaler._device, scaler.is_enabled(), scaler.state_dict())
    """, "equal"),
    "functorch-from-import": ("TL602", """
        import torch
        from functorch import vmap
        result = vmap(torch.sin)(a)
    """, """
        import torch
        from functorch import vmap
        result = torch.func.vmap(torch.sin)(a)
    """, "equal"),
    "upsample-keeps-F": ("TL602", """
        import torch.nn.functional as F
        result = F.upsample(a.view(1, 1, 3), scale_factor=2)
    """, """
        import torch.nn.functional as F
        result = F.interpolate(a.view(1, 1, 3), scale_factor=2)
    """, "equal"),
    "init-through-submodule-import": ("TL602", """
        import torch
        from torch.nn import init
        torch.manual_seed(1)
        result = init.kaiming_normal(weights)
    """, """
        import torch
        from torch.nn import init
        torch.manual_seed(1)
        result = init.kaiming_normal_(weights)
    """, "equal"),
    "variable-unwrapped-with-parentheses": ("TL602", """
        from torch.autograd import Variable
        result = Variable(a + a).sum()
    """, """
        from torch.autograd import Variable
        result = (a + a).sum()
    """, "equal"),
    "removed-has-no-fix": ("TL601", """
        import torch
        x = torch.solve(b, A)
    """, None, None),
    "require-grad": ("TL603", """
        import torch
        w = torch.zeros(2)
        w.require_grad = True
        result = w.requires_grad
    """, """
        import torch
        w = torch.zeros(2)
        w.requires_grad = True
        result = w.requires_grad
    """, None),  # the fix changes behaviour on purpose: requires_grad becomes True
    "checkpoint": ("TL604", """
        from torch.utils.checkpoint import checkpoint
        out = checkpoint(torch.sin, a)
        out = checkpoint(
            torch.sin,
            a,
        )
    """, """
        from torch.utils.checkpoint import checkpoint
        out = checkpoint(torch.sin, a, use_reentrant=False)
        out = checkpoint(
            torch.sin,
            a,
         use_reentrant=False)
    """, None),
    "private-collate": ("TL605", """
        import torch
        result = torch.utils.data._utils.collate.default_collate([a, a])
    """, """
        import torch
        result = torch.utils.data.default_collate([a, a])
    """, "equal"),
    "log1p-keeps-alias": ("TL606", """
        import torch as T
        result = T.log(1 + x), T.log((x + 1.0))
    """, """
        import torch as T
        result = T.log1p(x), T.log1p((x))
    """, "close"),
    "log1p-from-import-adds-import-torch": ("TL606", """
        from torch import log
        result = log(x + 1)
    """, """
        import torch
        from torch import log
        result = torch.log1p(x)
    """, "close"),
    "expm1-in-expression": ("TL607", """
        import torch
        result = (torch.exp(x * 2) - 1) * 3
    """, """
        import torch
        result = (torch.expm1(x * 2)) * 3
    """, "close"),
    "pretrained": ("TL608", """
        from torchvision import models
        m = models.resnet18(pretrained=True)
        n = models.detection.fasterrcnn_resnet50_fpn(pretrained=False, pretrained_backbone=True)
        o = models.resnet18(pretrained=True, weights=None)
        p = models.resnet18(pretrained=flag)
    """, """
        from torchvision import models
        m = models.resnet18(weights="IMAGENET1K_V1")
        n = models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone="IMAGENET1K_V1")
        o = models.resnet18(pretrained=True, weights=None)
        p = models.resnet18(pretrained=flag)
    """, None),
    "to-tensor-v2": ("TL609", """
        import torchvision.transforms.v2 as T2
        t = T2.Compose([T2.ToTensor()])
    """, """
        import torch
        import torchvision.transforms.v2 as T2
        t = T2.Compose([T2.Compose([T2.ToImage(), T2.ToDtype(torch.float32, scale=True)])])
    """, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fix_gives_the_expected_code(case):
    rule, original, expected, _ = CASES[case]
    original = textwrap.dedent(original).lstrip("\n")
    expected = original if expected is None else textwrap.dedent(expected).lstrip("\n")
    fixed = apply_fixes(original, rule)
    cst.parse_module(fixed)
    assert fixed == expected
    assert [finding for finding in lint(fixed, select=[rule], torch_version=TORCH) if finding.fix is not None] == []


def same(left, right, close: bool) -> bool:
    torch = pytest.importorskip("torch")
    if isinstance(left, torch.Tensor):
        if close:
            # log1p/expm1 are the same function without the float32 cancellation of the original form.
            return torch.allclose(left, right, rtol=1e-3, atol=1e-7)
        return left.dtype == right.dtype and torch.equal(left, right)
    if isinstance(left, (tuple, list)):
        return len(left) == len(right) and all(same(one, other, close) for one, other in zip(left, right))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[key], right[key], close) for key in left)
    return left == right


@pytest.mark.parametrize("case", sorted(name for name, (_, _, _, compare) in CASES.items() if compare))
def test_fixed_code_computes_what_the_original_did(case):
    pytest.importorskip("torch")
    rule, original, _, compare = CASES[case]
    original = textwrap.dedent(original).lstrip("\n")
    results = []
    for code in (original, apply_fixes(original, rule)):
        namespace = {}
        exec(compile(SETUP + code, case, "exec"), namespace)
        results.append(namespace["result"])
    assert same(*results, close=compare == "close")


def test_fix_is_not_offered_when_it_would_duplicate_a_keyword():
    findings = lint("import torch\nwith torch.cuda.amp.autocast(**options):\n    pass\n", select=["TL602"])
    assert [finding.fix for finding in findings] == [None]
    assert lint("from torch.utils.checkpoint import checkpoint\ncheckpoint(f, x, **kw)\n", select=["TL604"]) == []


def test_a_checkpoint_passing_keywords_on_is_reported_with_the_error_torch_raises_and_no_fix():
    """Keywords for the checkpointed function make the default variant refuse the call: the message quotes torch's
    error (run here), and no `use_reentrant=False` is offered, as it hands them to a function that may not take them."""
    code = "from torch.utils.checkpoint import checkpoint\nout = checkpoint(block, hidden, mask=mask, scale=2)\n"
    [finding] = lint(code, select=["TL604"])
    assert finding.fix is None
    import torch.utils.checkpoint

    block = torch.nn.Linear(2, 2)
    with pytest.warns(UserWarning, match="use_reentrant"), pytest.raises(ValueError) as raised:
        torch.utils.checkpoint.checkpoint(block, torch.randn(1, 2), mask=None, scale=2)
    assert f"`{type(raised.value).__name__}: {raised.value}`" in finding.message


def test_fix_is_not_offered_when_torch_is_shadowed():
    code = "from torch import log\n\ndef f(torch, x):\n    return log(1 + x)\n"
    findings = lint(code, select=["TL606"])
    assert [(finding.code, finding.fix) for finding in findings] == [("TL606", None)]


# ---------------------------------------------------------------- the losses the old-code rules know


def test_the_loss_lists_match_the_installed_torch():
    """TL611 and TL613 name torch's losses by hand: they must be the ones whose signatures take the keywords."""
    import inspect

    torch = pytest.importorskip("torch")
    from torchlint.rules.api._losses import LEGACY_REDUCTION_FUNCTIONS, LEGACY_REDUCTION_MODULES, REDUCING_FUNCTIONS

    functional = torch.nn.functional
    parameters = {}
    for name in dir(functional):
        function = getattr(functional, name)
        if name.startswith("_") or isinstance(function, type) or not callable(function):
            continue
        try:
            parameters[name] = inspect.signature(function).parameters
        except ValueError:  # builtins without a signature take neither keyword
            continue
    assert {f"torch.nn.functional.{name}" for name, taken in parameters.items() if "size_average" in taken} == LEGACY_REDUCTION_FUNCTIONS
    assert {f"torch.nn.functional.{name}" for name, taken in parameters.items() if "reduction" in taken} - {
        "torch.nn.functional.linear_cross_entropy"  # newer than the old code this rule reads; not a plain loss call
    } == REDUCING_FUNCTIONS
    modules = {
        name for name in dir(torch.nn)
        if isinstance(getattr(torch.nn, name), type) and "size_average" in inspect.signature(getattr(torch.nn, name).__init__).parameters
    }
    assert {f"torch.nn.{name}" for name in modules} == {name for name in LEGACY_REDUCTION_MODULES if name.startswith("torch.nn.") and name.count(".") == 2}


def test_the_reduce_positions_are_torchs():
    """TL611 takes the positional arguments before a legacy loss module's `reduce` (`nn.NLLLoss2d(weight, size_average,
    ignore_index)`) as not asking for no reduction: the positions must be those of the installed torch."""
    import inspect

    torch = pytest.importorskip("torch")
    from torchlint.rules.api._losses import LEGACY_REDUCTION_MODULES, REDUCE_POSITION

    found = {}
    for qualified in LEGACY_REDUCTION_MODULES:
        name = qualified.rpartition(".")[2]
        found[name] = list(inspect.signature(getattr(torch.nn, name).__init__).parameters)[1:].index("reduce")
    assert found == REDUCE_POSITION


def test_the_size_average_positions_are_torchs():
    """TL613 offers its fix only to a call whose positional arguments stop before `size_average` (`nn.NLLLoss(weight,
    False, reduce=False)` gives it by position): the positions must be those of the installed torch."""
    import inspect

    torch = pytest.importorskip("torch")
    from torchlint.rules.api._losses import LEGACY_REDUCTION_FUNCTIONS, LEGACY_REDUCTION_MODULES, SIZE_AVERAGE_POSITION

    found = {}
    for qualified in LEGACY_REDUCTION_MODULES:
        name = qualified.rpartition(".")[2]
        found[name] = list(inspect.signature(getattr(torch.nn, name).__init__).parameters)[1:].index("size_average")
    for qualified in LEGACY_REDUCTION_FUNCTIONS:
        name = qualified.rpartition(".")[2]
        found[name] = list(inspect.signature(getattr(torch.nn.functional, name)).parameters).index("size_average")
    assert found == SIZE_AVERAGE_POSITION


@pytest.mark.parametrize("size_average, reduce", [(a, b) for a in (None, True, False) for b in (None, True, False)])
def test_legacy_reduction_is_torchs(size_average, reduce):
    pytest.importorskip("torch")
    from torch.nn import _reduction

    from torchlint.rules.api._losses import legacy_reduction

    assert legacy_reduction(size_average, reduce) == _reduction.legacy_get_string(size_average, reduce, emit_warning=False)


def test_tl603_says_when_the_typo_changes_nothing():
    code = (
        "import torch\n\ntable = torch.zeros(4, 8).float()\ntable.require_grad = False\n"
        "trained = torch.zeros(4, requires_grad=True)\ntrained.require_grad = False\n"
        "for param in model.parameters():\n    param.require_grad = False\n"
    )
    messages = [finding.message for finding in lint(code, select=["TL603"])]
    assert ["nothing changes here" in message for message in messages] == [True, False, False]
    assert all(message.startswith("`.require_grad` is a typo") for message in messages)
