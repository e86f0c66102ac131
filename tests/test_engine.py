"""The engine's shared pieces: name resolution, suppression, crash isolation, one walk."""

import textwrap

import libcst as cst
import pytest

from conftest import lint, make_config
from torchlint.engine import runner
from torchlint.engine.context import FileContext
from torchlint.engine.scopes import scope_nodes_of
from torchlint.rules.base import Rule


def context_at(code: str, marker: str):
    """A FileContext whose stack ends at the first Name node spelled `marker`."""
    module = cst.parse_module(textwrap.dedent(code))
    ctx = FileContext("t.py", module.code, module, make_config())

    class Finder(cst.CSTVisitor):
        found = None

        def on_visit(self, node):
            if self.found is not None:
                return False
            ctx.stack.append(node)
            if isinstance(node, cst.Attribute) and module.code_for_node(node) == marker:
                self.found = list(ctx.stack)
                return False
            return True

        def on_leave(self, node):
            if self.found is None:
                ctx.stack.pop()

    finder = Finder()
    module.visit(finder)
    ctx.stack = finder.found
    ctx.scope_nodes = scope_nodes_of(ctx.stack)
    return ctx, finder.found[-1]


MARIMO = "import marimo\napp = marimo.App(width='full')\n"
# A marimo cell: its parameters, its body, what it returns.
CELL = "\n@app.cell\ndef _({}):\n    {}\n    return ({})\n"


@pytest.mark.parametrize(
    "code, marker, expected",
    [
        ("import torch\ntorch.no_grad", "torch.no_grad", "torch.no_grad"),
        ("import torch as T\nT.no_grad", "T.no_grad", "torch.no_grad"),
        ("import torch.nn.functional as F\nF.cross_entropy", "F.cross_entropy", "torch.nn.functional.cross_entropy"),
        ("from torch import nn\nnn.CrossEntropyLoss", "nn.CrossEntropyLoss", "torch.nn.CrossEntropyLoss"),
        ("import torch.nn\ntorch.nn.Linear", "torch.nn.Linear", "torch.nn.Linear"),
        ("from torch.cuda import amp\namp.autocast", "amp.autocast", "torch.cuda.amp.autocast"),
        # A local variable that happens to be called torch is not torch.
        ("import torch\ndef f(torch):\n    torch.no_grad", "torch.no_grad", None),
        ("import torch\ndef f():\n    torch.no_grad\n    torch = 3", "torch.no_grad", None),
        ("torch = object()\ntorch.no_grad", "torch.no_grad", None),
        # A method does not see its class body's names.
        ("import torch\nclass A:\n    torch = 1\n    def f(self):\n        torch.no_grad", "torch.no_grad", "torch.no_grad"),
        # Imports inside functions count where they are.
        ("def f():\n    import torch as tt\n    tt.no_grad", "tt.no_grad", "torch.no_grad"),
        ("from . import torch\ntorch.no_grad", "torch.no_grad", ".torch.no_grad"),
        # The try body's import is what runs on a current torch; the handler's is a fallback.
        (
            "try:\n    from torch.optim.lr_scheduler import LRScheduler as S\nexcept ImportError:\n"
            "    from torch.optim.lr_scheduler import _LRScheduler as S\nS.step",
            "S.step",
            "torch.optim.lr_scheduler.LRScheduler.step",
        ),
        ("try:\n    import missing\nexcept ImportError:\n    import torch as missing\nmissing.no_grad", "missing.no_grad", "missing.no_grad"),
        # A marimo cell's parameter is what the one cell that returns the name binds it to.
        (MARIMO + CELL.format("", "import torch.nn as nn", "nn") + CELL.format("nn", "nn.Linear", ""), "nn.Linear", "torch.nn.Linear"),
        (MARIMO.replace("marimo.App", "mo.App").replace("import marimo", "import marimo as mo") + CELL.format("", "import torch", "torch")
         + CELL.format("torch", "torch.norm", ""), "torch.norm", "torch.norm"),
        # ... not when that cell binds it to something else, or its own body rebinds it, or two cells return it,
        (MARIMO + CELL.format("", "import torch\n    torch = None", "torch") + CELL.format("torch", "torch.norm", ""), "torch.norm", None),
        (MARIMO + CELL.format("", "import torch", "torch") + CELL.format("torch", "torch = make()\n    torch.norm", ""), "torch.norm", None),
        (MARIMO + CELL.format("", "torch = make()", "torch") + CELL.format("", "import torch", "torch") + CELL.format("torch", "torch.norm", ""),
         "torch.norm", None),
        # ... or the function is no cell of an app (a plain function, `@app.function`, a file without `marimo.App`).
        ("import torch\n\n" + CELL.format("", "import torch", "torch").replace("@app.cell\n", "") + CELL.format("torch", "torch.norm", "").replace("@app.cell\n", ""),
         "torch.norm", None),
        (MARIMO + CELL.format("", "import torch", "torch") + CELL.format("torch", "torch.norm", "").replace("app.cell", "app.function"), "torch.norm", None),
        ("import marimo\napp = other.App()\n" + CELL.format("", "import torch", "torch") + CELL.format("torch", "torch.norm", ""), "torch.norm", None),
        (MARIMO + (CELL.format("", "import torch", "torch") + CELL.format("torch", "torch.norm", "")).replace("app.cell", "other.cell"), "torch.norm", None),
        # Names a `with app.setup:` block binds are the module's.
        (MARIMO + "with app.setup:\n    import torch\n" + CELL.format("", "torch.norm", ""), "torch.norm", "torch.norm"),
    ],
)
def test_qualified_names_follow_imports_and_scopes(code, marker, expected):
    ctx, node = context_at(code, marker)
    assert ctx.qualified_name(node) == expected


