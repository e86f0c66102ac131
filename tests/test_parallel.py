"""Linting many files: one process or many, cached or not, the same results in the same order."""

import multiprocessing
import random
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


def lanes_for(tmp_path, sizes, count):
    work = []
    for name, size in sizes:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x" * size)
        work.append((str(path), name))
    return parallel._Lanes.split(list(reversed(work)), count, multiprocessing.get_context())


def taken_by(lanes, lane, times):
    return [lanes.items[lanes.take(lane)][1] for _ in range(times)]


def test_each_worker_starts_on_a_run_of_neighbouring_files_of_its_share_of_the_bytes(tmp_path):
    sizes = [("a/m.py", 100), ("a/n.py", 100), ("b/m.py", 100), ("b/n.py", 50), ("b/o.py", 50)]
    lanes = lanes_for(tmp_path, sizes, 2)
    assert taken_by(lanes, 0, 2) == ["a/m.py", "a/n.py"]
    assert taken_by(lanes, 1, 3) == ["b/m.py", "b/n.py", "b/o.py"]
    assert lanes.take(0) is None and lanes.take(1) is None


def test_a_worker_done_with_its_run_takes_the_back_half_of_the_longest_one_left(tmp_path):
    sizes = [(f"a/m{index}.py", 10) for index in range(8)] + [(f"b/m{index}.py", 10) for index in range(8)]
    lanes = lanes_for(tmp_path, sizes, 2)
    assert taken_by(lanes, 0, 8) == [f"a/m{index}.py" for index in range(8)]
    assert taken_by(lanes, 1, 2) == ["b/m0.py", "b/m1.py"]
    # Six left in b: the back three go to the idle worker, which goes on from there.
    assert taken_by(lanes, 0, 3) == ["b/m5.py", "b/m6.py", "b/m7.py"]
    assert taken_by(lanes, 1, 3) == ["b/m2.py", "b/m3.py", "b/m4.py"]
    assert lanes.take(0) is None and lanes.take(1) is None


def test_every_file_is_taken_once_whatever_the_workers_order(tmp_path):
    sizes = [(f"p{index % 5}/m{index}.py", 1 + index * 7 % 13) for index in range(40)]
    for seed in range(20):
        lanes = lanes_for(tmp_path, sizes, 3)
        chooser = random.Random(seed)
        taken, active = [], [0, 1, 2]
        while active:
            lane = chooser.choice(active)
            position = lanes.take(lane)
            if position is None:
                active.remove(lane)
            else:
                taken.append(lanes.indices[position])
        assert sorted(taken) == list(range(40))
