"""Every regular expression torchlint runs on a file's text (or a project file's) matches in linear time.

Each case below is an input on which the pattern it names backtracked before issue 33: exponentially (the banner of
`#`s) or quadratically (a run of blanks, dots or repeated keywords that each attempt read again). Each runs in a
fresh interpreter under `HANG` seconds, which the linear patterns use a small fraction of (well under a second on
the 2-core test machine) and the old ones exceed many times over (estimated from their measured growth: from
minutes to forever). The test asserts what the pattern found, never how fast.

The other patterns of the package (grep `re.compile` under torchlint/) were checked the same way and need no case:
they are anchored at one position (`match`, `fullmatch`), read one short line or name, or have no two ways to
match the same characters.
"""

import subprocess
import sys
import textwrap

import pytest

HANG = 60

CASES = {
    # file_text._ATTRIBUTE: a comment repeated as `#[^\r\n]*` split a banner of `#`s in 2**n ways.
    "attribute after a banner": (
        "from torchlint.engine.file_text import FileText",
        "sorted(FileText('# Hyperparameters.\\n' + '#' * 60 + '\\n@dataclass\\nx.cuda()\\n').attributes)",
        "['cuda']",
    ),
    # ... and read the rest of a comment block again from each line ending in a dot.
    "attribute in a comment block": (
        "from torchlint.engine.file_text import FileText",
        "sorted(FileText('#.\\n' * 100_000 + '@\\nx.cuda()\\n').attributes)",
        "['cuda']",
    ),
    # file_text._FROM_IMPORT: `\.*[\w.]*` split a run of dots in n ways, each read to its end.
    "from-import dots": (
        "from torchlint.engine.file_text import FileText",
        "sorted(FileText('from ' + '.' * 100_000).imported_modules)",
        "[]",
    ),
    # ... and a `(` never closed was read to the end of the file from each import.
    "from-import unclosed": (
        "from torchlint.engine.file_text import FileText",
        "sorted(FileText('from a import (\\n' * 100_000).imported_modules)",
        # What follows an unclosed `(` up to the next one counts as imported names (a superset, as the prefilter needs).
        "['a', 'a.a', 'a.from', 'a.import']",
    ),
    # file_text._IMPORT: the list after each `import ` inside a line was read to its end before the line was checked.
    "import inside a line": (
        "from torchlint.engine.file_text import FileText",
        "sorted(FileText('x = 1; ' + 'import a , ' * 200_000).imported_modules)",
        "[]",
    ),
    # noqa.FILE_NOQA: `^\s*` read the rest of a run of blank lines from each of them.
    "file noqa after blank lines": (
        "from torchlint.engine.noqa import file_suppressions",
        "file_suppressions('\\n' * 200_000 + 'x = 1\\n# torchlint: noqa: TL101\\n')",
        "frozenset({'TL101'})",
    ),
    # expectations.EXPECT_COMMENT: a searched `\s*` read the rest of a run of blanks from each of them.
    "expectation after blanks": (
        "from torchlint.engine.expectations import expected_findings",
        "expected_findings('x = 1' + ' ' * 200_000 + 'y\\nz = 2  # expect: TL101:1\\n')",
        "[(2, 1, 'TL101')]",
    ),
    # project_settings._CLAUSE: the same for the blanks of a requirement's version specifier.
    "version specifier blanks": (
        "from torchlint.project_settings import specifier_floor",
        "specifier_floor(' ' * 100_000 + '>=2.1')",
        "(2, 1)",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pattern_is_linear_on_its_worst_input(case):
    imports, expression, expected = CASES[case]
    script = f"{imports}\nprint(repr({expression}))\n"
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == expected


def attributes(text: str):
    from torchlint.engine.file_text import FileText

    return FileText(textwrap.dedent(text)).attributes


def test_attributes_after_comments_and_continuations_are_found():
    found = attributes("""
        x = (images.
             # move them
             # first.

             cuda())
        y = a. \\
            float()
        s = "a. #"; t = u.half()
    """)
    assert {"cuda", "float", "half"} <= found


def test_imports_are_found_at_line_starts_only():
    from torchlint.engine.file_text import FileText

    text = "from ..pkg.mod import (a,  # one\n    b)\n  import q.r, s\nx = 'import nope'\nfrom . import data\n"
    assert FileText(text).imported_modules == frozenset({"..pkg.mod", "..pkg.mod.a", "..pkg.mod.b", "..pkg.mod.one", "q.r", "s", ".", ".data"})


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_the_file_noqa_comment_is_read_within_its_line(ending):
    from torchlint.engine.noqa import file_suppressions

    assert file_suppressions(ending.join(["x = 1", "  # torchlint: noqa: TL101, TL202", "y = 2"])) == frozenset({"TL101", "TL202"})
    assert file_suppressions(ending.join(["x = 1", "# torchlint: noqa", ""])) == frozenset({"*"})
    # Not a comment of its own line, and no codes taken from the next line.
    assert file_suppressions(ending.join(["x = 1  # torchlint: noqa", "y = 2"])) is None
    assert file_suppressions(ending.join(["# torchlint: noqa:", "TL101"])) is None
