"""The prefilter: a rule runs only on files holding one of its trigger words, and a file no rule runs on is not parsed."""

import textwrap

import pytest

from conftest import FIXTURES, lint, make_config
from torchlint.engine import prefilter, runner
from torchlint.engine.expectations import expected_findings
from torchlint.engine.file_text import FileText
from torchlint.engine.parallel import lint_files
from torchlint.rules import all_rules, rules_by_code
from torchlint.rules.base import Rule
from torchlint.rules.triggers import Trigger

DEFAULT = frozenset(rule.code for rule in all_rules() if rule.triggers is not None) | {"TL000"}
PLAIN = "import json\n\n\ndef read(path):\n    with open(path) as handle:\n        return json.loads(handle.read())\n"


def skipped(text: str, codes) -> bool:
    """Linting `text` with `codes` cannot report anything, so the file is not parsed."""
    return runner.rules_to_run(FileText(text), codes) is None


def test_a_file_without_any_trigger_is_skipped():
    assert skipped(PLAIN, DEFAULT)


@pytest.mark.parametrize("text", [
    "import torch as T\nx = T.autograd.Variable(y)\n",
    "x = batch.cuda()\n",
    "for x in data:\n    loss.backward()\n    opt.step()\n",
])
def test_a_file_with_a_trigger_is_parsed(text):
    assert not skipped(text, DEFAULT)


def test_a_rule_runs_only_where_its_trigger_matches():
    backward_under_no_grad = rules_by_code()["TL101"]
    assert prefilter.runnable("with torch.no_grad():\n    loss.backward()\n", [backward_under_no_grad]) == [backward_under_no_grad]
    assert prefilter.runnable("loss.backward()\n", [backward_under_no_grad]) == []


def test_a_file_python_cannot_compile_is_parsed_so_the_engine_reports_tl000():
    broken = "def f(:\n    pass\n"
    assert not skipped(broken, DEFAULT)
    assert [finding.code for finding in lint(broken)] == ["TL000"]


def test_without_tl000_a_broken_file_without_triggers_is_skipped():
    assert skipped("def f(:\n", DEFAULT - {"TL000"})


def test_a_rule_without_triggers_runs_on_every_file(monkeypatch):
    class Untriggered(Rule):
        code = "TL998"
        name = "untriggered"

    assert prefilter.runnable(PLAIN, [Untriggered]) == [Untriggered]
    monkeypatch.setattr(runner, "rules_by_code", lambda: {"TL998": Untriggered})
    assert not skipped(PLAIN, frozenset({"TL998"}))


def test_unknown_codes_never_run():
    assert skipped(PLAIN, frozenset({"TL999"}))


def test_without_the_prefilter_every_selected_rule_runs_on_every_file():
    codes = frozenset({"TL101", "TL000"})
    assert runner.rules_to_run(FileText(PLAIN), codes) is None
    assert runner.rules_to_run(FileText(PLAIN), codes, use_prefilter=False) == [rules_by_code()["TL101"]]


def test_the_prefilter_changes_no_finding_of_any_example():
    config = make_config(select=["ALL"])
    for rule in all_rules():
        text = textwrap.dedent(rule.example)
        without = runner.lint_text(text, "example.py", config, use_prefilter=False)
        assert runner.lint_text(text, "example.py", config) == without, rule.code


def test_without_the_prefilter_many_files_in_worker_processes_give_the_same_findings(tmp_path):
    files = []
    for rule in all_rules():
        path = tmp_path / f"{rule.code}.py"
        path.write_text(textwrap.dedent(rule.example), encoding="utf-8")
        files.append((str(path), path.name))
    config = make_config(select=["ALL"])
    with_prefilter = lint_files(files, config, jobs=2)
    without = lint_files(files, config, jobs=2, use_prefilter=False)
    assert [result.findings for result in without] == [result.findings for result in with_prefilter]


def test_compile_warnings_are_not_shown(recwarn):
    assert skipped('pattern = "\\d+"\n', DEFAULT)
    assert not recwarn.list


