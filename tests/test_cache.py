"""The findings cache: exact round trips, keys that notice every change, and no failure ever."""

import os
import subprocess
import sys

from conftest import FIXTURES
from torchlint import cache as cache_module
from torchlint.cache import FOLDER, Cache, settings_digest
from torchlint.config import build
from torchlint.finding import Edit, Finding, Fix, Location

CODES = frozenset({"TL000", "TL303"})
DATA = b"import torch\n"


def config_at(root, **table):
    table = {key.replace("_", "-"): value for key, value in table.items()}
    return build(table, root=root, path=None, where="test", torch_requirement_from=FIXTURES)


def findings():
    fix = Fix.unsafe("drop it", Edit("", Location(1, 1), Location(1, 7)), Edit("x", Location(2, 3), Location(2, 3)))
    return [
        Finding("TL303", "persistent-workers-without-workers", "message", "a.py", Location(1, 1), Location(1, 7), fix),
        Finding("TL000", "parse-error", "SyntaxError: é", "a.py", Location(3, 2), Location(3, 2), None, 4, {"extra": [1, "two", None]}),
    ]


def saved(root, config=None):
    config = config or config_at(root)
    store = Cache.load(config)
    store.store("a.py", Cache.key(DATA, CODES), findings())
    store.save()
    return config


def test_findings_round_trip_exactly_through_the_disk(tmp_path):
    config = saved(tmp_path)
    loaded = Cache.load(config).lookup("a.py", Cache.key(DATA, CODES))
    assert loaded == findings()
    assert [finding.extra for finding in loaded] == [finding.extra for finding in findings()]
    assert [type(finding.fix.edits) if finding.fix else None for finding in loaded] == [tuple, None]


def test_a_changed_file_or_selection_misses(tmp_path):
    config = saved(tmp_path)
    loaded = Cache.load(config)
    assert loaded.lookup("a.py", Cache.key(DATA + b"\n", CODES)) is None
    assert loaded.lookup("a.py", Cache.key(DATA, CODES - {"TL000"})) is None
    assert loaded.lookup("b.py", Cache.key(DATA, CODES)) is None


def test_settings_that_change_findings_use_another_cache_and_the_rest_do_not(tmp_path):
    base = settings_digest(config_at(tmp_path))
    assert settings_digest(config_at(tmp_path)) == base
    assert settings_digest(config_at(tmp_path, device_name="dev")) != base
    assert settings_digest(config_at(tmp_path, torch_version="2.9")) != base
    assert settings_digest(config_at(tmp_path, select=["TL303"])) != base
    assert settings_digest(config_at(tmp_path, extend_exclude=["build2"], fix=True)) == base
    saved(tmp_path)
    assert Cache.load(config_at(tmp_path, device_name="dev")).lookup("a.py", Cache.key(DATA, CODES)) is None


def test_the_cache_folder_ignores_itself_for_git(tmp_path):
    saved(tmp_path)
    assert (tmp_path / FOLDER / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_corrupt_cache_is_ignored_and_replaced(tmp_path):
    config = saved(tmp_path)
    path = Cache.load(config).path
    data = path.read_bytes()
    for damaged in (b"garbage", data[:-3], data[:-3] + b"abc", b""):
        path.write_bytes(damaged)
        assert Cache.load(config).lookup("a.py", Cache.key(DATA, CODES)) is None
    saved(tmp_path, config)
    assert Cache.load(config).lookup("a.py", Cache.key(DATA, CODES)) == findings()


def test_a_well_formed_cache_with_a_damaged_entry_misses(tmp_path, monkeypatch):
    config = config_at(tmp_path)
    store = Cache.load(config)
    store._entries["a.py"] = (Cache.key(DATA, CODES), (("TL303", "only", "three"),), ())
    assert store.lookup("a.py", Cache.key(DATA, CODES)) is None


def test_an_unwritable_cache_never_fails_the_run(tmp_path):
    (tmp_path / FOLDER).write_text("a file where the folder should be")
    config = saved(tmp_path)
    assert Cache.load(config).lookup("a.py", Cache.key(DATA, CODES)) is None


def test_nothing_is_written_when_nothing_changed(tmp_path):
    config = saved(tmp_path)
    path = Cache.load(config).path
    before = path.stat().st_mtime_ns
    os.utime(path, ns=(before - 10**9, before - 10**9))
    store = Cache.load(config)
    store.store("a.py", Cache.key(DATA, CODES), findings())
    store.save()
    assert path.stat().st_mtime_ns == before - 10**9


def test_findings_whose_extra_cannot_be_stored_are_not_cached(tmp_path):
    config = config_at(tmp_path)
    store = Cache.load(config)
    odd = Finding("TL303", "n", "m", "a.py", Location(1, 1), Location(1, 2), extra={"object": object()})
    store.store("a.py", Cache.key(DATA, CODES), [odd])
    store.save()
    assert Cache.load(config).lookup("a.py", Cache.key(DATA, CODES)) is None


def test_the_code_fingerprint_is_part_of_the_settings(tmp_path, monkeypatch):
    base = settings_digest(config_at(tmp_path))
    monkeypatch.setattr(cache_module, "_fingerprint", "an edited rule")
    assert settings_digest(config_at(tmp_path)) != base


def test_a_run_answered_from_the_cache_does_not_load_libcst(tmp_path):
    # The engine, the rules and libcst cost a third of a second to import: a warm run must not need them.
    (tmp_path / "train.py").write_text((FIXTURES / "examples" / "train.py").read_text())
    program = (
        "import sys, io, contextlib\n"
        "from torchlint.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    code = main(['check', '--output-format', 'full', 'train.py'])\n"
        "print(code, 'libcst' in sys.modules, 'torchlint.rules' in sys.modules, out.getvalue().count('TL'))\n"
    )
    runs = [subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split() for _ in range(2)]
    cold, warm = runs
    assert cold[:3] == ["1", "True", "True"]
    assert warm == ["1", "False", "False", cold[3]]