def test_assigned_values_see_instance_attributes():
    code = """
    import torch.nn as nn
    class Trainer:
        def __init__(self):
            self.criterion = nn.CrossEntropyLoss()
        def step(self):
            self.criterion.forward
    """
    ctx, node = context_at(code, "self.criterion.forward")
    values = ctx.assigned_values(node.value)
    assert [ctx.code(value) for value in values] == ["nn.CrossEntropyLoss()"]



LOSSES = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.functional.cross_entropy"})


@pytest.mark.parametrize("code, marker, may", [
    ("from torch.nn import CrossEntropyLoss as CE\ncriterion = CE()\ncriterion.forward", "criterion.forward", True),
    ("import torch.nn.functional as F\nF.cross_entropy.x", "F.cross_entropy", True),
    ("import torch.nn as nn\ncriterion = nn.MSELoss()\ncriterion.forward", "criterion.forward", False),
])
def test_a_file_that_never_writes_a_last_part_cannot_name_it(code, marker, may):
    ctx, _ = context_at(code, marker)
    assert ctx.may_name(LOSSES) is may


def test_without_the_prefilter_every_file_may_name_anything_and_call_any_function():
    module = cst.parse_module("import torch.nn as nn\ncriterion = nn.MSELoss()\ncriterion.forward\n")
    ctx = FileContext("t.py", module.code, module, make_config(), use_prefilter=False)
    assert ctx.may_name(LOSSES)
    assert ctx.callgraph.defined is None


def test_built_from_in_follows_the_assignment_when_the_file_may_name_the_class():
    from torchlint import semantics

    code = "from torch.nn import CrossEntropyLoss as CE\ncriterion = CE()\ncriterion.forward"
    ctx, node = context_at(code, "criterion.forward")
    assert semantics.built_from_in(node.value, LOSSES, ctx)
    assert not semantics.built_from_in(node.value, frozenset({"torch.nn.NLLLoss"}), ctx)


NOQA_SOURCE = """
from torch.utils.data import DataLoader
a = DataLoader(ds, persistent_workers=True)  # noqa
b = DataLoader(ds, persistent_workers=True)  # noqa: TL303
c = DataLoader(ds, persistent_workers=True)  # noqa: TL101
d = DataLoader(ds, persistent_workers=True)  # NOQA:TL101,TL303
e = DataLoader(ds, persistent_workers=True)
"""


def test_line_noqa_silences_only_the_named_codes():
    rows = [finding.location.row for finding in lint(NOQA_SOURCE, select=["TL303"])]
    assert rows == [5, 7]


@pytest.mark.parametrize("comment, remaining", [("# torchlint: noqa", []), ("# torchlint: noqa: TL303", []), ("# torchlint: noqa: TL101", [3, 4, 5, 7])])
def test_file_noqa(comment, remaining):
    rows = [finding.location.row for finding in lint(comment + NOQA_SOURCE.replace("  # noqa", "  # x"), select=["TL303"])]
    assert rows == remaining