def rule_texts():
    """(code, text) for every rule's example and every fixture file that expects one of its findings."""
    for rule in all_rules():
        if rule.example and rule.code != "TL000":
            yield pytest.param(rule.code, rule.example, id=f"{rule.code}-example")
    for path in sorted(FIXTURES.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if FileText(text).has_star_import:
            continue  # the prefilter does not run on these (engine/runner.py): their names are bound elsewhere
        for code in sorted({code for _, _, code in expected_findings(text)} - {"TL000"}):
            # Where the file is matters: a project fixture's evidence may sit in the files it imports.
            yield pytest.param(code, FileText(text, str(path)), id=f"{code}-{path.name}")


@pytest.mark.parametrize("text, star", [
    ("from common import *\n", True),
    ("from .imports import *  # noqa\n", True),
    ("import torch\nx = a * b\n", False),
    ("s = 'from x import *'\n", False),
])
def test_a_star_import_is_seen_in_the_text(text, star):
    # Such a file runs every rule (engine/runner.py); fixtures/projects/names_from_star_import shows why.
    assert FileText(text).has_star_import is star


@pytest.mark.parametrize("code, text", list(rule_texts()))
def test_every_flagged_example_and_fixture_holds_a_trigger_of_its_rule(code, text):
    assert prefilter.runnable(text, [rules_by_code()[code]]) == [rules_by_code()[code]]


def test_a_project_import_is_a_trigger_only_where_the_module_is_a_file(tmp_path):
    from torchlint.rules.triggers import project_imports

    (tmp_path / "data.py").write_text("")
    text = "import torch\nfrom data import load\n"
    assert project_imports().matches(FileText(text, str(tmp_path / "main.py")))
    assert not project_imports().matches(FileText(text.replace("data", "numpy"), str(tmp_path / "main.py")))
    assert not project_imports().matches(FileText(text))


@pytest.mark.parametrize("imports", ["from . import data", "from .data import load", "from pkg import data", "from pkg.data import load"])
def test_a_module_imported_from_its_package_is_a_project_import(tmp_path, imports):
    from torchlint.rules.triggers import project_imports

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text("")
    # Without the package's __init__.py importing anything, only the module named after `import` is a project file.
    assert project_imports().matches(FileText(f"{imports}\n", str(package / "main.py")))


def test_every_trigger_is_a_trigger():
    for rule in all_rules():
        assert rule.triggers is None or isinstance(rule.triggers, Trigger), rule.code


def fixture_texts():
    for path in sorted(FIXTURES.rglob("*.py")):
        yield pytest.param(path, id=str(path.relative_to(FIXTURES)))


@pytest.mark.parametrize("path", list(fixture_texts()))
def test_the_prefilter_and_the_call_filters_change_no_finding_of_any_fixture(path):
    # Off, every rule also sees every call (`Rule.call_parts` is part of the prefilter): traps included, the findings
    # of every fixture must be the same.
    config = make_config(select=["ALL"])
    text = path.read_text(encoding="utf-8")
    without = runner.lint_text(text, str(path), config, use_prefilter=False)
    assert runner.lint_text(text, str(path), config) == without


@pytest.mark.parametrize("callee, names", [
    ("loss.backward", ("backward", "loss")),
    ("torch.utils.data.DataLoader", ("DataLoader", "data", "utils", "torch")),
    ("images.cuda().float", ("float", "cuda", "images")),
    ("self.layers[0].forward", ("forward", "layers", "self")),
    ("nn.CrossEntropyLoss()", ("CrossEntropyLoss", "nn")),
    ("(a or b)", ()),
])
def test_callee_names_are_the_names_written_in_the_callee(callee, names):
    import libcst as cst

    assert runner.callee_names(cst.parse_expression(callee)) == names


class _SeesCalls(Rule):
    """A rule that records every call it is shown: for the engine's call filter."""

    code = "TL997"
    name = "sees-calls"
    call_parts = frozenset({"DataLoader"})
    seen: list = []

    def visit_Call(self, node):
        _SeesCalls.seen.append(self.ctx.code(node.func))


@pytest.mark.parametrize("text, shown", [
    ("from torch.utils.data import DataLoader\nDataLoader(ds)\nprint(ds)\n", ["DataLoader"]),
    ("import torch\ntorch.utils.data.DataLoader(ds)\nlen(ds)\n", ["torch.utils.data.DataLoader"]),
    # An alias is the name of an import whose path holds the part.
    ("from torch.utils.data import DataLoader as DL\nDL(ds)\nlist(ds)\n", ["DL"]),
    ("import torch.utils.data.dataloader as loading\nloading.DataLoader(ds)\n", ["loading.DataLoader"]),
    ("from torch.utils.data import DataLoader\nmake(DataLoader)(ds)\n", []),
])
def test_a_rule_with_call_parts_is_shown_only_the_calls_that_can_be_its_own(monkeypatch, text, shown):
    monkeypatch.setattr(runner, "rules_by_code", lambda: {"TL997": _SeesCalls})
    monkeypatch.setattr(_SeesCalls, "seen", [])
    runner.lint_text(text, "example.py", make_config(), codes=frozenset({"TL997"}))
    assert _SeesCalls.seen == shown
    monkeypatch.setattr(_SeesCalls, "seen", [])
    runner.lint_text(text, "example.py", make_config(), codes=frozenset({"TL997"}), use_prefilter=False)
    assert len(_SeesCalls.seen) == text.count("(")
