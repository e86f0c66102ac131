"""docs/configuration.md's key reference is generated from the schema the loader checks, and is up to date."""

import pytest

from conftest import ROOT
from torchlint import config_reference
from torchlint.config import SCHEMA, ConfigError, load


def test_the_reference_on_the_page_is_the_generated_one():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert config_reference.render(page) == page, "run `python -m torchlint.config_reference`"


def test_every_key_has_a_type_a_default_and_an_example_that_loads(tmp_path):
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key in SCHEMA:
        assert f"### `{key.name}`" in page and key.default and key.description
        config = tmp_path / key.name / "torchlint.toml"
        config.parent.mkdir()
        # The example is TOML under [tool.torchlint]; in torchlint.toml the same keys sit at top level.
        config.write_text(key.example + "\n")
        load(config, config.parent)


def test_a_key_the_schema_does_not_know_is_refused(tmp_path):
    config = tmp_path / "torchlint.toml"
    config.write_text('per-file-ignore = { "a.py" = ["TL101"] }\n')
    with pytest.raises(ConfigError, match=r"unknown key 'per-file-ignore' in the config; did you mean 'per-file-ignores'\?"):
        load(config, tmp_path)
