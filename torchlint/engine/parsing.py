"""libcst's parse, without re-validating every node the native parser builds.

`libcst.parse_module` runs libcst's native (Rust) parser, which builds the tree by
calling each node class; every node's `__post_init__` then runs `_validate`, which
checks the constructor's invariants (parentheses balanced, whitespace well-formed,
names not empty). A tree the parser built from source already satisfies them: the
checks are there for trees built by hand, and libcst's own source notes the cost
("avoid validating the tree when parsing a file"). They are 12-18% of the parse on
the benchmark sample (docs/performance.md), so the engine parses with them off.

The trees are the same: tests/test_parsing.py compares them with libcst's own parse
(`deep_equals`) on every fixture and example. Validation is off only inside
`parse_module` below (torchlint does not parse on other threads), and only while
`CSTNode.__post_init__` does nothing but validate, which is checked once against
the installed libcst: a libcst whose `__post_init__` does more is left alone.
The switch is a flag read by a `__post_init__` installed once, when this module is
imported, that validates unless a parse is under way: assigning `__post_init__`
around every parse instead changed a class that some 250 node classes derive from,
which makes Python drop what it had cached about their attributes, every file.

The node constructors are replaced too, once, by ones that store each field through
its slot instead of `object.__setattr__` and skip `__post_init__` during a parse
(`_plain_constructor`): a tenth of the parse on the benchmark sample. Their
signatures, defaults and stores are libcst's; tests/test_parsing.py compares trees
and hand-built nodes with those libcst's own constructors build.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re
import sys
import threading
import types
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import libcst as cst
from libcst._nodes.base import CSTNode

from torchlint.engine.walk import NODE_TYPES
from torchlint.engine.reparse import Parsed, reparsed

_VALIDATING_INIT = CSTNode.__dict__.get("__post_init__")


def _only_validates(post_init) -> bool:
    code = getattr(post_init, "__code__", None)
    return code is not None and code.co_names == ("_validate",)


SKIPS_VALIDATION = _only_validates(_VALIDATING_INIT)


_parsing = False


def _validate_unless_parsing(self) -> None:
    if not _parsing:
        self._validate()


if SKIPS_VALIDATION:
    CSTNode.__post_init__ = _validate_unless_parsing


# libcst's own constructor of each node class whose constructor `_install_constructors` replaced (tests compare them).
LIBCST_CONSTRUCTORS: Dict[type, Callable] = {}
_VARIADIC = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
# A constructor's shape: how many fields are positional, how many keyword-only, and which have a default factory.
_Shape = Tuple[int, int, Tuple[int, ...]]


class _Constructor(NamedTuple):
    shape: _Shape
    fields: Tuple[str, ...]
    # What the constructor's code refers to, by name: each field's slot setter, factory and "not given" sentinel.
    uses: Dict[str, object]


def _plain_constructor(node_type: type) -> Optional[_Constructor]:
    """What a faster constructor for `node_type` needs; None when libcst's is not the plain one `dataclasses` writes.

    That one stores each field with `object.__setattr__(self, "name", value)` (a frozen class refuses
    `self.name = value`), a call that looks the name up on the class at every store, then calls `__post_init__`.
    The parser calls a constructor for every node, half a million on the benchmark sample: storing through each
    field's slot directly, and leaving out `__post_init__` while a parse is under way (`_validate_unless_parsing`
    would return at once), takes a tenth off the parse. The signature, the defaults and the order of the stores
    stay libcst's, and so does validation of a node built by hand.
    """
    init = node_type.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    if code is None or code.co_flags & _VARIADIC or not dataclasses.is_dataclass(node_type):
        return None
    if node_type.__post_init__ is not _validate_unless_parsing:
        return None  # a class with a `__post_init__` of its own: not only a check
    fields = dataclasses.fields(node_type)
    positional = code.co_varnames[1:code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    if [field.name for field in fields] != [*positional, *keyword_only]:
        return None
    defaults = dict(zip(reversed(positional), reversed(init.__defaults__ or ())))
    defaults.update(init.__kwdefaults__ or {})
    uses: Dict[str, object] = {}
    factories = []
    for index, field in enumerate(fields):
        slot = next((klass.__dict__[field.name] for klass in node_type.__mro__ if field.name in klass.__dict__), None)
        if type(slot) is not types.MemberDescriptorType:
            return None
        uses[f"_store_{index}"] = slot.__set__
        if field.default_factory is not dataclasses.MISSING:
            # `dataclasses` marks "not given" with a sentinel default and calls the factory in the constructor.
            uses[f"_factory_{index}"] = field.default_factory
            uses[f"_not_given_{index}"] = defaults.get(field.name)
            factories.append(index)
    return _Constructor((len(positional), len(keyword_only), tuple(factories)), positional + keyword_only, uses)


def _template_source(name: str, shape: _Shape) -> str:
    """A function `name` whose one constant is the code of a constructor of `shape`, its fields named `field_0`, ...:
    each class renames them (one template per shape, all compiled at once, is a fifth of the cost of compiling a
    constructor per class)."""
    positional, keyword_only, factories = shape
    fields = [f"field_{index}" for index in range(positional + keyword_only)]
    signature = ", ".join(["self", *fields[:positional], *(["*", *fields[positional:]] if keyword_only else [])])
    uses = []
    stores = []
    for index, field in enumerate(fields):
        uses.append(f"_store_{index}")
        value = field
        if index in factories:
            uses += [f"_factory_{index}", f"_not_given_{index}"]
            value = f"_factory_{index}() if {field} is _not_given_{index} else {field}"
        stores.append(f"        _store_{index}(self, {value})\n")
    return (
        f"def {name}({', '.join(uses)}):\n    def __init__({signature}):\n{''.join(stores)}"
        "        if not _parsing:\n            self.__post_init__()\n    return __init__\n"
    )


def _install_constructors() -> None:
    """Give libcst's node classes the constructors `_plain_constructor` describes."""
    constructors = {node_type: _plain_constructor(node_type) for node_type in NODE_TYPES}
    constructors = {node_type: found for node_type, found in constructors.items() if found is not None}
    shapes = {constructor.shape: f"_template_{index}" for index, constructor in enumerate(constructors.values())}
    compiled = compile("".join(_template_source(name, shape) for shape, name in shapes.items()), "<torchlint constructors>", "exec")
    templates: Dict[str, types.CodeType] = {}
    for made in compiled.co_consts:
        if type(made) is types.CodeType:
            templates[made.co_name] = next(const for const in made.co_consts if type(const) is types.CodeType)
    for node_type, constructor in constructors.items():
        template = templates[shapes[constructor.shape]]
        code = template.replace(co_varnames=("self", *constructor.fields) + template.co_varnames[len(constructor.fields) + 1:])
        closure = tuple(types.CellType(constructor.uses[name]) for name in code.co_freevars)
        libcsts = node_type.__init__
        init = types.FunctionType(code, globals(), "__init__", libcsts.__defaults__, closure)
        init.__kwdefaults__, init.__annotations__ = libcsts.__kwdefaults__, libcsts.__annotations__
        init.__qualname__, init.__doc__ = libcsts.__qualname__, libcsts.__doc__
        LIBCST_CONSTRUCTORS[node_type] = libcsts
        node_type.__init__ = init


