"""No input hangs or exhausts the linter (issue 33): the per-file time and size budgets, and the inputs that hung it.

Every lint that could hang runs in a subprocess with a timeout that fires only on a hang (`HANG`, far above what
the lint takes: these tests assert what is reported, never how fast). The time budget is tested with a rule that
never returns (`STUCK_RULE`), so its outcome does not depend on the machine's speed either.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, run_cli

# Seconds after which a lint is taken for hung. Each lint below takes well under 5 s on the 2-core test machine; on
# the code before issue 33 the banner layout took forever (exponential), the long chain over 10 minutes.
HANG = 120
GOOD_WITH_FINDING = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"
TL303 = "TL303"
# `# Hyperparameters.` then a banner of `#`s then a line starting with `@`, `"""` or `(`.
BANNER_TAILS = {
    "dataclass": "@dataclass\nclass Config:\n    lr: float = 0.1\n",
    "docstring": '"""Settings."""\n',
    "parenthesis": "(a, b) = (1, 2)\n",
}
SUM_TERMS = 20_000


def banner_file(tail: str) -> str:
    return "from dataclasses import dataclass\n# Hyperparameters.\n" + "#" * 60 + "\n" + tail + GOOD_WITH_FINDING


def run_python(script: str, *args: str, cwd=ROOT) -> str:
    """Run `script` in a fresh interpreter (a hang there fails the test with TimeoutExpired, and a signal or a
    stuck thread cannot reach pytest's own process); its standard output."""
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True, timeout=HANG, cwd=cwd,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


LINT_TEXT = """
    import sys
    from conftest import make_config
    from torchlint.engine.runner import lint_text

    text = open(sys.argv[1], encoding="utf-8").read()
    for finding in lint_text(text, "example.py", make_config(select=["ALL"])):
        print(finding.location.row, finding.code, finding.message)
"""


def lint_text_in_subprocess(tmp_path, text: str) -> list:
    (tmp_path / "input.py").write_text(text, encoding="utf-8")
    out = run_python(f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n" + textwrap.dedent(LINT_TEXT), str(tmp_path / "input.py"))
    return out.splitlines()


@pytest.mark.parametrize("tail", sorted(BANNER_TAILS))
def test_a_banner_after_a_comment_ending_in_a_dot_is_linted_by_lint_text(tmp_path, tail):
    text = banner_file(BANNER_TAILS[tail])
    lines = lint_text_in_subprocess(tmp_path, text)
    row = text.splitlines().index(GOOD_WITH_FINDING.splitlines()[1]) + 1
    assert [line.split(" ", 2)[:2] for line in lines] == [[str(row), TL303]]


def test_a_banner_after_a_comment_ending_in_a_dot_is_linted_by_check(tmp_path):
    for tail, code in BANNER_TAILS.items():
        (tmp_path / f"{tail}.py").write_text(banner_file(code))
    exit_code, out, err = run_cli("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert err == "" and exit_code == 1
    assert sorted(line.split(":")[0] for line in out.splitlines() if TL303 in line) == [f"{tail}.py" for tail in sorted(BANNER_TAILS)]


@pytest.mark.parametrize("layout", ["one line", "one term a line"])
def test_an_expression_python_refuses_as_too_deep_is_tl000_at_once(tmp_path, layout):
    # 20,000 terms: `python file.py` stops with "RecursionError: maximum recursion depth exceeded during compilation".
    terms = ["1"] * SUM_TERMS
    expression = "+".join(terms) if layout == "one line" else "(" + "\n+ ".join(terms) + ")"
    (tmp_path / "deep.py").write_text("import torch\nx = torch.ones(3) + " + expression + "\nx.cuda()\n")
    (tmp_path / "other.py").write_text(GOOD_WITH_FINDING)
    exit_code, out, err = run_cli("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert err == "" and exit_code == 1
    lines = out.splitlines()
    assert lines[0].startswith("deep.py:1:1: TL000 the file is nested too deeply for Python to compile it (maximum recursion depth exceeded")
    assert lines[1].startswith("other.py:2:25: TL303")
    # The same through lint_text (the flake8 plugin, the language server), where the recursion limit is Python's own.
    lines = lint_text_in_subprocess(tmp_path, (tmp_path / "deep.py").read_text())
    assert len(lines) == 1 and lines[0].startswith("1 TL000 the file is nested too deeply for Python to compile it")


@pytest.mark.parametrize("expression", [
    "(a" + "\nand a" * 12_000 + ")", "(x" + "\n[0]" * 2_000 + ")", "(" + "a if b else\n" * 2_500 + "a)",
], ids=["and", "subscript", "conditional"])
def test_an_expression_too_deep_for_libcst_is_tl000_not_a_crash_or_minutes(tmp_path, expression):
    # Python compiles these; libcst's parser crashed the process on the first and took minutes on the others.
    (tmp_path / "deep.py").write_text("import torch\nx = " + expression + "\ntorch.ones(1).cuda()\n")
    (tmp_path / "other.py").write_text(GOOD_WITH_FINDING)
    exit_code, out, err = run_cli("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert err == "" and exit_code == 1
    lines = out.splitlines()
    assert lines[0].startswith("deep.py:2:1: TL000 not linted: an expression in this statement nests ")
    assert lines[0].endswith(" levels deep, more than torchlint's parser takes (2,100)")
    assert lines[1].startswith("other.py:2:25: TL303")


def write_config(folder, **keys) -> None:
    (folder / "torchlint.toml").write_text("".join(f"{key} = {value!r}\n" for key, value in keys.items()))


def test_a_file_over_the_size_budget_is_reported_without_being_read(tmp_path):
    # A sparse file of 1 TiB (no disk used): reading it whole could not finish, so a report proves it was not read.
    huge = tmp_path / "huge.py"
    with open(huge, "wb") as handle:
        handle.truncate(2 ** 40)
    (tmp_path / "small.py").write_text("x = 1\n" * 200)
    (tmp_path / "other.py").write_text(GOOD_WITH_FINDING)
    write_config(tmp_path, **{"max-file-bytes": 1000})
    exit_code, out, err = run_cli("check", "--quiet", "--output-format", "concise", ".", cwd=tmp_path)
    assert err == "" and exit_code == 1
    assert out.splitlines() == [
        "huge.py:1:1: TL000 not linted: the file is 1,099,511,627,776 bytes, over the per-file size budget of 1,000 bytes (`max-file-bytes`)",
        f"other.py:2:25: TL303 {out.splitlines()[1].split(' TL303 ')[1]}",
        "small.py:1:1: TL000 not linted: the file is 1,200 bytes, over the per-file size budget of 1,000 bytes (`max-file-bytes`)",
    ]
    # Cached runs say it again (the cache is not consulted for a file over the budget), and 0 lifts the budget.
    assert run_cli("check", "--quiet", "--output-format", "concise", ".", cwd=tmp_path)[1] == out
    write_config(tmp_path, **{"max-file-bytes": 0})
    os.truncate(huge, 0)
    assert run_cli("check", "--quiet", "--output-format", "concise", ".", cwd=tmp_path)[1].count("TL000") == 0


def test_text_over_the_size_budget_is_reported_by_lint_text():
    from conftest import make_config
    from torchlint.engine.runner import lint_text

    findings = lint_text("x = 1\n" * 200, "example.py", make_config(**{"max-file-bytes": 1000}))
    assert [(f.code, f.message) for f in findings] == [
        ("TL000", "not linted: the file is 1,200 bytes, over the per-file size budget of 1,000 bytes (`max-file-bytes`)")
    ]


# A rule that never returns on a file whose name holds "stuck", registered as TL999 for the script that runs it.
STUCK_RULE = """
    import dataclasses, sys
    sys.path.insert(0, {tests!r})
    from conftest import make_config
    from torchlint.engine import runner
    from torchlint.rules import rules_by_code
    from torchlint.rules.base import Rule

    class Stuck(Rule):
        code, name, message = "TL999", "stuck", "never reported"

        def visit_Name(self, node):
            while "stuck" in self.ctx.filename:
                pass

    catalogue = {{**rules_by_code(), "TL999": Stuck}}
    runner.rules_by_code = lambda: catalogue
    config = make_config(select=["ALL"], **{{"max-file-seconds": 0.5}})
    config = dataclasses.replace(config, select=config.select | {{"TL999"}})
"""


def stuck_script(body: str) -> str:
    return textwrap.dedent(STUCK_RULE).format(tests=str(ROOT / "tests")) + textwrap.dedent(body)


TIME_MESSAGE = "not linted: linting took longer than the per-file time budget of 0.5 s (`max-file-seconds`)"


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_over_the_time_budget_is_one_finding_and_the_next_file_is_linted(tmp_path, jobs):
    for name in ("a_stuck.py", "b_good.py", "c_stuck.py", "d_good.py"):
        (tmp_path / name).write_text(GOOD_WITH_FINDING)
    out = run_python(stuck_script(f"""
        from torchlint.engine.parallel import lint_files
        files = [(name, name) for name in sorted(__import__("os").listdir("."))]
        for result in lint_files(files, config, jobs={jobs}):
            for finding in result.findings:
                print(result.filename, finding.code, finding.message)
    """), cwd=tmp_path)
    lines = out.splitlines()
    assert lines[0] == f"a_stuck.py TL000 {TIME_MESSAGE}"
    assert lines[1].startswith("b_good.py TL303 ")
    assert lines[2] == f"c_stuck.py TL000 {TIME_MESSAGE}"
    assert lines[3].startswith("d_good.py TL303 ") and len(lines) == 4


def test_a_lint_over_the_time_budget_on_another_thread_is_stopped_too(tmp_path):
    # The language server lints on a thread of its own, where no signal handler runs: the budget still applies.
    (tmp_path / "stuck.py").write_text(GOOD_WITH_FINDING)
    out = run_python(stuck_script("""
        from concurrent.futures import ThreadPoolExecutor
        from torchlint.engine.runner import lint_text
        with ThreadPoolExecutor(max_workers=1) as thread:
            for name in ("stuck.py", "good.py"):
                findings = thread.submit(lint_text, open("stuck.py").read(), name, config).result()
                print(name, [(finding.code, finding.message) for finding in findings][:1])
    """), cwd=tmp_path)
    good = out.splitlines()[1]
    assert out.splitlines()[0] == f"stuck.py [('TL000', {TIME_MESSAGE!r})]"
    assert good.startswith("good.py [('TL303',")


def test_a_stopped_lint_leaves_nothing_half_made_behind(tmp_path):
    # The stuck file imports a project module, so the project index and the parsed trees hold something when the
    # time runs out; the next lint must start from what a fresh process would hold.
    (tmp_path / "model.py").write_text("import torch\nclass Net(torch.nn.Module):\n    pass\n")
    (tmp_path / "stuck.py").write_text("from model import Net\nnet = Net()\n" + GOOD_WITH_FINDING)
    out = run_python(stuck_script("""
        from torchlint.analysis.project import PROJECT
        from torchlint.engine import parsing
        from torchlint.engine.runner import lint_file
        print(lint_file("model.py", config).findings == [])
        print(len(parsing.TREES._trees), lint_file("stuck.py", config).findings[0].message)
        print(len(parsing.TREES._trees), len(PROJECT._modules), len(PROJECT._paths))
    """), cwd=tmp_path)
    assert out.splitlines() == ["True", f"1 {TIME_MESSAGE}", "0 0 0"]


def test_the_language_server_applies_the_budgets(tmp_path):
    (tmp_path / "stuck.py").write_text(GOOD_WITH_FINDING)
    out = run_python(stuck_script("""
        from concurrent.futures import ThreadPoolExecutor
        from torchlint.integrations.server import documents
        from torchlint.integrations.server.documents import Configs, Snapshot, lint

        documents.lint_text = lambda text, path, _: runner.lint_text(text, path, config)
        snapshot = Snapshot("file:///stuck.py", 1, __import__("os").path.abspath("stuck.py"), text=open("stuck.py").read(), lsp_version=1)
        with ThreadPoolExecutor(max_workers=1) as thread:  # as the server lints: on its lint thread
            linted = thread.submit(lint, snapshot, Configs(), [__import__("os").getcwd()]).result()
        print([(finding.code, finding.message) for finding in linted.findings])
    """), cwd=tmp_path)
    assert out.strip() == repr([("TL000", TIME_MESSAGE)])


def test_the_language_server_applies_the_size_budget_of_the_folders_config(tmp_path):
    from torchlint.integrations.server.documents import Configs, Snapshot, lint

    write_config(tmp_path, **{"max-file-bytes": 1000})
    path = str(tmp_path / "big.py")
    linted = lint(Snapshot("file://" + path, 1, path, text="x = 1\n" * 200, lsp_version=1), Configs(), [str(tmp_path)])
    assert [(finding.code, finding.message) for finding in linted.findings] == [
        ("TL000", "not linted: the file is 1,200 bytes, over the per-file size budget of 1,000 bytes (`max-file-bytes`)")
    ]


def test_an_error_outside_every_rule_is_one_finding_and_the_run_goes_on(monkeypatch):
    # An engine bug (not a rule's, which is already its own finding) must not become a traceback for the user.
    from conftest import make_config
    from torchlint.engine import runner

    def broken(*args, **kwargs):
        raise TypeError("a bug in the engine")

    monkeypatch.setattr(runner, "_lint_within_budget", broken)
    findings = runner.lint_text("import torch\n", "train.py", make_config(select=["ALL"]))
    assert [(finding.code, "internal error TypeError: a bug in the engine" in finding.message) for finding in findings] == [("TL000", True)]
