"""Positions computed statement by statement equal libcst's own, whole-module ones, node for node."""

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from conftest import FIXTURES
from torchlint.engine.positions import Positions
from torchlint.engine.reparse import Parsed
from torchlint.engine.walk import walk

TRICKY = {
    "decorators and comments": "import torch\n\n# about f\n@a\n# between\n@b(1)\n\ndef f():\n    return 1\n",
    "header comment": "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\n\nimport torch\nx = 1\n",
    "semicolons": "a = 1; b = 2\nc = torch.zeros(3); d = c.cuda()\n",
    "crlf": "import torch\r\nx = torch.zeros(2)\r\n\r\ny = x.cuda()\r\n",
    "cr only": "import torch\rx = torch.zeros(2)\ry = x.cuda()\r",
    "mixed endings": "import torch\r\nx = 1\ny = x.cuda()\r\n",
    "form feed": "import torch\n\x0c\nx = torch.zeros(2)\n",
    "backslash": "x = \\\n    torch.zeros(2)\ny = (x\n     .cuda())\n",
    "unicode": "é = 'ü'\nx = torch.zeros(2).cuda()  # ß\n",
    "no final newline": "import torch\nx = torch.zeros(2)",
    "tabs": "if x:\n\ty = 1\n\tz = y.cuda()\n",
    "class": "class A(nn.Module):\n    '''doc'''\n\n    @property\n    def f(self):\n        return self.x.cuda()\n",
    "empty": "",
    "only comments": "# nothing\n",
    "trailing comments": "x = 1\n# end\n\n",
    "async": "async def f():\n    async with a as b:\n        await b\n",
}


def assert_same_positions(text: str, expect_whole_module_pass: bool = False, with_layout: bool = False) -> int:
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    # With the layout a reparse keeps (engine/reparse.py), Python's parser reads one top-level statement at a time.
    layout = Parsed(text, module).layout() if with_layout else None
    stack, visited = [], []

    def on_visit(node):
        stack.append(node)
        if node is not module:  # the module itself is in no statement: it takes the whole-module pass
            visited.append((node, list(stack)))
        return True

    walk(module, on_visit, lambda node: stack.pop())
    # Deepest first, so that statements in classes and functions are generated before those holding them.
    positions = Positions(module, text, layout)
    for node, node_stack in sorted(visited, key=lambda pair: -len(pair[1])):
        assert positions.range_of(node, node_stack) == expected[node], module.code_for_node(node)
    assert positions._whole is expect_whole_module_pass
    # With a layout, the whole file is never handed to Python's parser.
    assert not (layout is not None and positions._read_file)
    return len(visited)


@pytest.mark.parametrize("with_layout", [False, True], ids=["file", "layout"])
@pytest.mark.parametrize("name", sorted(TRICKY))
def test_tricky_texts(name, with_layout):
    assert_same_positions(TRICKY[name], with_layout=with_layout)


@pytest.mark.parametrize("with_layout", [False, True], ids=["file", "layout"])
def test_every_fixture(with_layout):
    checked = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            cst.parse_module(text)
        except cst.ParserSyntaxError:
            continue  # the TL000 fixtures
        checked += assert_same_positions(text, with_layout=with_layout)
    assert checked > 10000


def test_a_node_asked_for_without_its_statement_is_found():
    text = "import torch\nx = 1\ny = torch.zeros(2).cuda()\n"
    module = cst.parse_module(text)
    call = module.body[2].body[0].value
    assert Positions(module, text).range_of(call, [module, module.body[0]]).start.line == 3


def test_when_python_refuses_the_text_the_whole_module_is_done(monkeypatch):
    def refuse(text):
        raise SyntaxError("refused")

    monkeypatch.setattr("torchlint.engine.positions.ast.parse", refuse)
    assert assert_same_positions(TRICKY["decorators and comments"], expect_whole_module_pass=True) > 0


def test_a_statement_whose_code_is_not_at_its_line_is_not_trusted():
    # The statement's generated code differs from the text at the line Python gives for it, so the whole
    # module's positions are used instead.
    text = "import torch\nx = torch.zeros(2)\ny = x.cuda()\n"
    module = cst.parse_module(text)
    call = module.body[2].body[0].value
    positions = Positions(module, text.replace("x.cuda()", "x.cpu()"))
    assert positions.range_of(call, [module, module.body[2]]).start.line == 3
    assert positions._whole


def test_only_the_innermost_statement_of_a_method_is_generated():
    text = "import torch\n\nclass A:\n    x = 1\n\n    @property\n    def f(self):\n        # c\n        y = 2\n        return self.x.cuda()\n"
    module = cst.parse_module(text)
    cls = module.body[1]
    method = cls.body.body[1]
    statement = method.body.body[1]
    call = statement.body[0].value
    positions = Positions(module, text)
    code_range = positions.range_of(call, [module, cls, cls.body, method, method.body, statement, statement.body[0]])
    assert (code_range.start.line, code_range.start.column, code_range.end.column) == (10, 15, 28)
    assert cls not in positions._ranges and method not in positions._ranges and statement in positions._ranges


def test_only_the_innermost_statement_of_nested_blocks_is_generated(monkeypatch):
    text = (
        "def f(x):\n    for i in range(3):\n        if i:\n            pass\n        elif x:\n            y = 1\n"
        "        else:\n            try:\n                z = 2\n            except E:\n                q = 3\n"
        "            finally:\n                r = 4\n    return x\n"
    )
    module = cst.parse_module(text)
    stack, targets = [], []

    def on_visit(node):
        stack.append(node)
        if type(node) is cst.Name and node.value in ("y", "z", "q", "r"):
            targets.append((node, list(stack)))
        return True

    walk(module, on_visit, lambda node: stack.pop())
    generated = []
    original = Positions._generate
    monkeypatch.setattr(Positions, "_generate", lambda self, statement, indents, top: generated.append(self.module.code_for_node(statement).strip()) or original(self, statement, indents, top))
    rows = [Positions(module, text).range_of(node, node_stack).start.line for node, node_stack in targets]
    assert rows == [6, 9, 11, 13]
    assert generated == ["y = 1", "z = 2", "q = 3", "r = 4"]


def test_a_node_asked_for_without_any_enclosing_node_is_found_without_the_whole_module():
    # Reports made in `finish()`, after the walk, come without a stack.
    text = "import torch\n\n\ndef f():\n    for x in y:\n        z = x.cuda()\n    return z\n"
    module = cst.parse_module(text)
    call = module.body[1].body.body[0].body.body[0].body[0].value
    positions = Positions(module, text)
    assert positions.range_of(call, ()).start.line == 6
    assert positions._whole is False
