"""The engine's parse: libcst's tree, built without libcst re-validating every node."""

import inspect
import textwrap
from contextlib import contextmanager

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.engine import parsing
from torchlint.rules import all_rules


def texts():
    """Every rule's examples and every fixture that parses."""
    for rule in all_rules():
        for kind in ("example", "use_instead"):
            if getattr(rule, kind) and rule.code != "TL000":
                yield pytest.param(textwrap.dedent(getattr(rule, kind)), id=f"{rule.code}-{kind}")
    for path in sorted(FIXTURES.rglob("*.py")):
        if "TL000" not in path.read_text(encoding="utf-8"):
            yield pytest.param(path.read_text(encoding="utf-8"), id=str(path.relative_to(FIXTURES)))


@contextmanager
def libcsts_constructors():
    """libcst's node classes with their own constructors back, for what they build to be compared."""
    replaced = {node_type: node_type.__init__ for node_type in parsing.LIBCST_CONSTRUCTORS}
    for node_type, init in parsing.LIBCST_CONSTRUCTORS.items():
        node_type.__init__ = init
    try:
        yield
    finally:
        for node_type, init in replaced.items():
            node_type.__init__ = init


@pytest.mark.parametrize("text", list(texts()))
def test_the_tree_is_libcsts_own(text):
    tree = parsing.parse_module(text)
    with libcsts_constructors():
        libcsts = cst.parse_module(text)
    assert tree.deep_equals(libcsts)
    assert tree.code == text


def test_the_constructors_are_replaced_with_libcsts_signatures():
    assert len(parsing.LIBCST_CONSTRUCTORS) > 150  # every concrete node class of the installed libcst
    for node_type, libcsts in parsing.LIBCST_CONSTRUCTORS.items():
        assert node_type.__init__ is not libcsts
        assert inspect.signature(node_type.__init__) == inspect.signature(libcsts), node_type


def build_by_hand():
    # Defaults from factories (each node its own list), positional and keyword arguments, nested nodes.
    call = cst.Call(cst.Attribute(cst.Name("torch"), cst.Name("zeros")), [cst.Arg(cst.Integer("3"))])
    return [call, cst.Name("x", lpar=[cst.LeftParen()], rpar=[cst.RightParen()]), cst.Module([]), cst.Expr(call)]


def test_nodes_built_by_hand_are_libcsts():
    built = build_by_hand()
    with libcsts_constructors():
        expected = build_by_hand()
    for node, libcsts in zip(built, expected):
        assert node.deep_equals(libcsts)
    # A default from a factory is made for each node, not shared.
    assert built[0].whitespace_after_func is not cst.Call(cst.Name("f")).whitespace_after_func


def test_the_installed_libcst_validates_nothing_but_what_the_parse_guarantees():
    # If a libcst release gives `__post_init__` other work, the engine parses with it on: this says so.
    assert parsing.SKIPS_VALIDATION


def test_a_post_init_that_does_more_than_validate_is_kept():
    def post_init(self):
        self._validate()
        self.cache = {}

    assert not parsing._only_validates(post_init)


@pytest.mark.parametrize("text", ["x = 1\n", "def f(:\n"])
def test_nodes_built_after_a_parse_are_validated_again(text):
    try:
        parsing.parse_module(text)
    except cst.ParserSyntaxError:
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")


def test_a_syntax_error_is_libcsts():
    with pytest.raises(cst.ParserSyntaxError):
        parsing.parse_module("def f(:\n")


def counting_parses(monkeypatch):
    parsed = []
    real = parsing.parse_module
    monkeypatch.setattr(parsing, "parse_module", lambda text: parsed.append(text) or real(text))
    return parsed


def test_a_file_linted_and_read_through_an_import_is_parsed_once(monkeypatch, tmp_path):
    from conftest import make_config
    from torchlint.engine.parallel import lint_files

    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x.softmax(1)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch.nn as nn\nfrom model import Net\n\nmodel = Net()\nloss = nn.CrossEntropyLoss()(model(x), y)\n"
    )
    monkeypatch.chdir(tmp_path)  # names are reported relative to the working folder, as the command line gives them
    monkeypatch.setattr(parsing, "TREES", parsing.ParsedTrees())
    parsed = counting_parses(monkeypatch)
    files = [(name, name) for name in ("train.py", "model.py")]
    results = lint_files(files, make_config(), jobs=1)
    assert [finding.code for finding in results[0].findings] == ["TL401"]  # model.py was read through the import
    assert sorted(parsed) == sorted((tmp_path / name).read_text() for name in ("train.py", "model.py"))


