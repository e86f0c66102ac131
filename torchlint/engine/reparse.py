"""Parse an edited text by reparsing only the top-level statements the edit touched.

An editor lints the same file after every edit, and `--fix` lints it again after each
round of fixes; most of the text is what the previous parse read. libcst has no
incremental parser, but a module is a sequence of top-level statements, and where one
ends Python's tokenizer is back where it started: no bracket or string open, at column
0. So the statements the edit touched are parsed alone and put between the old tree's
untouched statements.

Alone is not quite alone: libcst decides some things from context, and each is checked
so that the spliced tree is the one a full parse gives (tests/test_reparse.py compares
them on edited fixtures), and a full parse is used whenever a check fails:

- the module's indentation and line ending, which libcst reads from the first indented
  block and the first line: the edit must come after both, and the touched statements
  are parsed after a `def` block in those, which sets them the same way;
- comment lines: after a block, libcst gives those indented further than the next
  statement to the block, the others to the next statement as its leading lines. The
  `def` before the touched statements must keep only its own text (an indented
  comment at the start of the edit would have gone to the block before it), and a
  statement after them holding the next untouched statement's leading lines must keep
  them all (a block the edit ends with would have taken the indented ones);
- the first statement, whose comments libcst counts as the module's header, and the
  last, followed by the module's footer, are never reparsed alone;
- a clause such as `else:` at the start of the edit would belong to the statement before
  it: after a `def` it does not parse, and the full parse decides;
- a comment or blank line indented deeper than the touched statements, at the start of
  the edit, may belong to a block that ends before it, indented otherwise than that
  `def`: the full parse decides.

An edit inside one top-level class or function (a long training script's edits fall in
the methods of a class of a hundred lines) goes one block down the same way: the
statements of its body that the edit touched are parsed alone, in a class after a `def`
and before a `pass` at the body's indentation, with the same checks; neither the body's
first statement nor its last is reparsed, so the block's own header and footer stay.
Where the statements of that body lie is worked out by the first edit inside it and
handed on to the next, as the position pass's maps of parents are.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState

from torchlint.source import split_lines

# Where a module's top-level statements lie in its text: where the first starts (after the header's comments), and
# where each ends (where the next starts, with its leading comments and blank lines).
Layout = Tuple[int, List[int]]
# The statement kinds whose body may be an indented block: the first such block sets the module's indentation.
# id of a top-level statement -> (the statement, id of each node in it -> its parent node, None for the statement): the
# position pass's map for reports made after the walk (engine/positions.py), kept with the tree for the next edit.
StatementParents = Dict[int, Tuple[cst.CSTNode, Dict[int, Optional[cst.CSTNode]]]]
_BLOCK_HOLDERS = (cst.FunctionDef, cst.ClassDef, cst.If, cst.For, cst.While, cst.With, cst.Try, cst.TryStar, cst.Match)


@dataclass
class Parsed:
    """A text and its tree, with where its top-level statements lie once an edit has needed it."""

    text: str
    module: cst.Module
    # (where the first statement starts, where each statement ends) as offsets in `text`, or None when the
    # statements' code does not add up to the text (no newline at its end): then every edit is parsed in full.
    _layout: Optional[Layout] = field(default=None, repr=False)
    _laid_out: bool = field(default=False, repr=False)
    # Filled by the position pass of a lint of this tree; an edit's reparse hands on the untouched statements' maps.
    statement_parents: StatementParents = field(default_factory=dict, repr=False)
    # id of a top-level class or function -> (it, where each statement of its body ends, as offsets from where the
    # top-level statement starts): worked out by the first edit inside it, handed on to the next.
    body_layouts: Dict[int, Tuple[cst.CSTNode, List[int]]] = field(default_factory=dict, repr=False)

    def layout(self) -> Optional[Layout]:
        """The layout, worked out on first need (it costs a code generation of every statement)."""
        if not self._laid_out:
            self._layout, self._laid_out = _layout(self.text, self.module), True
        return self._layout

    def known_layout(self) -> Optional[Layout]:
        """The layout when it has been worked out, without working it out."""
        return self._layout


def reparsed(old: Parsed, text: str, parse: Callable[[str], cst.Module]) -> Optional[Parsed]:
    """`text` parsed by reparsing only the statements of `old` that differ, with `parse`; None when that cannot be
    done safely (the caller then parses the whole text)."""
    module = old.module
    body = module.body
    layout = old.layout() if len(body) >= 3 else None
    if layout is None:
        return None
    first_start, ends = layout
    start = _common_prefix(old.text, text)
    unchanged_after = _common_suffix(old.text, text, min(len(old.text), len(text)) - start)
    old_end = len(old.text) - unchanged_after
    first = bisect_right(ends, start)
    last = max(first, bisect_left(ends, old_end))
    if first == last and 0 < first < len(body) - 1:
        inside = _reparsed_inside(old, text, first, start, old_end, parse)
        if inside is not None:
            return inside
    if first <= _first_block(module) or last >= len(body) - 1:
        return None
    region_start = ends[first - 1]
    delta = len(text) - len(old.text)
    region = text[region_start: ends[last] + delta]
    newline, indent = module.default_newline, module.default_indent
    head = f"def _():{newline}{indent}pass{newline}"
    following = "".join(module.code_for_node(line) for line in body[last + 1].leading_lines)
    tail = f"{following}pass{newline}"
    try:
        alone = parse(head + region + tail)
    except (cst.ParserSyntaxError, RecursionError):
        return None
    statements = alone.body
    if (
        alone.header or alone.footer or len(statements) < 2
        or alone.default_indent != indent or alone.default_newline != newline
        or alone.code_for_node(statements[0]) != head or alone.code_for_node(statements[-1]) != tail
    ):
        return None
    touched = statements[1:-1]
    if touched and _may_belong_before(region, touched[0], ""):
        return None
    # The first and last statements own the text around the region: the touched statements own the region. Where
    # all but the last end is where their code, as generated, is the region's text (libcst gives back most text it
    # parsed, not all: a backslash alone on a line after a block comes back as indentation); the last one ends with the
    # region, and its code is not generated (the common edit touches one statement, often a whole class, whose code
    # generation would cost a third of the parse).
    lengths = _leading_lengths(region, [alone.code_for_node(statement) for statement in touched[:-1]])
    if lengths is None:
        return None
    new_ends = ends[:first]
    offset = region_start
    for length in lengths:
        offset += length
        new_ends.append(offset)
    new_ends += [end + delta for end in ends[last + 1:]]
    spliced = module.with_changes(body=(*body[:first], *touched, *body[last + 1:]))
    untouched = (*body[:first], *body[last + 1:])
    return Parsed(text, spliced, (first_start, new_ends), True, *_handed_on(old, untouched))


def _handed_on(old: Parsed, untouched: Tuple[cst.CSTNode, ...]) -> Tuple[StatementParents, Dict[int, Tuple[cst.CSTNode, List[int]]]]:
    """What `old` worked out about the top-level statements an edit left as they were."""
    kept = [id(statement) for statement in untouched]
    parents, layouts = old.statement_parents, old.body_layouts
    return (
        {key: parents[key] for key in kept if key in parents},
        {key: layouts[key] for key in kept if key in layouts},
    )


def _reparsed_inside(old: Parsed, text: str, index: int, start: int, old_end: int, parse: Callable[[str], cst.Module]) -> Optional[Parsed]:
    """`text` parsed by reparsing only the statements of the body of `old`'s top-level class or function `index`
    that the edit from `start` to `old_end` (offsets in `old.text`) touched; None when that cannot be done safely.

    The same reasoning as for top-level statements, one block down: the body's statements are parsed alone in a
    class, after a `def` and before a `pass` at the body's indentation (the module's, as `IndentedBlock.indent` is
    None), and neither the body's first statement nor its last one is reparsed (the block's own header and footer
    stay as they were). A long training script's edits fall in the methods of a class of a hundred lines: this
    parses the method, not the class."""
    module = old.module
    top = module.body[index]
    block = getattr(top, "body", None)
    if type(top) not in (cst.ClassDef, cst.FunctionDef) or type(block) is not cst.IndentedBlock or block.indent is not None:
        return None
    first_start, ends = old.known_layout()
    top_start = ends[index - 1]
    inner_ends = _body_layout(old, index)
    if inner_ends is None:
        return None
    first = bisect_right(inner_ends, start - top_start)
    last = max(first, bisect_left(inner_ends, old_end - top_start))
    inner = block.body
    if first < 1 or last >= len(inner) - 1:
        return None
    newline, indent = module.default_newline, module.default_indent
    delta = len(text) - len(old.text)
    region = text[top_start + inner_ends[first - 1]: top_start + inner_ends[last] + delta]
    head = f"{indent}def _():{newline}{indent}{indent}pass{newline}"
    following = "".join(_code_in_block(line, module) for line in inner[last + 1].leading_lines)
    tail = f"{following}{indent}pass{newline}"
    opening = f"class _:{newline}"
    try:
        alone = parse(opening + head + region + tail)
    except (cst.ParserSyntaxError, RecursionError):
        return None
    if (
        alone.header or alone.footer or len(alone.body) != 1 or type(alone.body[0]) is not cst.ClassDef
        or alone.default_indent != indent or alone.default_newline != newline
    ):
        return None
    holder = alone.body[0]
    if type(holder.body) is not cst.IndentedBlock or holder.body.indent is not None or holder.body.footer:
        return None
    statements = holder.body.body
    if len(statements) < 3:
        return None
    # libcst gives back the text it parsed: with the class's own text, its first and last statements' as written,
    # the statements between them are the region.
    skeleton = holder.with_changes(body=holder.body.with_changes(body=(statements[0], statements[-1])))
    if alone.code_for_node(skeleton) != opening + head + tail:
        return None
    touched = statements[1:-1]
    if _may_belong_before(region, touched[0], indent):
        return None
    lengths = _leading_lengths(region, [_code_in_block(statement, module) for statement in touched[:-1]])
    if lengths is None:
        return None
    new_inner_ends = inner_ends[:first]
    offset = inner_ends[first - 1]
    for length in lengths:
        offset += length
        new_inner_ends.append(offset)
    new_inner_ends += [end + delta for end in inner_ends[last + 1:]]
    new_top = top.with_changes(body=block.with_changes(body=(*inner[:first], *touched, *inner[last + 1:])))
    body = module.body
    spliced = module.with_changes(body=(*body[:index], new_top, *body[index + 1:]))
    new_ends = ends[:index] + [end + delta for end in ends[index:]]
    parents, layouts = _handed_on(old, (*body[:index], *body[index + 1:]))
    layouts[id(new_top)] = (new_top, new_inner_ends)
    return Parsed(text, spliced, (first_start, new_ends), True, parents, layouts)


def _may_belong_before(region: str, statement: cst.CSTNode, indent: str) -> bool:
    """Some comment or blank line at the start of `region`, above its first statement `statement` (at `indent`), is
    indented deeper: in the file, a block that ends just before the region may own it, which a parse of the region
    alone cannot tell. libcst gives a block's footer the lines after it up to the last one that starts with the
    block's own indentation, and the blocks before the region may be indented otherwise than the `def` put before it
    (`def g():` with a body indented two spaces, in a module indented by four)."""
    for line in split_lines(region)[:len(statement.leading_lines)]:
        if line.startswith(indent) and line[len(indent):len(indent) + 1] in (" ", "\t", "\f"):
            return True
    return False


def _body_layout(old: Parsed, index: int) -> Optional[List[int]]:
    """Where each statement of the body of `old`'s top-level statement `index` ends, as offsets from where that
    statement starts; None when its code does not add up to its text."""
    top = old.module.body[index]
    kept = old.body_layouts.get(id(top))
    if kept is not None and kept[0] is top:
        return kept[1]
    _, ends = old.known_layout()
    top_start, top_end = ends[index - 1], ends[index]
    codes = [_code_in_block(statement, old.module) for statement in top.body.body]
    footer = "".join(_code_in_block(line, old.module) for line in top.body.footer)
    body_start = top_end - top_start - sum(map(len, codes)) - len(footer)
    if body_start < 0 or old.text[top_start + body_start: top_end] != "".join(codes) + footer:
        return None
    inner_ends = []
    offset = body_start
    for code in codes:
        offset += len(code)
        inner_ends.append(offset)
    old.body_layouts[id(top)] = (top, inner_ends)
    return inner_ends


def _code_in_block(node: cst.CSTNode, module: cst.Module) -> str:
    """The code of `node` (a statement or a comment line) in a block of the module's indentation, one level deep."""
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.increase_indent(module.default_indent)
    node._codegen(state)
    return "".join(state.tokens)


