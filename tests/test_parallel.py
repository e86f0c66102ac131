"""Linting many files: one process or many, cached or not, the same results in the same order."""

import textwrap

import pytest

from conftest import FIXTURES
from torchlint.cache import Cache
from torchlint.config import build
from torchlint.engine import parallel
from torchlint.engine.runner import lint_file

FLAGGED = """
from torch.utils.data import DataLoader

loader = DataLoader(dataset, persistent_workers=True)
"""
CLEAN = "import torch\n\nx = torch.zeros(3)\n"


def config_at(root, **table):
    table = {key.replace("_", "-"): value for key, value in table.items()}
    table.setdefault("select", ["ALL"])
    return build(table, root=root, path=None, where="test", torch_requirement_from=FIXTURES)


@pytest.fixture
def project(tmp_path):
    files = []
    for index in range(12):
        path = tmp_path / f"m{index:02}.py"
        path.write_text(textwrap.dedent([FLAGGED, CLEAN, "def broken(:\n", "import json\n"][index % 4]))
        files.append((str(path), f"m{index:02}.py"))
    files.append((str(tmp_path / "missing.py"), "missing.py"))
    return files


def summary(results):
    return [(result.filename, result.findings) for result in results]


def test_many_processes_give_what_one_process_gives_in_the_given_order(project, tmp_path):
    config = config_at(tmp_path)
    one = parallel.lint_files(project, config, jobs=1)
    many = parallel.lint_files(list(reversed(project)), config, jobs=3)
    assert summary(one) == summary(reversed(many))
    assert [result.filename for result in one] == [name for _, name in project]
    assert summary(one) == [(name, lint_file(path, config, name).findings) for path, name in project]
    codes = {finding.code for result in one for finding in result.findings}
    assert {"TL303", "TL000"} <= codes


def test_the_workers_use_the_run_config(project, tmp_path):
    config = config_at(tmp_path, select=["TL000"])
    results = parallel.lint_files(project, config, jobs=2)
    assert {finding.code for result in results for finding in result.findings} == {"TL000"}


def test_sources_are_kept_only_for_files_with_findings(project, tmp_path):
    for jobs in (1, 2):
        for result in parallel.lint_files(project, config_at(tmp_path), jobs=jobs):
            assert (result.source is not None) == (bool(result.findings) and result.filename != "missing.py")


def test_a_second_run_is_answered_by_the_cache_until_a_file_changes(project, tmp_path, monkeypatch):
    config = config_at(tmp_path)
    first = parallel.lint_files(project, config, jobs=2, cache=Cache.load(config))

    def must_not_lint(*args, **kwargs):
        raise AssertionError("linted a file the cache knows")

    monkeypatch.setattr("torchlint.engine.runner.lint_bytes", must_not_lint)
    second = parallel.lint_files(project, config, jobs=1, cache=Cache.load(config))
    assert summary(second) == summary(first)
    assert [result.source.text if result.source else None for result in second] == [
        result.source.text if result.source else None for result in first
    ]

    changed_path, changed_name = project[0]
    with open(changed_path, "a") as handle:
        handle.write("other = DataLoader(dataset, persistent_workers=True)\n")
    with pytest.raises(AssertionError, match="linted a file"):
        parallel.lint_files(project, config, jobs=1, cache=Cache.load(config))
    monkeypatch.undo()
    third = parallel.lint_files(project, config, jobs=1, cache=Cache.load(config))
    assert len(third[0].findings) == len(first[0].findings) + 1
    assert summary(third)[1:] == summary(first)[1:]


def test_jobs_below_one_means_every_core(project, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(parallel, "_lint_all", lambda work, config, jobs, *switches: seen.append(jobs) or [])
    parallel.lint_files([], config_at(tmp_path), jobs=0)
    parallel.lint_files([], config_at(tmp_path), jobs=None)
    assert seen == [parallel.default_jobs()] * 2
