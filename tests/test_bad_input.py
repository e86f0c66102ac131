"""Bad input gives a TL000 finding with a place, never a traceback, and the run goes on."""

import codecs

import pytest

from conftest import run_cli

NOT_UTF8 = "the bytes are not valid UTF-8 (and the file declares no other encoding)"
GOOD_WITH_FINDING = b"from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"


def lint_tree(tmp_path, name: str, data: bytes, *extra):
    (tmp_path / name).write_bytes(data)
    (tmp_path / "other.py").write_bytes(GOOD_WITH_FINDING)
    code, out, err = run_cli("check", "--quiet", "--output-format", "concise", *extra, ".", cwd=tmp_path)
    assert "Traceback" not in err and err == ""
    return code, out.splitlines()


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"def train(:\n    pass\n", "bad.py:1:11: TL000 SyntaxError: invalid syntax"),
        (b"x = 1\n\xff\xfe = 2\n", f"bad.py:2:1: TL000 {NOT_UTF8}: invalid start byte (byte 0xff)"),
        # In the first two lines, where Python's tokenizer blames a missing encoding declaration.
        (b"\xff\xfe = 2\n", f"bad.py:1:1: TL000 {NOT_UTF8}: invalid start byte (byte 0xff)"),
        (b"x = 1  # caf\xe9\n", f"bad.py:1:13: TL000 {NOT_UTF8}: invalid continuation byte (byte 0xe9)"),
        (b"# -*- coding: utf-8 -*-\nname = '\xe9'\n", "bad.py:2:9: TL000 not valid utf-8 text: invalid continuation byte (byte 0xe9)"),
        (b"# -*- coding: ascii -*-\nname = '\xc3\xa9'\n", "bad.py:2:9: TL000 not valid ascii text: ordinal not in range(128) (byte 0xc3)"),
        (b"x = 1\ny = 2\x00\n", "bad.py:2:6: TL000 source contains a NUL byte"),
        (b"# -*- coding: klingon -*-\n", "bad.py:1:1: TL000 invalid encoding declaration: unknown encoding: klingon"),
    ],
)
def test_unreadable_text_is_tl000_and_other_files_still_run(tmp_path, data, expected):
    code, lines = lint_tree(tmp_path, "bad.py", data)
    assert code == 1
    assert lines[0] == expected
    assert lines[1].startswith("other.py:2:25: TL303")


def test_encoding_cookie_and_bom_are_honoured(tmp_path):
    latin1 = "# -*- coding: latin-1 -*-\n# café\n".encode("latin-1") + GOOD_WITH_FINDING
    code, lines = lint_tree(tmp_path, "latin.py", latin1)
    assert lines[0].startswith("latin.py:4:25: TL303")
    bom = codecs.BOM_UTF8 + GOOD_WITH_FINDING.replace(b"\n", b"\r\n")
    code, lines = lint_tree(tmp_path, "latin.py", bom)
    assert lines[0].startswith("latin.py:2:25: TL303")


def test_unreadable_file_is_tl000(tmp_path):
    (tmp_path / "dangling.py").symlink_to(tmp_path / "missing.py")
    code, out, err = run_cli("check", "--quiet", "dangling.py", cwd=tmp_path)
    assert code == 1 and err == ""
    assert out == "dangling.py:1:1: TL000 cannot read file: No such file or directory\n"


def test_empty_file_is_clean(tmp_path):
    lines = lint_tree(tmp_path, "empty.py", b"")[1]
    assert len(lines) == 1 and lines[0].startswith("other.py:2:25: TL303")


def test_large_file(tmp_path):
    body = b"".join(b"x%d = torch.zeros(%d)\n" % (i, i) for i in range(20_000))
    code, lines = lint_tree(tmp_path, "big.py", b"import torch\n" + body + GOOD_WITH_FINDING)
    assert lines[0].startswith("big.py:20003:25: TL303")


@pytest.mark.parametrize("depth", [500, 1000])
def test_deep_brackets_are_refused_like_python_does(tmp_path, depth):
    nested = b"x = " + b"(" * depth + b"1" + b")" * depth + b"\n"
    code, lines = lint_tree(tmp_path, "deep.py", GOOD_WITH_FINDING + nested)
    # CPython's tokenizer allows 200 nested brackets; libcst would crash the process on a few thousand.
    assert lines[0] == "deep.py:3:205: TL000 SyntaxError: too many nested parentheses"
    assert lines[1].startswith("other.py:2:25: TL303 ") and len(lines) == 2


@pytest.mark.parametrize("expression", [b"1" + b" + 1" * 999, b"-" * 1000 + b"1", b"not " * 500 + b"x"])
def test_deep_expressions_python_accepts_are_linted(tmp_path, expression):
    code, lines = lint_tree(tmp_path, "deep.py", GOOD_WITH_FINDING + b"x = " + expression + b"\n")
    assert [line.split(" ")[:2] for line in lines] == [["deep.py:2:25:", "TL303"], ["other.py:2:25:", "TL303"]]