def _leading_lengths(region: str, codes: List[str]) -> Optional[List[int]]:
    """The lengths of the statements that fill `region`: those of `codes` (all but the last statement's), and what
    they leave of it; None when their code is not the region's text or leaves nothing for the last."""
    lengths = [len(code) for code in codes]
    used = sum(lengths)
    if used >= len(region) or (codes and region[:used] != "".join(codes)):
        return None
    return lengths + [len(region) - used]


def _layout(text: str, module: cst.Module) -> Optional[Layout]:
    # Each statement's code must be its text, not only add up to its length: libcst gives back most text it parsed,
    # not all (a backslash alone on a line after a block comes back as indentation), and a region cut where the code's
    # lengths say would not be the statements' text.
    header = "".join(module.code_for_node(line) for line in module.header)
    codes = [module.code_for_node(statement) for statement in module.body]
    footer = "".join(module.code_for_node(line) for line in module.footer)
    if header + "".join(codes) + footer != text:
        return None
    ends = []
    offset = len(header)
    for code in codes:
        offset += len(code)
        ends.append(offset)
    return len(header), ends


def _first_block(module: cst.Module) -> int:
    """The index of the first top-level statement holding an indented block (len(body) when none does)."""
    for index, statement in enumerate(module.body):
        if isinstance(statement, _BLOCK_HOLDERS) and _holds_block(statement):
            return index
    return len(module.body)


def _holds_block(statement: cst.BaseCompoundStatement) -> bool:
    # A one-line `if x: y` holds no indented block, but its `else:` part may.
    node: Optional[cst.CSTNode] = statement
    while node is not None:
        if isinstance(getattr(node, "body", None), cst.IndentedBlock):
            return True
        node = getattr(node, "orelse", None)
    handlers = getattr(statement, "handlers", ())
    final = getattr(statement, "finalbody", None)
    return any(isinstance(part.body, cst.IndentedBlock) for part in (*handlers, *([final] if final else [])))


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix, by halving (string comparisons run in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix(a: str, b: str, limit: int) -> int:
    """The length of the longest common suffix, at most `limit`."""
    low, high = 0, max(limit, 0)
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle: len(a) - low] == b[len(b) - middle: len(b) - low]:
            low = middle
        else:
            high = middle - 1
    return low
