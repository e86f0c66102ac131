"""Notebooks: code cells linted as one script, findings placed by cell, fixes written into the cells only."""

import json

import nbformat
import pytest

from conftest import FIXTURES, lint, make_config
from torchlint.discovery import discover
from torchlint.engine.expectations import expected_findings
from torchlint.engine.parallel import lint_files
from torchlint.notebook import fix_notebook, lint_notebook_bytes
from torchlint.reporters import REPORTERS
from torchlint.rules import all_rules
from torchlint.rules.base import strip_expectations

BAD_LOADER = "loader = torch.utils.data.DataLoader(ds, persistent_workers=True)"
COLUMN = BAD_LOADER.index("persistent_workers") + 1


def notebook(*cells, language="python", **write_options) -> bytes:
    """A notebook; a cell is code, or ("markdown", text)."""
    made = nbformat.v4.new_notebook()
    made.metadata["kernelspec"] = {"name": "k", "display_name": "K", "language": language}
    for cell in cells:
        if isinstance(cell, tuple):
            made.cells.append(nbformat.v4.new_markdown_cell(cell[1]))
        else:
            made.cells.append(nbformat.v4.new_code_cell(cell))
    return nbformat.writes(made, **write_options).encode("utf-8")


def findings(data: bytes, **table):
    table.setdefault("select", ["ALL"])
    return lint_notebook_bytes(data, "explore.ipynb", make_config(**table)).findings


def placed(data: bytes, **table):
    return [(f.cell, f.location.row, f.location.column, f.code) for f in findings(data, **table)]


def test_findings_name_their_cell_and_row_within_it_counting_markdown_cells(tmp_path):
    path = tmp_path / "explore.ipynb"
    path.write_bytes(notebook("import torch", ("markdown", "# Data\nsome text"), "\n\n" + BAD_LOADER))
    [result] = lint_files([(str(path), "explore.ipynb")], make_config(select=["ALL"]), jobs=1)
    assert [(f.cell, f.location.row, f.location.column, f.code) for f in result.findings] == [(3, 3, COLUMN, "TL303")]
    assert result.findings[0].end_location.row == 3 and result.findings[0].filename == "explore.ipynb"


def test_a_fix_edit_in_another_cell_names_that_cell():
    # TL606's fix adds `import torch` at the top of the script: the first cell, not the finding's.
    [finding] = findings(notebook("from torch import log\nx = 1.0", "y = log(1 + x)"), select=["TL606"])
    edits = {(edit.cell, edit.location.row, edit.content) for edit in finding.fix.edits}
    assert finding.cell == 2
    assert (1, 1, "import torch\n") in edits
    assert all(cell == 2 for cell, _, content in edits if content != "import torch\n")


def test_magics_shell_lines_and_help_are_neutralised():
    data = notebook(
        "%matplotlib inline\nimport torch\n!pip install torch",
        "files = !ls\nresult = %timeit -o f()\ntorch.nn.Linear?\n??torch.nn\nfor i in range(3):\n    %time f(i)\n" + BAD_LOADER,
        "%%time\n" + BAD_LOADER,
        "!echo continued \\\n   over two lines\n" + BAD_LOADER,
    )
    assert placed(data) == [(2, 7, COLUMN, "TL303"), (3, 2, COLUMN, "TL303"), (4, 3, COLUMN, "TL303")]


def test_magics_written_without_percent_are_neutralised_as_automagic_runs_them():
    data = notebook(
        "pip install -r requirements.txt\nmatplotlib inline\nload_ext autoreload\nautoreload 2\nimport torch",
        "cd ..\nrun train.py --epochs 1\n" + BAD_LOADER,
    )
    assert placed(data) == [(2, 3, COLUMN, "TL303")]


def test_a_magic_name_that_python_can_read_stays_python():
    # A name bound, compared or divided is Python: only a name then a word is taken for a magic.
    data = notebook("import torch\ntime = 3\nconfig = dict(lr=1)\ncd /tmp\npip in (1, 2)\n" + BAD_LOADER)
    assert placed(data) == [(1, 6, COLUMN, "TL303")]


def test_a_percent_that_continues_an_expression_is_python():
    data = notebook('import torch\nmessage = ("%d items"\n    % count)\n' + BAD_LOADER)
    assert placed(data) == [(1, 4, COLUMN, "TL303")]


def test_top_level_await_is_allowed_as_in_ipython():
    assert placed(notebook("import torch\nawait asyncio.sleep(0)\n" + BAD_LOADER)) == [(1, 3, COLUMN, "TL303")]


