"""An edited file reparsed statement by statement gives the tree a full parse gives, or is parsed in full."""

import random

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.engine import parsing

TOKENS = [
    "x", " ", "\n", "(", ")", "[", "]", ":", ",", "#", "# note\n", '"', "'''", "\\", "\\\n", "    ", "\t", "@",
    "else:\n", "    # indented\n", "def f():\n    pass\n", "if a:\n    b\n", "\n\n", "pass\n", "return\n", "lambda: 0",
]


def full_parse(text):
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError:
        return None


def parsed_by(trees, path, text):
    try:
        return trees.parse(path, text)
    except cst.ParserSyntaxError:
        return None


def assert_same_tree(trees, path, text):
    expected = full_parse(text)
    found = parsed_by(trees, path, text)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.deep_equals(expected)
        assert found.code == expected.code  # the text itself, but for what libcst's own parse does not keep


def edited(text: str, rng: random.Random) -> str:
    at = rng.randrange(len(text) + 1)
    kind = rng.random()
    if kind < 0.45:
        return text[:at] + rng.choice(TOKENS) + text[at:]
    if kind < 0.8:
        return text[:at] + text[at + rng.randint(1, 12):]
    lines = text.splitlines(keepends=True)
    row = rng.randrange(len(lines)) if lines else 0
    if kind < 0.9:
        lines.insert(row, lines[row] if lines else "x = 1\n")  # a line repeated, as a paste
    else:
        lines[row:row + 1] = ["    " + lines[row]] if lines else []
    return "".join(lines)