def test_a_crashing_rule_becomes_a_finding_and_other_rules_still_run(monkeypatch):
    from torchlint.rules import rules_by_code

    class Crashing(Rule):
        code = "TL998"
        name = "crashing"
        message = "never"

        def visit_Call(self, node):
            raise ValueError("boom")

    table = dict(rules_by_code(), TL998=Crashing)
    monkeypatch.setattr(runner, "rules_by_code", lambda: table)
    findings = runner.lint_text(
        "from torch.utils.data import DataLoader\nDataLoader(ds, persistent_workers=True)\n",
        "t.py",
        make_config(),
        codes=frozenset({"TL303", "TL998"}),
    )
    assert [(f.code, f.location.row, f.location.column) for f in findings] == [("TL998", 2, 1), ("TL303", 2, 16)]
    assert findings[0].message.startswith("internal error in TL998 (crashing): ValueError: boom")


def test_references_are_imported_names_used_as_values_resolved_once_for_every_rule(monkeypatch):
    from torchlint.rules import rules_by_code

    seen = []

    class Listening(Rule):
        code = "TL997"
        name = "listening"
        message = "never"

        def visit_reference(self, node, qualified):
            seen.append((self.ctx.code(node), qualified))
            if qualified == "torch.zeros":
                raise ValueError("boom")

    monkeypatch.setattr(runner, "rules_by_code", lambda: dict(rules_by_code(), TL997=Listening))
    text = (
        "import torch\nfrom torch import nn as tnn\n"
        "def f(x, torch2=None):\n    y = tnn.Linear(2, 2)(x)\n    return torch.zeros(2).to(y)\n"
        "z = torch.ones(1)\n"
    )
    findings = runner.lint_text(text, "t.py", make_config(), codes=frozenset({"TL997"}))
    # Not the import lines, not `x`/`y` (local), not the parts of `torch.zeros`; the rule stops at its crash.
    assert seen == [("tnn.Linear", "torch.nn.Linear"), ("torch.zeros", "torch.zeros")]
    assert [(f.code, f.location.row, f.location.column) for f in findings] == [("TL997", 5, 12)]
    assert findings[0].message.startswith("internal error in TL997 (listening): ValueError: boom")


def test_each_rule_method_is_called_from_one_walk(monkeypatch):
    walks = []
    original = runner._Walker.walk

    def counting_walk(walker, root):
        walks.append(type(root).__name__)
        return original(walker, root)

    monkeypatch.setattr(runner._Walker, "walk", counting_walk)
    monkeypatch.setattr(cst.Module, "visit", lambda *args: walks.append("libcst visit"))
    # A file without findings: positions (their own metadata pass) are computed only for reports.
    assert lint("import torch\nfor batch in loader:\n    x = torch.zeros(3)\n    loss = criterion(x)\n") == []
    assert walks == ["Module"]


def test_a_node_a_rule_builds_is_never_answered_for_another():
    # Names are resolved once per node; a node a rule builds and drops can leave its id to the next one.
    from torchlint.engine.context import FileContext

    text = "import torch\nimport numpy as np\n"
    module = cst.parse_module(text)
    ctx = FileContext("t.py", text, module, make_config())
    ctx.scope_nodes.append(module)
    for _ in range(100):
        assert ctx.qualified_name(cst.Attribute(cst.Name("torch"), cst.Name("zeros"))) == "torch.zeros"
        assert ctx.qualified_name(cst.Attribute(cst.Name("np"), cst.Name("ones"))) == "numpy.ones"


@pytest.mark.parametrize("call, defined, expected", [
    ("helper()", {"helper"}, "helper"),
    ("helper()", None, "helper"),
    ("other()", {"helper"}, None),
    ("print()", {"print"}, None),  # a builtin is never the module's own function
    ("self.step()", {"step"}, "Trainer.step"),
    ("self.step()", {"helper"}, None),
])
def test_only_a_function_the_file_defines_is_a_callee(call, defined, expected):
    from torchlint.engine.callgraph import CallGraph

    module = cst.parse_module(f"class Trainer:\n    def run(self):\n        {call}\n")
    method = module.body[0].body.body[0]
    node = method.body.body[0].body[0].value
    assert CallGraph(defined).callee_key(node, [module, module.body[0], method, node]) == expected


def test_the_call_graph_knows_the_names_written_after_def():
    ctx, _ = context_at("import torch\ndef helper():\n    pass\n\nasync def evaluate():\n    torch.no_grad\n", "torch.no_grad")
    assert ctx.callgraph.defined == {"helper", "evaluate"}
