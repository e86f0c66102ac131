"""The preview tier: a rule in preview runs only with `--preview` / `preview = true`, however it is selected."""

import pytest

from conftest import make_config, run_cli
from torchlint.catalogue import RULES
from torchlint.rules import all_rules

PREVIEW = sorted(rule.code for rule in all_rules() if rule.preview)
# A file where TL202 (in preview) and TL201 (not) both report.
MIXED = (
    "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 2).to(device)\n"
    "images = images.half().to(device)\ny = model(images.cuda())\n"
)


def test_some_rules_are_in_preview_and_the_catalogue_says_which():
    assert PREVIEW, "the gate below would test nothing"
    assert sorted(entry.code for entry in RULES if entry.preview) == PREVIEW


@pytest.mark.parametrize("select", [None, ["ALL"], ["TL2"]])
def test_without_preview_no_selection_runs_a_preview_rule(select):
    table = {"preview": False} if select is None else {"preview": False, "select": select}
    config = make_config(**table)
    assert set(PREVIEW) & config.select == set()
    assert config.preview_left_out == frozenset()


def test_a_preview_rule_named_by_its_code_is_left_out_and_remembered():
    config = make_config(preview=False, select=["TL202", "TL201"])
    assert config.select == {"TL201"}
    assert config.preview_left_out == {"TL202"}


def test_with_preview_every_selection_reaches_preview_rules():
    assert set(PREVIEW) <= make_config(preview=True).select
    assert set(PREVIEW) <= make_config(preview=True, select=["ALL"]).select
    assert make_config(preview=True, select=["TL202"]).select == {"TL202"}


def test_the_command_line_gate(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MIXED)
    _, out, _ = run_cli("check", "--isolated", "--output-format", "concise", script, cwd=tmp_path)
    assert "TL201" in out and "TL202" not in out
    _, out, _ = run_cli("check", "--isolated", "--preview", "--output-format", "concise", script, cwd=tmp_path)
    assert "TL201" in out and "TL202" in out
    code, out, err = run_cli("check", "--isolated", "--select", "TL202", script, cwd=tmp_path)
    assert (code, "TL202" in out) == (0, False)
    assert "TL202 is in preview" in err


def test_the_config_key_and_its_command_line_override(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MIXED)
    (tmp_path / "torchlint.toml").write_text("preview = true\n")
    _, out, _ = run_cli("check", "--output-format", "concise", script, cwd=tmp_path)
    assert "TL202" in out
    _, out, _ = run_cli("check", "--no-preview", "--output-format", "concise", script, cwd=tmp_path)
    assert "TL202" not in out
    _, out, _ = run_cli("check", "--show-settings", script, cwd=tmp_path)
    assert "preview = true" in out


def test_the_rules_table_and_each_page_say_which_rules_are_in_preview():
    _, out, _ = run_cli("rule", "--all")
    marked = sorted(line.split()[0] for line in out.splitlines() if "(preview)" in line)
    assert marked == PREVIEW
    _, page, _ = run_cli("rule", PREVIEW[0])
    assert "In preview" in page and "--preview" in page