def test_a_file_read_through_an_import_is_not_parsed_again_when_the_budget_let_its_tree_go(monkeypatch, tmp_path):
    """The project index keeps the modules it read for imports whatever the trees' budget (`parsing.ELSEWHERE`): a
    file it read is linted with that tree, not parsed a second time."""
    from conftest import make_config
    from torchlint.engine.parallel import lint_files

    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x.softmax(1)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch.nn as nn\nfrom model import Net\n\nmodel = Net()\nloss = nn.CrossEntropyLoss()(model(x), y)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(parsing, "TREES", parsing.ParsedTrees(budget=1))  # keeps no tree of its own
    parsed = counting_parses(monkeypatch)
    results = lint_files([(name, name) for name in ("train.py", "model.py")], make_config(), jobs=1)
    assert [finding.code for finding in results[0].findings] == ["TL401"]  # model.py was read through the import
    assert sorted(parsed) == sorted((tmp_path / name).read_text() for name in ("train.py", "model.py"))


def test_a_kept_tree_serves_only_the_same_text(monkeypatch, tmp_path):
    trees = parsing.ParsedTrees()
    parsed = counting_parses(monkeypatch)
    path = str(tmp_path / "a.py")
    first = trees.parse(path, "x = 1\n")
    assert trees.parse(path, "x = 1\n") is first
    assert trees.parse(path, "x = 2\n") is not first
    assert len(parsed) == 2
    # A text of no file is never kept.
    assert trees.parse(None, "x = 1\n") is not first


def test_trees_are_kept_within_their_budget_least_recently_used_first(tmp_path):
    trees = parsing.ParsedTrees(budget=20)
    texts = {name: f"{name} = 1\n" for name in ("aaa", "bbb", "ccc")}  # 8 characters each
    kept = {name: trees.parse(str(tmp_path / f"{name}.py"), text) for name, text in texts.items()}
    assert trees.parse(str(tmp_path / "aaa.py"), texts["aaa"]) is not kept["aaa"]  # dropped for ccc
    assert trees.parse(str(tmp_path / "ccc.py"), texts["ccc"]) is kept["ccc"]
    assert trees.parse(str(tmp_path / "big.py"), "x = 1\n" * 10) is not trees.parse(str(tmp_path / "big.py"), "x = 1\n" * 10)


MANY = parsing._MANY_LINKS


@pytest.mark.parametrize("text, expected", [
    pytest.param("x = " + "(" * 100 + "1" + ")" * 100 + "\n", False, id="100 nested brackets"),
    pytest.param("x = " + "(" * 101 + "1" + ")" * 101 + "\n", True, id="101 nested brackets"),
    pytest.param("x = " + "[" * 101 + "\n" + "]" * 101 + "\n", True, id="brackets nested over two lines"),
    pytest.param("y = (x" + "\n + x" * MANY + ")\n", True, id="one logical line over many physical lines"),
    pytest.param("y = (x" + "\r\n + x" * MANY + ")\r\n", True, id="the same with CRLF line breaks"),
    pytest.param("y = (x" + "\r + x" * MANY + ")\r", True, id="the same with CR line breaks"),
    pytest.param("y = x" + " \\\n + x" * MANY + "\n", True, id="a logical line continued by backslashes"),
    pytest.param("y = x + x\n" * MANY, False, id="as many links, one statement a line"),
    pytest.param("y = x + x\r" * MANY, False, id="one statement a line, CR line breaks only"),
    pytest.param("é = x" + ".é" * MANY + "\n", True, id="links between non-ASCII names"),
    pytest.param("s = '('\ndef f():\n" + "    y = x + x\n" * MANY, False, id="an unclosed bracket ended by a def"),
    pytest.param("s = '('\n" + "x = a + b\n" * MANY, True, id="an unclosed bracket, no def: one logical line"),
])
def test_the_look_for_deep_nesting(text, expected):
    """`may_be_nested_too_deeply` is a guess that may only err high: these are the shapes it must tell."""
    assert parsing.may_be_nested_too_deeply(text) is expected