def test_cells_in_another_language_are_skipped():
    assert placed(notebook("%%bash\nloader = DataLoader(ds, persistent_workers=True) if [ 1 ]", "import torch\n" + BAD_LOADER)) == [
        (2, 2, COLUMN, "TL303"),
    ]


def test_a_cell_with_a_syntax_error_hides_nothing_in_the_others():
    data = notebook("import torch", "def broken(:\n    pass", BAD_LOADER)
    assert placed(data) == [(2, 1, 12, "TL000"), (3, 1, COLUMN, "TL303")]
    assert placed(data, ignore=["TL000"]) == [(3, 1, COLUMN, "TL303")]


def test_a_cell_indented_only_on_its_first_line_is_an_error_that_says_which_ipython_ran_it():
    # IPython before 9.0.2 took the first line's indent off the lines that have it and ran this cell; 9.0.2 and
    # later take off only the indent all lines share (none here), as torchlint does, and raise IndentationError.
    [error] = findings(notebook(" def f(a):\n    return a\n\nprint(f(1))"), select=["TL000"])
    assert (error.cell, error.location.row) == (1, 1)
    assert "IPython before 9.0.2 ran such a cell" in error.message
    # A syntax error with no leading indent says nothing of IPython.
    [plain] = findings(notebook("def broken(:\n    pass"), select=["TL000"])
    assert "IPython" not in plain.message
    # Every line sharing the first line's indent: both IPythons run it, and so does torchlint.
    assert findings(notebook("  import torch\n  x = torch.zeros(1)"), select=["TL000"]) == []


def test_noqa_works_per_cell_line():
    data = notebook("import torch\n" + BAD_LOADER + "  # noqa: TL303", "# noqa\n" + BAD_LOADER, BAD_LOADER + "  # noqa: TL101")
    # The last `# noqa: TL101` silences nothing: TL001 reports it in its cell, where its comment starts.
    unused = len(BAD_LOADER) + 3
    assert placed(data) == [(2, 2, COLUMN, "TL303"), (3, 1, COLUMN, "TL303"), (3, 1, unused, "TL001")]


def test_a_notebook_for_another_kernel_is_not_linted():
    assert placed(notebook("import torch\n" + BAD_LOADER, language="R")) == []


MALFORMED = b'{"nbformat": 4, "nbformat_minor": 5, "metadata": [], "cells": [{"cell_type": "code", "source": 7}]}'


@pytest.mark.parametrize(
    "data", [b"{not json", b'{"cells": 3}', b"\xff\xfe", MALFORMED], ids=["not-json", "not-a-notebook", "not-utf8", "malformed"],
)
def test_a_file_that_is_not_a_notebook_is_a_parse_error(data):
    [finding] = findings(data)
    assert (finding.code, finding.cell, finding.location.row) == ("TL000", None, 1)
    assert "not a notebook nbformat can read" in finding.message


def test_reporters_show_the_cell():
    [finding] = findings(notebook("import torch", BAD_LOADER))
    assert REPORTERS["concise"]([finding], {}, False).startswith(f"explore.ipynb:cell 2:1:{COLUMN}: TL303 ")
    [as_json] = json.loads(REPORTERS["json"]([finding], {}, False))
    assert as_json["cell"] == 2 and as_json["location"] == {"row": 1, "column": COLUMN}


NOTEBOOK_FIXTURES = sorted(FIXTURES.rglob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_FIXTURES, ids=lambda path: str(path.relative_to(FIXTURES)))
def test_notebook_fixture_findings_are_exactly_the_expected_ones(path):
    """Each code cell states its own findings with `# expect: CODE:COLUMN`, rows counted within the cell."""
    cells = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4).cells
    expected = sorted(
        (number, row, column, code)
        for number, cell in enumerate(cells, start=1) if cell.cell_type == "code"
        for row, column, code in expected_findings(cell.source)
    )
    [result] = lint_files([(str(path), path.name)], make_config(select=["ALL"]), jobs=1)
    assert sorted((f.cell, f.location.row, f.location.column, f.code) for f in result.findings) == expected


def test_there_are_notebook_fixtures_for_tl302_and_tl304():
    assert {path.name.split("_")[0] for path in NOTEBOOK_FIXTURES} >= {"TL302", "TL304"}


UNGUARDED_LOOP = "import torch\nloader = torch.utils.data.DataLoader(ds, num_workers=2)\nfor batch in loader:\n    step(batch)"


