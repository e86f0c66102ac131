"""`--output-format github`: one workflow command per finding, escaped as the Actions runner parses them."""

import re
from urllib.parse import unquote

from conftest import run_cli
from torchlint.finding import Finding, Location
from torchlint.reporters import github

LOADER = "import torch\nloader = torch.utils.data.DataLoader(ds, persistent_workers=True)\n"
COMMAND = re.compile(r"^::warning (?P<properties>[^:]*)::(?P<message>.*)$")


def parse(line: str):
    """Split a command the way the runner does: properties end at `,`, the message at the line's end."""
    match = COMMAND.match(line)
    assert match, line
    properties = dict(item.split("=", 1) for item in match.group("properties").split(","))
    return {key: unquote(value) for key, value in properties.items()}, unquote(match.group("message"))


def test_cli_prints_one_annotation_per_finding(tmp_path):
    (tmp_path / "train.py").write_text(LOADER)
    code, out, err = run_cli("check", "--output-format", "github", "--no-cache", "train.py", cwd=tmp_path)
    assert code == 1, err
    [line] = out.splitlines()
    properties, message = parse(line)
    column = LOADER.splitlines()[1].index("persistent_workers") + 1
    assert properties == {
        "file": "train.py", "line": "2", "col": str(column),
        "endLine": "2", "endColumn": str(column + len("persistent_workers=True")), "title": "TL303",
    }
    assert message.startswith("`persistent_workers=True` with no workers")
    assert line.startswith(f"::warning file=train.py,line=2,col={column},endLine=2,endColumn=")


def test_no_findings_prints_nothing(tmp_path):
    (tmp_path / "clean.py").write_text("import torch\n")
    assert run_cli("check", "--output-format", "github", "--no-cache", "clean.py", cwd=tmp_path)[:2] == (0, "")


def test_newlines_percent_and_property_separators_are_escaped():
    message = "50% of rows\r\nare: lost, silently"
    finding = Finding("TL303", "persistent-workers-without-workers", message, "data/a,b:c%.py", Location(3, 5), Location(4, 1))
    line = github.render([finding], {}, False)
    assert line.count("\n") == 1 and line.endswith("\n")
    assert line == (
        "::warning file=data/a%2Cb%3Ac%25.py,line=3,col=5,endLine=4,endColumn=1,title=TL303"
        "::50%25 of rows%0D%0Aare: lost, silently\n"
    )
    properties, parsed = parse(line.rstrip("\n"))
    assert properties["file"] == "data/a,b:c%.py" and parsed == message


def test_a_notebook_finding_names_its_cell_in_the_message():
    finding = Finding("TL303", "persistent-workers-without-workers", "no workers", "explore.ipynb", Location(2, 9), Location(2, 20), cell=4)
    assert github.render([finding], {}, False) == "::warning file=explore.ipynb,title=TL303::cell 4:2:9: no workers\n"