FIXTURE_FILES = [path for path in sorted(FIXTURES.rglob("*.py")) if full_parse(path.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda path: str(path.relative_to(FIXTURES)))
def test_edits_of_every_fixture_reparse_to_the_full_parse(path, tmp_path):
    rng = random.Random(str(path.relative_to(FIXTURES)))
    trees = parsing.ParsedTrees()
    name = str(tmp_path / path.name)
    text = path.read_text(encoding="utf-8")
    trees.parse(name, text)
    for _ in range(12):
        changed = edited(text, rng)
        assert_same_tree(trees, name, changed)
        if full_parse(changed) is not None:
            text = changed  # edits go on from a text that parses, as typing does between mistakes


def test_most_edits_inside_a_long_file_are_reparsed_alone(monkeypatch, tmp_path):
    # Without this, the test above could pass with every edit parsed in full.
    parsed = []
    real = parsing.parse_module
    monkeypatch.setattr(parsing, "parse_module", lambda text: parsed.append(len(text)) or real(text))
    text = (FIXTURES / "examples" / "train.py").read_text(encoding="utf-8")
    text = text + "".join(f"\ndef helper_{index}(values):\n    return sum(values) / {index + 1}\n" for index in range(30))
    trees = parsing.ParsedTrees()
    name = str(tmp_path / "train.py")
    trees.parse(name, text)
    rng = random.Random(0)
    edits = 0
    for _ in range(40):
        row = rng.randrange(20, 90)
        lines = text.splitlines(keepends=True)
        changed = "".join(lines[:row] + [lines[row].replace("values", "items")] + lines[row + 1:])
        if changed == text:
            continue
        edits += 1
        assert_same_tree(trees, name, changed)
        text = changed
    assert edits >= 10
    small = [length for length in parsed[1:] if length < len(text) // 4]
    assert len(small) >= edits * 0.8


BACKSLASH_AFTER_BLOCK = (
    "class Block(nn.Module):\n    def f(self, dim):\n            b = 2\n    def forward(self, x):  # t  '''# t\n"
    "        return  self.fc(x)\n    b = 2\n\\\n1\n    def forward(self, \nx):\n        return x * x.sigmoid()\n  # t\n"
    "class Net(nn.Module):\n        retur# qn:\n    \\\n    self.dim = dim\nclass C:\n        y = 1\n    # c\n"
)


@pytest.mark.parametrize("before, after", [
    # A clause at the start of the edit belongs to the statement before it.
    ("import a\nif a:\n    b = 1\nc = 2\nd = 3\n", "import a\nif a:\n    b = 1\nelse:\n    c = 2\nd = 3\n"),
    # An indented comment after a block goes to that block.
    ("import a\ndef f():\n    pass\nc = 2\nd = 3\n", "import a\ndef f():\n    pass\n    # more\nc = 2\nd = 3\n"),
    # A block indented less than the module's first one takes a comment at its indentation: a `def` before the
    # edit, indented as the module is, would not.
    ("import a\ndef f():\n    pass\ndef g():\n  pass\nc = 2\nd = 3\n", "import a\ndef f():\n    pass\ndef g():\n  pass\n  # c\nc = 2\nd = 3\n"),
    # A block the edit ends with takes the indented comment before the next statement.
    ("import a\nb = 1\nc = 2\n    # note\nd = 3\ne = 4\n", "import a\nb = 1\ndef c():\n    pass\n    # note\nd = 3\ne = 4\n"),
    # Windows line endings and tab indentation are the module's, kept.
    ("import a\r\ndef f():\r\n\treturn 1\r\nb = 2\r\nc = 3\r\n", "import a\r\ndef f():\r\n\treturn 2\r\nb = 2\r\nc = 3\r\n"),
    # The first block sets the indentation: an edit before it is parsed in full.
    ("import a\nb = 1\ndef f():\n  pass\nc = 2\n", "import a\nb = 2\ndef f():\n  pass\nc = 2\n"),
    # The header's comments and the footer: never reparsed alone.
    ("# head\nimport a\ndef f():\n    pass\nb = 1\n# foot\n", "# head!\nimport a\ndef f():\n    pass\nb = 1\n# foot!\n"),
    # No newline at the end.
    ("import a\ndef f():\n    pass\nb = 1\nc = 2", "import a\ndef f():\n    pass\nb = 3\nc = 2"),
    # A string opened by the edit runs into the statements after it.
    ("import a\ndef f():\n    pass\nb = 1\nc = '''x'''\nd = 1\n", "import a\ndef f():\n    pass\nb = '''1\nc = '''x'''\nd = 1\n"),
    # libcst gives back a backslash alone on a line after a block as indentation: the statements' code, which adds
    # up to the text's length, is not their text, and the edit's region would be cut where their lengths say.
    (BACKSLASH_AFTER_BLOCK, BACKSLASH_AFTER_BLOCK.replace("class Net(nn.Module):\n", "class Net(nn.Module):\n    # c\n")),
    # Statements deleted, and statements added.
    ("import a\ndef f():\n    pass\nb = 1\nc = 2\nd = 3\n", "import a\ndef f():\n    pass\nd = 3\n"),
    ("import a\ndef f():\n    pass\nb = 1\nd = 3\n", "import a\ndef f():\n    pass\nb = 1\nx = 1\ny = 2\n\n\nd = 3\n"),
])
def test_edits_that_depend_on_context_give_the_full_parse(before, after, tmp_path):
    trees = parsing.ParsedTrees()
    name = str(tmp_path / "edited.py")
    trees.parse(name, before)
    assert_same_tree(trees, name, after)


def test_most_edits_inside_a_long_class_are_reparsed_as_the_method_alone(monkeypatch, tmp_path):
    # A long script's edits fall in the methods of one class: the method is parsed, not the class.
    parsed = []
    real = parsing.parse_module
    monkeypatch.setattr(parsing, "parse_module", lambda text: parsed.append(len(text)) or real(text))
    methods = "".join(f"\n    def helper_{index}(self, values):\n        return sum(values) / {index + 1}\n" for index in range(30))
    text = (FIXTURES / "examples" / "train.py").read_text(encoding="utf-8") + f"\n\nclass Helpers:{methods}\n\nDONE = True\n"
    trees = parsing.ParsedTrees()
    name = str(tmp_path / "train.py")
    trees.parse(name, text)
    rng = random.Random(0)
    start = text.splitlines().index("class Helpers:")
    edits = 0
    for _ in range(30):
        lines = text.splitlines(keepends=True)
        row = rng.randrange(start + 4, start + 88)
        changed = "".join(lines[:row] + [lines[row].replace("values", "items")] + lines[row + 1:])
        if changed == text:
            continue
        edits += 1
        assert_same_tree(trees, name, changed)
        text = changed
    assert edits >= 10
    small = [length for length in parsed[1:] if length < 200]
    assert len(small) >= edits * 0.8


def in_class(body: str) -> str:
    """`body` (lines at the class body's indentation, or less) as the body of a class between two statements."""
    return f"import a\n\n\nclass A:\n    first = 0\n{body}    last = 9\n\n\nb = 1\n"


@pytest.mark.parametrize("before, after", [
    # An edit inside one method.
    (in_class("    def f(self):\n        return 1\n    x = 2\n"), in_class("    def f(self):\n        return 12\n    x = 2\n")),
    # A clause at the start of the edit belongs to the statement before it.
    (in_class("    if a:\n        b = 1\n    c = 2\n    d = 3\n"), in_class("    if a:\n        b = 1\n    else:\n        c = 2\n    d = 3\n")),
    # An indented comment after a method goes to that method's block; one at the class's indentation, or less, not.
    (in_class("    def f(self):\n        pass\n    c = 2\n    d = 3\n"), in_class("    def f(self):\n        pass\n        # more\n    c = 2\n    d = 3\n")),
    (in_class("    def f(self):\n        pass\n    c = 2\n    d = 3\n"), in_class("    def f(self):\n        pass\n# left\n    c = 2\n    d = 3\n")),
    (in_class("    def f(self):\n        pass\n    c = 2\n    d = 3\n"), in_class("    def f(self):\n        pass\n  # between\n    c = 2\n    d = 3\n")),
    # A block indented less than a method's takes a comment at its indentation (here the module's first block
    # sets the indentation to eight spaces, and a method's body is indented by four more).
    ("def f():\n        pass\nclass A:\n        def g(self):\n            x()\n        c = 1\n        d = 2\nb = 1\n",
     "def f():\n        pass\nclass A:\n        def g(self):\n            x()\n            # c\n        c = 1\n        d = 2\nb = 1\n"),
    # A block the edit ends with takes the indented comment before the next statement.
    (in_class("    b = 1\n    c = 2\n        # note\n    d = 3\n"), in_class("    b = 1\n    def c(self):\n        pass\n        # note\n    d = 3\n")),
    # A line at column 0 ends the class.
    (in_class("    b = 1\n    c = 2\n    d = 3\n"), in_class("    b = 1\nc = 2\n    d = 3\n")),
    (in_class("    b = 1\n    c = 2\n    d = 3\n"), in_class("    b = 1\nc = 2\nd = 3\n")),
    # Decorators, and a method added with its comment.
    (in_class("    @property\n    def f(self):\n        return 1\n    x = 2\n"), in_class("    @property\n    @cached\n    def f(self):\n        return 1\n    x = 2\n")),
    (in_class("    x = 2\n    y = 3\n"), in_class("    x = 2\n\n    # g\n    def g(self):\n        return 2\n    y = 3\n")),
    # A string opened by the edit runs into the statements after it.
    (in_class("    b = 1\n    c = '''x'''\n    d = 1\n"), in_class("    b = '''1\n    c = '''x'''\n    d = 1\n")),
    # Statements deleted, and a nested class.
    (in_class("    b = 1\n    c = 2\n    d = 3\n"), in_class("    d = 3\n")),
    (in_class("    class B:\n        x = 1\n    y = 2\n"), in_class("    class B:\n        x = 1\n        z = 3\n    y = 2\n")),
    # Windows line endings, tab indentation, and a class indented otherwise than the module's first block.
    (in_class("    def f(self):\n        return 1\n    x = 2\n").replace("\n", "\r\n"),
     in_class("    def f(self):\n        return 2\n    x = 2\n").replace("\n", "\r\n")),
    (in_class("    def f(self):\n        return 1\n    x = 2\n").replace("    ", "\t"),
     in_class("    def f(self):\n        return 2\n    x = 2\n").replace("    ", "\t")),
    ("def f():\n  pass\n" + in_class("    x = 1\n    y = 2\n"), "def f():\n  pass\n" + in_class("    x = 1\n    y = 3\n")),
])
def test_edits_inside_a_class_that_depend_on_context_give_the_full_parse(before, after, tmp_path):
    trees = parsing.ParsedTrees()
    name = str(tmp_path / "edited.py")
    trees.parse(name, before)
    assert_same_tree(trees, name, after)


# ------------------------------------------------------------ lints after edits

def findings_of(text, name, config, trees, monkeypatch, walks=None, whole=None):
    from torchlint.engine import positions
    from torchlint.engine.runner import lint_text
    from torchlint.engine.walk import walk as real_walk

    monkeypatch.setattr(parsing, "TREES", trees)
    # The walks of statements for their parent maps (reports made after the walk), counted when asked.
    counted = lambda root, *args: (walks.append(root) if walks is not None else None) or real_walk(root, *args)  # noqa: E731
    monkeypatch.setattr(positions, "walk", counted)
    real_module = positions.Positions._module
    # The whole-module position passes, which a wrong map of parents would bring (a stack that is not the tree's).
    module_pass = lambda self: (whole.append(self.module) if whole is not None and not self._whole else None) or real_module(self)  # noqa: E731
    monkeypatch.setattr(positions.Positions, "_module", module_pass)
    return [
        (finding.code, finding.message, finding.location, finding.end_location, finding.fix)
        for finding in lint_text(text, name, config)
    ]


def assert_lints_agree_after_edits(text, name, rng, edits, monkeypatch):
    """Each edit linted as the server lints it (the kept tree reparsed, the position pass's maps handed on) gives
    exactly the findings, fixes included, of a lint of the whole text from nothing; returns how many statements
    the position pass walked for its maps in the edits' lints and in the same lints from nothing, and how many
    whole-module position passes each made."""
    from conftest import make_config

    config = make_config(select=["ALL"])
    kept = parsing.ParsedTrees()
    assert findings_of(text, name, config, kept, monkeypatch) == findings_of(text, name, config, parsing.ParsedTrees(), monkeypatch)
    incremental_walks, full_walks, incremental_whole, full_whole = [], [], [], []
    for _ in range(edits):
        changed = edited(text, rng)
        incremental = findings_of(changed, name, config, kept, monkeypatch, incremental_walks, incremental_whole)
        assert incremental == findings_of(changed, name, config, parsing.ParsedTrees(), monkeypatch, full_walks, full_whole)
        if full_parse(changed) is not None:
            text = changed
    return len(incremental_walks), len(full_walks), len(incremental_whole), len(full_whole)


# Every seventh fixture with findings: a sample of every rule directory that keeps the run short.
LINTED_FIXTURES = [path for path in FIXTURE_FILES if "# expect:" in path.read_text(encoding="utf-8")][::7]


@pytest.mark.parametrize("path", LINTED_FIXTURES, ids=lambda path: str(path.relative_to(FIXTURES)))
def test_lints_after_edits_of_fixtures_equal_whole_file_lints(path, tmp_path, monkeypatch):
    rng = random.Random("lint " + str(path.relative_to(FIXTURES)))
    assert_lints_agree_after_edits(path.read_text(encoding="utf-8"), str(tmp_path / path.name), rng, 6, monkeypatch)


def test_lints_after_edits_of_a_long_file_equal_whole_file_lints(tmp_path, monkeypatch):
    # Fixtures one after another: a long module of many top-level statements and findings, several reported after
    # the walk with fixes (positions found through the parent maps an edit hands on).
    text = "\n\n".join(path.read_text(encoding="utf-8") for path in LINTED_FIXTURES[:40])
    incremental, full, incremental_whole, full_whole = assert_lints_agree_after_edits(
        text, str(tmp_path / "long.py"), random.Random(1), 25, monkeypatch,
    )
    # Without this, the test could pass with every map made again: most come from an earlier edit's lint.
    assert full >= 25 and incremental < full / 2
    # And with maps that are not the tree's, whose wrong stacks the position pass survives by doing the whole module.
    assert incremental_whole <= full_whole