def test_workers_started_at_module_level_are_fine_in_a_notebook_but_not_in_a_script():
    # A kernel never re-imports the notebook, so no worker re-runs its cells.
    assert placed(notebook(UNGUARDED_LOOP), select=["TL302"]) == []
    assert [f.code for f in lint(UNGUARDED_LOOP, "train.py", select=["TL302"])] == ["TL302"]


def test_a_definition_of_the_notebook_that_workers_need_is_a_spawn_problem_with_a_fix():
    cells = (
        "from torch.utils.data import DataLoader",
        "def keep(batch):\n    return batch",
        "loader = DataLoader(ds, num_workers=2, collate_fn=keep)",
    )
    [finding] = findings(notebook(*cells), select=["TL304"])
    assert (finding.cell, finding.location.row, finding.code) == (3, 1, "TL304")
    assert "spawn" in finding.message and "Can't get attribute 'keep' on <module '__main__' (built-in)>" in finding.message
    assert finding.message.endswith("move the definition into a .py module and import it")
    # The same function in a script pickles by its module's name.
    assert lint("\n".join(cells), "train.py", select=["TL304"]) == []


def test_discovery_finds_notebooks(tmp_path):
    (tmp_path / "explore.ipynb").write_bytes(notebook("import torch"))
    (tmp_path / "train.py").write_text("import torch\n")
    (tmp_path / "notes.txt").write_text("")
    found = [name for _, name in discover([str(tmp_path)], make_config(select=["ALL"]))]
    assert [name.rsplit("/", 1)[1] for name in found] == ["explore.ipynb", "train.py"]


# ---------------------------------------------------------------- fixing


def add_workers(script: str) -> str:
    return script.replace("persistent_workers=True", "num_workers=2, persistent_workers=True")


def test_fix_rewrites_only_the_changed_cell_source():
    made = nbformat.v4.new_notebook()
    made.cells = [
        nbformat.v4.new_code_cell("%matplotlib inline\nimport torch\n" + BAD_LOADER + "\nprint(loader)", execution_count=3),
        nbformat.v4.new_code_cell("x = 1  # untouched"),
    ]
    # The output quotes the code: it must not be rewritten.
    made.cells[0].outputs = [nbformat.v4.new_output("stream", text=BAD_LOADER + "\n")]
    made.metadata["custom"] = {"note": "persistent_workers=True"}
    data = nbformat.writes(made).encode("utf-8")
    fixed = fix_notebook(data, lambda script, part: add_workers(script))
    old_line = json.dumps(BAD_LOADER + "\n")
    new_line = json.dumps(add_workers(BAD_LOADER) + "\n")
    assert data.count(old_line.encode()) == 2  # in the source and in the output
    expected = data.replace(f'"source": [\n    "%matplotlib inline\\n",\n    "import torch\\n",\n    {old_line}'.encode(),
                            f'"source": [\n    "%matplotlib inline\\n",\n    "import torch\\n",\n    {new_line}'.encode())
    assert expected != data and fixed == expected
    assert nbformat.reads(fixed.decode(), as_version=4).cells[0].source.endswith("\nprint(loader)")


