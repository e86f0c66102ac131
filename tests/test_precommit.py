"""The hooks in `.pre-commit-hooks.yaml`, run by the real pre-commit on real commits.

The hook environment pre-commit would build for `language: python` needs the
network, so the test copies the manifest's hooks into a `repo: local` config as
`language: system`, with this checkout's `torchlint` on PATH: the entry, args
and file types under test are the manifest's own.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, lint
from torchlint.rules import all_rules
from torchlint.rules.base import strip_expectations

MANIFEST = ROOT / ".pre-commit-hooks.yaml"
BAD = "import torch\nloader = torch.utils.data.DataLoader(ds, persistent_workers=True)\n"
CLEAN = "import torch\nloader = torch.utils.data.DataLoader(ds, num_workers=2, persistent_workers=True)\n"


def manifest_hooks():
    return {hook["id"]: hook for hook in yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))}


def run(command, cwd, env):
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return completed.returncode, completed.stdout + completed.stderr


@pytest.fixture
def repository(tmp_path):
    """A git repository with pre-commit installed; call it with the hook ids to enable."""
    env = dict(os.environ)
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
        GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
    )
    folder = tmp_path / "repo"
    folder.mkdir()

    def make(*hook_ids, torchlint_toml='select = ["ALL"]\nextend-exclude = ["vendored/"]\n'):
        hooks = [{**manifest_hooks()[hook_id], "language": "system"} for hook_id in hook_ids]
        (folder / ".pre-commit-config.yaml").write_text(yaml.safe_dump({"repos": [{"repo": "local", "hooks": hooks}]}))
        (folder / "torchlint.toml").write_text(torchlint_toml)
        assert run(["git", "init", "-q"], folder, env)[0] == 0
        assert run([sys.executable, "-m", "pre_commit", "install"], folder, env)[0] == 0

        def commit(files):
            for name, text in files.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(text)
            assert run(["git", "add", "-A"], folder, env)[0] == 0
            return run(["git", "commit", "-q", "-m", "change"], folder, env)

        return folder, commit

    return make


def test_manifest_is_valid_for_pre_commit():
    code, output = run([sys.executable, "-m", "pre_commit", "validate-manifest", str(MANIFEST)], ROOT, dict(os.environ))
    assert code == 0, output


def test_manifest_declares_both_hooks_as_the_contract_says():
    hooks = manifest_hooks()
    assert set(hooks) == {"torchlint", "torchlint-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == ["python", "pyi", "jupyter"]
        assert hook["require_serial"] is True
        assert "--force-exclude" in hook["entry"].split()
    assert "--fix" in hooks["torchlint-fix"]["entry"].split() and "--fix" not in hooks["torchlint"]["entry"].split()


def test_a_bad_notebook_fails_the_commit_too(repository):
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(BAD)])
    _, commit = repository("torchlint")
    code, output = commit({"explore.ipynb": nbformat.writes(notebook)})
    assert code != 0
    assert "explore.ipynb" in output and "TL303" in output


def test_a_bad_file_fails_the_commit_with_the_finding_printed(repository):
    folder, commit = repository("torchlint")
    code, output = commit({"train.py": BAD})
    assert code != 0
    assert "train.py:2:" in output and "TL303" in output
    assert run(["git", "log", "--oneline"], folder, dict(os.environ))[0] != 0, "nothing may have been committed"


def test_a_clean_file_passes(repository):
    folder, commit = repository("torchlint")
    code, output = commit({"train.py": CLEAN, "notes.txt": BAD})
    assert code == 0, output


def test_config_excludes_apply_to_the_files_pre_commit_names(repository):
    folder, commit = repository("torchlint")
    code, output = commit({"vendored/train.py": BAD, "train.py": CLEAN})
    assert code == 0, output


def _safely_fixable_example():
    """A rule's own example that produces a safe fix, and that rule's code."""
    for rule in all_rules():
        if "safe" in rule.fix_safety.split() and rule.example:
            findings = lint(rule.example, select=[rule.code])
            if any(finding.fix is not None and finding.fix.applicability == "safe" for finding in findings):
                return rule.code, strip_expectations(rule.example)
    return None


def test_the_fix_hook_rewrites_a_fixable_file(repository):
    example = _safely_fixable_example()
    assert example is not None, "no rule example has a safe fix to try the hook on"
    code, text = example
    folder, commit = repository("torchlint-fix", torchlint_toml=f'select = ["{code}"]\n')
    exit_code, output = commit({"train.py": text})
    assert exit_code != 0, "pre-commit fails a commit whose files a hook changed"
    fixed = (folder / "train.py").read_text()
    assert fixed != text
    before = [f for f in lint(text, select=[code]) if f.fix is not None and f.fix.applicability == "safe"]
    after = [f for f in lint(fixed, select=[code]) if f.fix is not None and f.fix.applicability == "safe"]
    assert len(after) < len(before)
