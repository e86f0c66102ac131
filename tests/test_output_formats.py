"""The formats for CI systems: json-lines, junit (the Jenkins JUnit schema's structure), gitlab (Code Quality), pylint;
and the full format's source lines (a notebook cell's too) and fixes shown as diffs."""

import json
import xml.etree.ElementTree as ElementTree

import pytest

from conftest import ROOT
from torchlint.cli import main
from torchlint.finding import Edit, Finding, Fix, Location
from torchlint.reporters import REPORTERS, source_key

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"
FIXABLE = (
    "import torch\n"
    "x, device = torch.arange(3), torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
    "for step in range(2):\n"
    "    y = x.float().to(device)\n"
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "fixable.py").write_text(FIXABLE)
    return tmp_path


def check(capsys, *args):
    # --preview: the fixable example is TL202's, a rule in preview.
    code = main(["check", "--preview", "--no-cache", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def notebook_finding(message="m & <n>\x01"):
    return Finding("TL303", "persistent-workers-without-workers", message, "nb.ipynb", Location(2, 9), Location(2, 20), cell=3)


# ---------------------------------------------------------------- json-lines


def test_json_lines_is_one_json_object_a_line_as_in_json(project, capsys):
    _, lines, _ = check(capsys, "--output-format", "json-lines", ".")
    _, array, _ = check(capsys, "--output-format", "json", ".")
    assert [json.loads(line) for line in lines.splitlines()] == json.loads(array)
    assert len(lines.splitlines()) == 2


# ---------------------------------------------------------------- junit

# The Jenkins JUnit schema (junit-10.xsd, the one Jenkins' xunit plugin and most CI servers follow), as its
# documented structure: element -> (required attributes, optional attributes, allowed children).
JUNIT_SCHEMA = {
    "testsuites": (set(), {"name", "time", "tests", "failures", "disabled", "errors"}, {"testsuite"}),
    "testsuite": (
        {"name", "tests"},
        {"failures", "errors", "time", "disabled", "skipped", "timestamp", "hostname", "id", "package", "file", "log", "url", "version"},
        {"properties", "testcase", "system-out", "system-err"},
    ),
    "testcase": ({"name"}, {"classname", "assertions", "time", "status", "file", "line"}, {"skipped", "error", "failure", "system-out", "system-err"}),
    "failure": (set(), {"type", "message"}, set()),
}
INTEGER_ATTRIBUTES = {"tests", "failures", "errors", "disabled", "skipped", "line", "assertions"}


def assert_valid_junit(element: ElementTree.Element) -> None:
    required, optional, children = JUNIT_SCHEMA[element.tag]
    attributes = set(element.attrib)
    assert required <= attributes, (element.tag, required - attributes)
    assert attributes <= required | optional, (element.tag, attributes - required - optional)
    for name in attributes & INTEGER_ATTRIBUTES:
        assert int(element.attrib[name]) >= 0, (element.tag, name)
    for child in element:
        assert child.tag in children, (element.tag, child.tag)
        assert_valid_junit(child)


def test_junit_follows_the_jenkins_schema_and_counts_the_findings(project, capsys):
    code, out, _ = check(capsys, "--output-format", "junit", ".")
    assert code == 1 and out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ElementTree.fromstring(out.encode("utf-8"))
    assert root.tag == "testsuites"
    assert_valid_junit(root)
    suites = root.findall("testsuite")
    assert [(suite.get("name"), suite.get("tests"), suite.get("failures")) for suite in suites] == [
        ("bad.py", "1", "1"), ("fixable.py", "1", "1"),
    ]
    (case,) = suites[0].findall("testcase")
    assert (case.get("classname"), case.get("line"), case.find("failure").get("type")) == ("bad.py", "2", "TL303")
    assert root.get("tests") == root.get("failures") == "2"


def test_junit_without_findings_is_one_passing_case(project, capsys):
    (project / "clean.py").write_text("x = 1\n")
    code, out, _ = check(capsys, "--output-format", "junit", "clean.py")
    root = ElementTree.fromstring(out)
    assert_valid_junit(root)
    assert code == 0 and [case.find("failure") for case in root.iter("testcase")] == [None]


def test_junit_escapes_what_xml_cannot_hold_and_names_a_notebook_cell():
    root = ElementTree.fromstring(REPORTERS["junit"]([notebook_finding()], {}, False))
    assert_valid_junit(root)
    case = root.find("testsuite/testcase")
    assert case.get("line") is None and "cell 3:2:9" in case.get("name")
    assert case.find("failure").get("message") == "m & <n>\ufffd"


# ---------------------------------------------------------------- gitlab

SEVERITIES = {"info", "minor", "major", "critical", "blocker"}


def assert_code_quality_issue(issue: dict) -> None:
    """The fields GitLab documents as required for a Code Quality report's issue."""
    assert isinstance(issue["description"], str) and issue["description"]
    assert isinstance(issue["check_name"], str) and issue["check_name"]
    assert isinstance(issue["fingerprint"], str) and issue["fingerprint"]
    assert issue["severity"] in SEVERITIES
    location = issue["location"]
    assert isinstance(location["path"], str) and not location["path"].startswith("/")
    assert isinstance(location["lines"]["begin"], int) and location["lines"]["begin"] >= 1


def test_gitlab_code_quality_report_has_the_documented_fields(project, capsys, monkeypatch):
    monkeypatch.delenv("CI_PROJECT_DIR", raising=False)
    (project / "pkg").mkdir()
    (project / "pkg" / "twice.py").write_text(BAD + BAD.splitlines()[1] + "\n")
    code, out, _ = check(capsys, "--output-format", "gitlab", ".")
    issues = json.loads(out)
    for issue in issues:
        assert_code_quality_issue(issue)
    assert [(issue["check_name"], issue["location"]["path"], issue["location"]["lines"]["begin"]) for issue in issues if issue["check_name"] == "TL303"] == [
        ("TL303", "bad.py", 2), ("TL303", "pkg/twice.py", 2), ("TL303", "pkg/twice.py", 3),
    ]
    # GitLab shows one issue per fingerprint: the same rule on the same line text twice must still differ.
    assert len({issue["fingerprint"] for issue in issues}) == len(issues)


def test_gitlab_paths_are_relative_to_the_ci_project_dir(project, capsys, monkeypatch):
    monkeypatch.setenv("CI_PROJECT_DIR", str(project.parent))
    issues = json.loads(check(capsys, "--output-format", "gitlab", "bad.py")[1])
    assert issues[0]["location"]["path"] == f"{project.name}/bad.py"


# ---------------------------------------------------------------- pylint


def test_pylint_parseable_lines(project, capsys):
    _, out, _ = check(capsys, "--output-format", "pylint", "bad.py")
    assert out.startswith("bad.py:2: [TL303(persistent-workers-without-workers), ] `persistent_workers=True` with no workers")
    assert REPORTERS["pylint"]([notebook_finding("m")], {}, False) == "nb.ipynb:1: [TL303(persistent-workers-without-workers), ] cell 3:2:9: m\n"


# ---------------------------------------------------------------- full


def test_full_shows_the_fix_as_the_lines_it_changes(project, capsys):
    (project / "train.py").write_text((ROOT / "fixtures" / "examples" / "train.py").read_text())
    _, out, _ = check(capsys, "--output-format", "full", "--select", "TL201", "train.py")
    assert out.splitlines()[1:8] == [
        "   |",
        "17 |         x = x.float().cuda()",
        "   |             ^^^^^^^^^^^^^^^^",
        "  = fix (safe): Replace with `.to(device)`",
        "    17    |-        x = x.float().cuda()",
        "       17 |+        x = x.float().to(device)",
        "Found 1 finding.",
    ]


def test_full_shows_a_notebook_findings_cell_line():
    finding = Finding("TL303", "persistent-workers-without-workers", "m", "nb.ipynb", Location(2, 9), Location(2, 13), cell=3)
    sources = {source_key("nb.ipynb", 3): "import torch\nloader = DataLoader(ds)\n"}
    assert REPORTERS["full"]([finding], sources, False).splitlines()[1:4] == [
        "  |", "2 | loader = DataLoader(ds)", "  |         ^^^^",
    ]


def test_full_diff_of_a_fix_that_adds_a_line():
    fix = Fix.safe("import it", Edit("import os\n", Location(1, 1), Location(1, 1)), Edit("os", Location(2, 5), Location(2, 8)))
    finding = Finding("TL999", "x", "m", "a.py", Location(2, 5), Location(2, 8), fix)
    out = REPORTERS["full"]([finding], {"a.py": "x = 1\ny = sys\n"}, False)
    # New rows are numbered in the fixed text: the added line is 1, the changed one moves to 3.
    assert out.endswith("  = fix (safe): import it\n      1 |+import os\n    2   |-y = sys\n      3 |+y = os\n")