def test_fix_keeps_the_layout_of_each_source():
    original = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": BAD_LOADER},
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": ["# caf\u00e9\n", BAD_LOADER + "\n", "\n"]},
        ],
        "metadata": {"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    text = json.dumps(original, indent=2, sort_keys=True) + "\n"  # ASCII-escaped, two-space indents: not nbformat's own style
    fixed = fix_notebook(text.encode(), lambda script, part: add_workers(script)).decode()
    expected = text.replace(json.dumps(BAD_LOADER), json.dumps(add_workers(BAD_LOADER)), 1)
    expected = expected.replace(json.dumps(BAD_LOADER + "\n"), json.dumps(add_workers(BAD_LOADER) + "\n"))
    assert fixed == expected != text
    assert '"# caf\\u00e9\\n"' in fixed


def test_fix_leaves_the_bytes_alone_when_nothing_changes():
    data = notebook("import torch", "%%bash\necho persistent_workers=True", "def broken(persistent_workers=True:\n  pass")
    assert fix_notebook(data, lambda script, part: add_workers(script)) is data


@pytest.mark.parametrize("data", [b"{not json", MALFORMED, b'[{"cells": []}]'], ids=["not-json", "malformed", "not-an-object"])
def test_fix_leaves_what_is_not_a_notebook_alone(data):
    assert fix_notebook(data, lambda script, part: add_workers(script)) is data


def test_fix_that_loses_a_cell_marker_writes_nothing():
    data = notebook("import torch\n" + BAD_LOADER, "x = 1")
    assert fix_notebook(data, lambda script, part: script.replace("#%% torchlint cell 2\n", "")) is data


def test_fix_through_the_fix_engine():
    from torchlint.fixes import fix_text

    for rule in all_rules():
        code = strip_expectations(rule.example)
        if any(f.fix is not None and f.fix.applicability == "safe" for f in lint(code, select=[rule.code])):
            break
    else:
        pytest.fail("no rule example offers a safe fix")
    config = make_config(select=[rule.code])
    data = notebook("%load_ext autoreload", code)
    before = [f for f in findings(data, select=[rule.code]) if f.fix is not None and f.fix.applicability == "safe"]
    fixed = fix_notebook(data, lambda script, part: fix_text(script, lambda text: lint(text, select=[rule.code]), False, "explore.ipynb").text)
    assert fixed != data
    after = lint_notebook_bytes(fixed, "explore.ipynb", config).findings
    assert len([f for f in after if f.fix is not None and f.fix.applicability == "safe"]) < len(before)
    assert nbformat.reads(fixed.decode(), as_version=4).cells[0].source == "%load_ext autoreload"


def test_check_fix_rewrites_only_the_changed_cells(tmp_path):
    import nbformat

    from conftest import run_cli

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Train"),
        nbformat.v4.new_code_cell("import torch\n%matplotlib inline\nweight = torch.zeros(3)\nbias = torch.zeros(1)"),
        nbformat.v4.new_code_cell("weight.require_grad = True\nbias.require_grad = True  # typo"),
    ]
    path = tmp_path / "train.ipynb"
    nbformat.write(notebook, str(path))
    before = path.read_text(encoding="utf-8")

    code, out, err = run_cli("check", "--fix", "train.ipynb", cwd=tmp_path)
    assert (code, err) == (0, "") and out == "Found 2 findings (2 fixed, 0 remaining).\n"
    after = path.read_text(encoding="utf-8")
    changed = [(old, new) for old, new in zip(before.splitlines(), after.splitlines()) if old != new]
    assert changed == [
        ('    "weight.require_grad = True\\n",', '    "weight.requires_grad = True\\n",'),
        ('    "bias.require_grad = True  # typo"', '    "bias.requires_grad = True  # typo"'),
    ]
    assert run_cli("check", "--fix", "train.ipynb", cwd=tmp_path)[:2] == (0, "All checks passed!\n")
    assert path.read_text(encoding="utf-8") == after


# ---------------------------------------------------------------- cells indented as a whole

INDENTED = FIXTURES / "api" / "TL603_notebook_indented_cells.ipynb"


def code_sources(data: bytes):
    return [cell.source for cell in nbformat.reads(data.decode("utf-8"), as_version=4).cells if cell.cell_type == "code"]


def ipython_dedent(source: str) -> str:
    """The cell as IPython 9's `leading_indent` (textwrap.dedent) runs it, magic lines as `pass`."""
    import textwrap

    lines = textwrap.dedent(source).splitlines()
    return "\n".join(leading(line) + "pass" if line.lstrip().startswith("%") else line for line in lines)