if SKIPS_VALIDATION:
    _install_constructors()


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module(text)`, the same tree, built without re-checking what the parser guarantees; Refused for
    text that parser would crash on or take minutes over (`check_parseable`)."""
    global _parsing
    check_parseable(text)
    if not SKIPS_VALIDATION:
        return cst.parse_module(text)
    try:
        # Set inside the `try`: a file's time budget may stop the parse at any step (engine/budget.py).
        _parsing = True
        return cst.parse_module(text)
    finally:
        _parsing = False


# The look is made on the text's UTF-8 bytes, a physical line at a time: `bytes.translate` keeps a line's brackets
# at C speed, where a regular expression stepping from bracket to bracket cost about 5% of a whole run's instructions.
_NOT_BRACKETS_OR_BREAKS = bytes(byte for byte in range(256) if byte not in b"()[]{}\n")
_NOT_OPENERS = bytes(byte for byte in range(256) if byte not in b"([{")
# A line break ends a logical line unless brackets are open (one after a backslash never does), and ends it whatever
# the brackets seem to say when a `def` or `class` starts the next line: those never stand inside brackets, and a
# bracket in a string (`"("`) would otherwise make the rest of the file one logical line.
_DEFINITION = re.compile(rb"(?:async[ \t]+)?(?:def|class)\b")
_DEFINITION_STARTS = (b"d", b"c", b"a")
_SAFE_BRACKETS = 100
# What may add a level to an expression (a `.` before a digit is a number's), and how many on one logical line make
# it worth a look: the levels of an expression are its links, its brackets (at most `_SAFE_BRACKETS`) and the
# statements around it (Python allows 100 indented blocks).
# (On bytes: a character outside ASCII is never a link nor part of a word, so a byte count is never lower.)
_LINKS = re.compile(rb"[-+*/%@&|^<>~\[(]|\.(?!\d)|\b(?:and|or|not|if|lambda|await)\b")
# How deep an expression may nest for libcst's parser: its time grows with the cube of a chain's length in the
# worst shapes (`x[0][0]...`: 800 links 2.6 s, 1,600 links 12 s, 2,800 links 156 s; `a if b else ...` half that)
# and it crashes the process on about 10,000 (`a and a and ...`, which Python's own compiler takes). Code nested
# 1,000 deep is linted (`y.to(device)` 1,000 times is 2,000 levels: tests/test_faults.py); a subscript counts
# twice, so the slowest shape at this bound parses in about 12 s on the 2-core test machine.
MAX_DEPTH = 2100
_MANY_LINKS = MAX_DEPTH - 2 * _SAFE_BRACKETS
# The recursion limit a Python process starts with: `python file.py` compiles the file under it.
PYTHON_RECURSION_LIMIT = 1000


class Refused(Exception):
    """Text the engine does not hand libcst's parser, and why (a TL000 message, where the reason lies)."""

    def __init__(self, message: str, row: int = 1, column: int = 1):
        super().__init__(message)
        self.message = message
        self.row = row
        self.column = column


def check_parseable(text: str) -> None:
    """Raise Refused for text libcst's parser would crash on or take minutes over: what Python's compiler refuses,
    and what nests deeper than `MAX_DEPTH`. Only text that `may_be_nested_too_deeply` is compiled to tell."""
    if not may_be_nested_too_deeply(text):
        return
    try:
        with warnings.catch_warnings(), python_recursion_limit():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like: the file's own run shows them
            tree = compile(text, "<torchlint>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        raise Refused(f"SyntaxError: {error.msg}", error.lineno or 1, max(error.offset or 1, 1)) from None
    except (RecursionError, MemoryError) as error:
        reason = f" ({error})" if str(error) else ""
        raise Refused(f"the file is nested too deeply for Python to compile it{reason}") from None
    except ValueError as error:
        raise Refused(f"cannot parse: {error}") from None
    depth, where = deepest(tree)
    if depth > MAX_DEPTH:
        raise Refused(
            f"not linted: an expression in this statement nests {depth:,} levels deep, more than torchlint's parser takes ({MAX_DEPTH:,})",
            getattr(where, "lineno", 1), getattr(where, "col_offset", 0) + 1,
        )


def deepest(tree: ast.AST) -> Tuple[int, ast.AST]:
    """How deep `tree` nests as libcst builds it, a subscript counted twice (`MAX_DEPTH`), and the statement
    holding its deepest node: libcst nests `a and b and c` pairwise, where Python's tree holds one node with a
    list. Without recursion, which such a tree would exhaust."""
    found = (0, tree)
    stack = [(tree, 1, tree)]
    while stack:
        node, depth, statement = stack.pop()
        if isinstance(node, ast.stmt):
            statement = node
        if depth > found[0]:
            found = (depth, statement)
        if type(node) is ast.BoolOp:
            depth += len(node.values) - 1
        elif type(node) is ast.Subscript:
            depth += 1
        stack.extend((child, depth + 1, statement) for child in ast.iter_child_nodes(node))
    return found


def may_be_nested_too_deeply(text: str) -> bool:
    """A cheap look for code that may nest deeper than libcst's native parser takes (`check_parseable`).

    More than a hundred nested brackets, or a logical line with many links: each level of an expression that is
    not a bracket is written with a link (an operator, a `.`, a `[` or `(` after a value, `not`, `lambda`,
    `if`...) and all of them are on one logical line, which breaks over physical lines only inside brackets or
    after a backslash. Brackets in strings and comments make it a guess either way, and links count siblings
    too: a guess too high costs one parse with Python's compiler. A line's depth is counted as if its opening
    brackets came first (`f(a)(b)` counts 2), which can only guess higher.
    """
    data = text.encode("utf-8", "surrogatepass")
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    backslashes = b"\\\n" in data
    depth = deepest = 0
    start = offset = 0  # where the logical line starts, and the physical one
    continued = False
    for line, brackets in zip(data.split(b"\n"), data.translate(None, _NOT_BRACKETS_OR_BREAKS).split(b"\n")):
        if depth > 0 and not continued and line[:1] in _DEFINITION_STARTS and _DEFINITION.match(line):
            if _has_many_links(data, start, offset - 1):
                return True
            start, depth = offset, 0
        if brackets:
            opened = len(brackets.translate(None, _NOT_OPENERS))
            if depth + opened > deepest:
                deepest = depth + opened
            depth += 2 * opened - len(brackets)
        offset += len(line) + 1
        continued = backslashes and line.endswith(b"\\")
        if depth <= 0 and not continued:
            # (The length test of `_has_many_links` first, here: it fails for nearly every line, and a call a line
            # was a third of this look's time.)
            if offset - 1 - start >= _MANY_LINKS and _has_many_links(data, start, offset - 1):
                return True
            start, depth = offset, 0
    return deepest > _SAFE_BRACKETS or _has_many_links(data, start, len(data))


def _has_many_links(data: bytes, start: int, end: int) -> bool:
    # A link is at least a byte, so only a long line is searched for them.
    return end - start >= _MANY_LINKS and len(_LINKS.findall(data, start, end)) >= _MANY_LINKS


@contextmanager
def python_recursion_limit() -> Iterator[None]:
    """Python's compiler before 3.12 sizes its stack by the recursion limit, which the command line raises for the
    engine's own walk: a file is compiled under the limit `python file.py` runs it with. Not on other threads (the
    language server's lint thread): the limit is the process's, and the main thread may be deep in a call."""
    limit = sys.getrecursionlimit()
    lower = sys.version_info < (3, 12) and limit > PYTHON_RECURSION_LIMIT and threading.current_thread() is threading.main_thread()
    if lower:
        sys.setrecursionlimit(PYTHON_RECURSION_LIMIT)
    try:
        yield
    finally:
        if lower:
            sys.setrecursionlimit(limit)


def compiles(text: str) -> bool:
    """Python's compiler accepts `text`: a cheap stand-in for libcst's parse when only TL000 is at stake, and a safe
    first look at text that `may_be_nested_too_deeply`."""
    try:
        with warnings.catch_warnings(), python_recursion_limit():
            # Invalid escape sequences and the like warn at compile time; the file's own run would show them.
            warnings.simplefilter("ignore")
            compile(text, "<torchlint>", "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError: let the parser report it
        return False
    return True


class ParsedTrees:
    """The trees of the files this process parsed last, by file, so that each is parsed once per process.

    A file of a project is often both linted and read through another file's imports
    (`from model import Net`: analysis/project.py): the linter and the project index ask
    here, and the second gets the first's tree. A tree is kept for the same text only
    (compared in full: the editor lints text that is not on disk), and the trees of
    at most `budget` characters of source are kept, the least recently used going first:
    a tree takes about 25 bytes a character, so the default holds about 12 MB (on the
    benchmark sample, files import their neighbours: a budget of a tenth of the sample's
    source saves all but 2 of its 40 second parses).
    Trees are never changed by their users (libcst nodes are immutable).

    A file asked for with another text than its kept tree's (an editor's edit, a round of
    fixes) is parsed by reparsing only the top-level statements the change touched, where
    that gives the tree a full parse would (torchlint/engine/reparse.py).
    """

    def __init__(self, budget: int = 500_000):
        self.budget = budget
        self._trees: "OrderedDict[str, Parsed]" = OrderedDict()
        self._size = 0

    def parse(self, path: Optional[str], text: str) -> cst.Module:
        """`parse_module(text)` for the file at `path` (None: a text of no file), the kept tree when there is one."""
        if path is None:
            return parse_module(text)
        key = os.path.abspath(path)
        found = self._trees.get(key)
        if found is not None and found.text == text:
            self._trees.move_to_end(key)
            return found.module
        if found is None:
            for kept_elsewhere in ELSEWHERE:
                module = kept_elsewhere(key, text)
                if module is not None:
                    self._keep(key, Parsed(text, module))
                    return module
        parsed = reparsed(found, text, parse_module) if found is not None else None
        if parsed is None:
            parsed = Parsed(text, parse_module(text))
        self._keep(key, parsed)
        return parsed.module

    def kept(self, path: Optional[str], module: cst.Module) -> Optional[Parsed]:
        """The kept parse of the file at `path` when `module` is its tree: where its top-level statements lie, when a
        reparse has worked it out (positions then need Python's parser on one statement, not the file), and the
        position pass's maps, which a later edit's reparse hands on."""
        found = self._trees.get(os.path.abspath(path)) if path is not None else None
        return found if found is not None and found.module is module else None

    def _keep(self, key: str, parsed: Parsed) -> None:
        replaced = self._trees.pop(key, None)
        if replaced is not None:
            self._size -= len(replaced.text)
        if len(parsed.text) > self.budget:
            return
        self._trees[key] = parsed
        self._size += len(parsed.text)
        while self._size > self.budget:
            _, dropped = self._trees.popitem(last=False)
            self._size -= len(dropped.text)


# One per process: the pool's workers each keep their own.
TREES = ParsedTrees()

# Who else may hold the tree of a file's text after the budget here has let it go: the project index keeps the modules
# it read for imports whatever the budget (analysis/project.py), and a file it read is often linted later. Asked, with
# the file's absolute path and text, before such a file is parsed again (4 of the benchmark sample's 270 parses were).
ELSEWHERE: List[Callable[[str, str], Optional[cst.Module]]] = []


def forget_trees() -> None:
    """Keep no tree: after a lint stopped part way (engine/budget.py), one may be half made."""
    TREES.__init__(TREES.budget)
