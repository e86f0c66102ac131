"""Code for fixes that rebuild a node: its code where it stands (with the indentation of the blocks around it) and a
call with keyword arguments added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


def code_in_place(ctx: "FileContext", node: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> str:
    """The code of `node` (a rebuilt one too) for an edit where `stack` points. `ctx.code` writes continuation
    lines without the indentation of the blocks around them (`torch.zeros(\n    n,\n)` in a loop body loses
    it); libcst adds it from the blocks being generated, given here as the engine's positions do."""
    module = ctx.module
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = [
        module.default_indent if block.indent is None else block.indent for block in stack if type(block) is cst.IndentedBlock
    ]
    node._codegen(state)
    return "".join(state.tokens)


def with_keywords(call: cst.Call, keywords: Sequence[Tuple[str, cst.BaseExpression]]) -> cst.Call:
    """`call` with `name=value` keyword arguments appended, keeping a trailing-comma layout."""
    args = list(call.args)
    trailing = args[-1].comma if args and isinstance(args[-1].comma, cst.Comma) else None
    if trailing is not None:
        # `f(\n    a,\n)`: new arguments go on their own lines, the last one keeps the trailing comma.
        inner = args[-2].comma if len(args) >= 2 else cst.Comma(whitespace_after=call.whitespace_before_args)
        args[-1] = args[-1].with_changes(comma=inner)
        commas = [inner] * (len(keywords) - 1) + [trailing]
    else:
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if args:
            args[-1] = args[-1].with_changes(comma=space)
        commas = [space] * (len(keywords) - 1) + [cst.MaybeSentinel.DEFAULT]
    no_space = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    for (name, value), comma in zip(keywords, commas):
        args.append(cst.Arg(value=value, keyword=cst.Name(name), equal=no_space, comma=comma))
    return call.with_changes(args=args)