def leading(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def apply_edits(source: str, edits) -> str:
    """`edits`, rows and columns counted in `source`, applied to it."""
    lines = source.splitlines(keepends=True) + [""]

    def offset(location):
        return sum(map(len, lines[:location.row - 1])) + location.column - 1

    for edit in sorted(edits, key=lambda edit: (edit.location, edit.end_location), reverse=True):
        source = source[:offset(edit.location)] + edit.content + source[offset(edit.end_location):]
    return source


def test_check_fix_keeps_the_indent_of_a_cell_indented_as_a_whole(tmp_path):
    from conftest import run_cli

    path = tmp_path / INDENTED.name
    path.write_bytes(INDENTED.read_bytes())
    before = path.read_bytes()
    typos = [f for f in findings(before) if f.code == "TL603"]
    code, out, err = run_cli("check", "--fix", "--select", "TL603", path.name, cwd=tmp_path)
    assert (code, err) == (0, "") and out == f"Found {len(typos)} findings ({len(typos)} fixed, 0 remaining).\n"
    after = path.read_bytes()
    changed = [(old, new) for old, new in zip(before.splitlines(), after.splitlines()) if old != new]
    assert len(changed) == len(typos) and all(new == old.replace(b".require_grad", b".requires_grad") for old, new in changed)
    fixed_cells = [(old, new) for old, new in zip(code_sources(before), code_sources(after)) if old != new]
    for old, new in fixed_cells:
        assert new == old.replace(".require_grad =", ".requires_grad =")
        assert [leading(line) for line in new.splitlines()] == [leading(line) for line in old.splitlines()]
        compile(ipython_dedent(new), "<cell>", "exec", dont_inherit=True)
    assert sum(ipython_dedent(new) != new for _, new in fixed_cells) == 3  # the cells indented as a whole
    # The traps are left as they were and still do not compile.
    traps = [(f.cell, f.location, f.code) for f in findings(before) if f.code == "TL000"]
    assert [(f.cell, f.location, f.code) for f in findings(after) if f.code == "TL000"] == traps


def test_fixes_reported_for_an_indented_cell_apply_to_the_cell_as_written():
    from torchlint.fixes import fix_text

    cells = (" from torch import log\n\n y = log(1 + p)\n z = (log(1 + q) +\n      1)", "\tw = torch.ones(2)\n\tw.require_grad = True")
    data = notebook(*cells)
    found = findings(data, select=["TL603", "TL606"])
    assert [(f.cell, f.location.row, f.location.column, f.code) for f in found] == [
        (1, 3, 6, "TL606"), (1, 4, 7, "TL606"), (2, 2, 2, "TL603"),
    ]

    def fix_script(script):
        return fix_text(script, lambda text: lint(text, select=["TL603", "TL606"]), True, "explore.ipynb").text

    fixed = code_sources(fix_notebook(data, lambda script, part: fix_script(script)))
    assert fixed == [
        " import torch\n from torch import log\n\n y = torch.log1p(p)\n z = (torch.log1p(q) +\n      1)",
        "\tw = torch.ones(2)\n\tw.requires_grad = True",
    ]
    # A reported fix, applied to the cell as written, does there what it does to the script (its import line indented too).
    first_fixed = " import torch\n from torch import log\n\n y = torch.log1p(p)\n z = (log(1 + q) +\n      1)"
    assert apply_edits(cells[0], found[0].fix.edits) == first_fixed
    assert apply_edits(cells[1], found[2].fix.edits) == fixed[1]


def test_lines_a_fix_adds_to_an_indented_cell_are_indented_and_a_fix_that_would_change_the_indent_writes_nothing():
    data = notebook("import torch", "  x = torch.ones(2)\n\n  %time f(x)\n  x.require_grad = True\n")
    added = fix_notebook(data, lambda script, part: script.replace("x.require_grad = True\n", "x.requires_grad = True\nx.grad = None\n"))
    assert code_sources(added) == ["import torch", "  x = torch.ones(2)\n\n  %time f(x)\n  x.requires_grad = True\n  x.grad = None\n"]
    # Its first line indented, IPython would take more off the cell than its indent.
    assert fix_notebook(data, lambda script, part: script.replace("x = torch.ones(2)", " x = torch.ones(2)")) is data


# ---------------------------------------------------------------- what a user sees


def _without_ids(data: bytes) -> bytes:
    """The notebook as nbformat 4.5 files written before cell ids were required: no `id` on its cells."""
    made = json.loads(data)
    made["nbformat_minor"] = 5
    for cell in made["cells"]:
        cell.pop("id", None)
    return json.dumps(made).encode("utf-8")


def test_the_full_format_quotes_the_cell_line_under_a_notebook_finding(tmp_path):
    from conftest import run_cli

    (tmp_path / "explore.ipynb").write_bytes(notebook("import torch", "\n" + BAD_LOADER))
    code, out, err = run_cli("check", "--no-cache", "--output-format", "full", "explore.ipynb", cwd=tmp_path)
    assert (code, err) == (1, "")
    gutter = " " * (COLUMN - 1)
    assert out.splitlines()[1:4] == ["  |", f"2 | {BAD_LOADER}", f"  | {gutter}" + "^" * len("persistent_workers=True")]


def test_a_notebook_without_cell_ids_warns_nothing(tmp_path):
    from conftest import run_cli

    (tmp_path / "explore.ipynb").write_bytes(_without_ids(notebook("import torch", BAD_LOADER)))
    code, out, err = run_cli("check", "--no-cache", "--quiet", "explore.ipynb", cwd=tmp_path)
    assert (code, err) == (1, "")
    assert "MissingIDFieldWarning" not in out and out.count("TL303") == 1
