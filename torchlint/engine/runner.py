"""Lint one file of Python source: read once, parse once, walk once with every selected rule, apply noqa.

A file that cannot be read, decoded or parsed becomes a TL000 finding; a rule
that raises becomes an "internal error" finding of that rule and the file's
other rules carry on. Nothing here raises for bad input. Other kinds of file come
through adapters that hand `lint_text` the Python they hold (torchlint/notebook.py),
chosen above this module (`engine/parallel.lint_file_bytes`).
"""

from __future__ import annotations

import ast
import gc
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Tuple, Type

import libcst as cst

from torchlint import source as sources
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.project import PROJECT
from torchlint.engine import budget, noqa, parsing, prefilter
from torchlint.engine.context import FileContext
from torchlint.engine.facts import RECOGNIZERS
from torchlint.engine.file_text import FileText
from torchlint.engine.scopes import SCOPE_TYPES, is_outermost_reference
from torchlint.engine.walk import entered_types, walked_fields
from torchlint.finding import FileResult, Finding, Location
from torchlint.rules import rules_by_code
from torchlint.rules.base import Rule
from torchlint.rules.syntax.parse_error import ParseError

if TYPE_CHECKING:
    from torchlint.config import Config


def parse_error(filename: str, message: str, row: int = 1, column: int = 1) -> Finding:
    location = Location(row, column)
    return Finding(ParseError.code, ParseError.name, message, filename, location, location)


def lint_file(path: str, config: "Config", filename: Optional[str] = None) -> FileResult:
    filename = filename or path
    try:
        data = sources.read_bytes(path, config.max_file_bytes)
    except OSError as error:
        return unreadable(filename, config, f"cannot read file: {error.strerror or error}")
    except sources.TooLarge as error:
        return unreadable(filename, config, budget.size_message(error.size, error.limit))
    return lint_bytes(data, filename, config)


def lint_bytes(data: bytes, filename: str, config: "Config", use_prefilter: bool = True) -> FileResult:
    try:
        source = sources.decode(data)
    except sources.SourceError as error:
        return unreadable(filename, config, error.message, error.row, error.column)
    return FileResult(filename, lint_text(source.text, filename, config, use_prefilter=use_prefilter), source)


def unreadable(filename: str, config: "Config", message: str, row: int = 1, column: int = 1) -> FileResult:
    """The result of a file that cannot be linted at all: its TL000, when selected."""
    selected = ParseError.code in config.codes_for(filename)
    return FileResult(filename, [parse_error(filename, message, row, column)] if selected else [])


def lint_text(
    text: str, filename: str, config: "Config", codes: Optional[FrozenSet[str]] = None, use_prefilter: bool = True,
    file_kind: Optional[FileKind] = None, kind_name: Optional[str] = None,
) -> List[Finding]:
    """The findings in Python source; `file_kind` from an adapter that knows it, else decided from the file, as if it
    were named `kind_name` when that is given (a file a notebook cell writes, reported in the notebook).

    Within the file's budgets (engine/budget.py): text over the size budget (counted in characters here, where the
    text is already read: an editor's, a notebook's cells) or a lint over the time budget gives one TL000 instead.
    """
    codes = config.codes_for(filename) if codes is None else codes
    if config.max_file_bytes and len(text) > config.max_file_bytes:
        return _over_budget(filename, codes, budget.size_message(len(text), config.max_file_bytes))
    try:
        with budget.time_limit(config.max_file_seconds):
            return _lint_within_budget(text, filename, config, codes, use_prefilter, file_kind, kind_name)
    except budget.TimeBudgetExceeded:
        budget.forget_process_state()
        return _over_budget(filename, codes, budget.time_message(config.max_file_seconds))
    except Exception as error:  # noqa: BLE001 - a bug of the engine's own: one finding, and the run goes on
        # A rule's error is already its own finding (`_Walker.crashed`); this is one outside any rule. What the
        # process kept of the file may be half-made: it goes, as after a timeout.
        budget.forget_process_state()
        return _over_budget(filename, codes, f"not linted: internal error {type(error).__name__}: {error}; please report this bug")


def _over_budget(filename: str, codes: FrozenSet[str], message: str) -> List[Finding]:
    return [parse_error(filename, message)] if ParseError.code in codes else []


def _lint_within_budget(
    text: str, filename: str, config: "Config", codes: FrozenSet[str], use_prefilter: bool, file_kind: Optional[FileKind],
    kind_name: Optional[str],
) -> List[Finding]:
    # How far above a file its dotted imports are looked up (`analysis/project.py`), the prefilter's included.
    PROJECT.use_root(config.root)
    # The folders its `sys.path` edits add to its imports, read from the text linted (an editor's buffer, a notebook).
    PROJECT.use_text(filename, text)
    file_text = FileText(text, filename)
    # The prefilter reads what a file's own text names; a star import binds names another file's text holds (`autocast`
    # from `from common import *`, where common.py imports it from torch.cuda.amp), so such a file runs every rule.
    use_prefilter = use_prefilter and not file_text.has_star_import
    rule_classes = rules_to_run(file_text, codes, use_prefilter)
    if rule_classes is None:
        return []
    with _cycle_collector_paused(), PROJECT.one_lint():
        return _lint_parsed(file_text, filename, config, codes, rule_classes, use_prefilter, file_kind, kind_name)


def rules_to_run(file_text: FileText, codes: FrozenSet[str], use_prefilter: bool = True) -> Optional[List[Type[Rule]]]:
    """The rules among `codes` that can report in the file; None when it need not even be parsed: no rule runs on
    it and Python's compiler accepts it (or TL000 is not selected)."""
    selected = _selected(codes)
    rule_classes = prefilter.runnable(file_text, selected) if use_prefilter else list(selected)
    if not rule_classes and (ParseError.code not in codes or parsing.compiles(file_text.text)):
        return None
    return rule_classes


def _selected(codes: FrozenSet[str]) -> Tuple[Type[Rule], ...]:
    """The rule classes of `codes` in code order, worked out once per selection (a run has one, or one per
    `per-file-ignores` pattern) and catalogue."""
    by_code = rules_by_code()
    found = _SELECTIONS.get(codes)
    if found is None or found[0] is not by_code:
        selected = tuple(by_code[code] for code in sorted(codes) if code in by_code and code != ParseError.code)
        found = _SELECTIONS[codes] = (by_code, selected)
    return found[1]


# codes -> (the catalogue they were looked up in, their rule classes)
_SELECTIONS: Dict[FrozenSet[str], Tuple[Dict[str, Type[Rule]], Tuple[Type[Rule], ...]]] = {}


@contextmanager
def _cycle_collector_paused():
    """Pause Python's cycle collector while one file is parsed and walked.

    A libcst tree holds no cycles (nodes do not point back at their parents), so the
    collector frees nothing in it, yet it traverses the young tree again and again while
    it is built and walked (3-8% of a one-process run on the benchmark sample).
    Reference counting frees the tree when the file is done (`_lint_parsed` leaves no
    cycle holding it); the few cycles an analysis leaves go at the next collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _lint_parsed(
    file_text: FileText, filename: str, config: "Config", codes: FrozenSet[str], rule_classes: List[Type[Rule]],
    use_prefilter: bool, file_kind: Optional[FileKind], kind_name: Optional[str],
) -> List[Finding]:
    text = file_text.text
    try:
        # A .py file may also be read through another file's imports: both get one parse (parsing.TREES).
        path = filename if filename.endswith(".py") else None
        module = parsing.TREES.parse(path, text)
    except cst.ParserSyntaxError as error:
        return [_syntax_error(text, filename, error)] if ParseError.code in codes else []
    except parsing.Refused as refused:
        return [parse_error(filename, refused.message, refused.row, refused.column)] if ParseError.code in codes else []
    except RecursionError:
        return [parse_error(filename, "the file is nested too deeply to parse")] if ParseError.code in codes else []
    with_callgraph = any(rule.uses_callgraph for rule in rule_classes)
    kept = parsing.TREES.kept(path, module)
    ctx = FileContext(
        filename, text, module, config, with_callgraph, file_text, use_prefilter, file_kind,
        kept.known_layout() if kept is not None else None, kept.statement_parents if kept is not None else None,
        kind_name,
    )
    rules = [rule_class(ctx) for rule_class in rule_classes]
    walker = _Walker(ctx, rules)
    try:
        walker.walk(module)
        for rule in rules:
            if not rule.crashed:
                walker.finish(rule)
    except RecursionError:
        ctx.findings = [parse_error(filename, "the file is nested too deeply to analyse")]
        if ParseError.code not in codes:
            return []
    finally:
        ctx.close()
    findings = noqa.apply(ctx.findings, text, filename, codes, config.ignore_noqa)
    return sorted(set(findings), key=Finding.sort_key)


def _python_refuses(text: str, filename: str) -> Optional[Finding]:
    try:
        compile(text, filename, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return parse_error(filename, f"SyntaxError: {error.msg}", error.lineno or 1, max(error.offset or 1, 1))
    except (RecursionError, MemoryError):
        return parse_error(filename, "the file is nested too deeply to parse")
    except ValueError as error:
        return parse_error(filename, f"cannot parse: {error}")
    return None


def _syntax_error(text: str, filename: str, error: cst.ParserSyntaxError) -> Finding:
    """Python's own parser places syntax errors better than libcst's and words them as users know them."""
    refused = _python_refuses(text, filename)
    if refused is not None:
        return refused
    message = error.message.strip().splitlines()[0] if error.message.strip() else "cannot parse"
    return parse_error(filename, f"SyntaxError: {message}", error.raw_line, error.raw_column + 1)


@lru_cache(maxsize=None)
def _handler_names(rule_class: Type[Rule]) -> Tuple[Tuple[str, type, str], ...]:
    """(method name, node type, "visit"/"leave") for each visitor method a rule defines."""
    handlers = []
    for attribute in dir(rule_class):
        kind, _, node_name = attribute.partition("_")
        if kind in ("visit", "leave") and node_name and hasattr(cst, node_name):
            handlers.append((attribute, getattr(cst, node_name), kind))
    return tuple(handlers)


# What the walk's work list holds to leave a node that has no leave handlers and is no scope: leaving it is only
# taking it off the stack, with no tuple made for it.
_POP = object()


class _Walker:
    """One walk over the module that feeds the call graph and every rule."""

    def __init__(self, ctx: FileContext, rules: Sequence[Rule]):
        self.ctx = ctx
        self.visits: Dict[type, list] = {}
        self.leaves: Dict[type, list] = {}
        for rule in rules:
            for attribute, node_type, kind in _handler_names(type(rule)):
                table = self.visits if kind == "visit" else self.leaves
                table.setdefault(node_type, []).append((rule, getattr(rule, attribute)))
        # `visit_reference(node, qualified)`: a name or attribute chain used as a value that resolves through the
        # file's imports. Resolved once here for all the rules that ask, and only the few that resolve reach them.
        self.references = [(rule, rule.visit_reference) for rule in rules if hasattr(rule, "visit_reference")]
        # When every listening rule says which parts its names hold, a reference is resolved only if its chain holds
        # one, or its head is imported from a path that does.
        parts = [rule.reference_parts for rule, _ in self.references]
        # (What a star import of a project module binds is among the file's imports: `Scopes.star_bound`.)
        self.reference_parts = frozenset().union(*parts) if parts and None not in parts else None
        self.reference_heads = ctx.scopes.names_importing(self.reference_parts) if self.reference_parts else frozenset()
        self.recognizers = RECOGNIZERS if ctx.callgraph is not None else {}
        # A call goes to the rules and recognizers whose `call_parts` its callee holds (to all of them with the
        # prefilter off): those for each written callee shape (`callee_names`), worked out on first meeting it.
        self.call_table: Optional[Dict[Tuple[str, ...], Tuple[list, list, list]]] = {} if ctx.use_prefilter else None
        self._call_items = (
            [(handler, handler[0].call_parts, None) for handler in self.visits.get(cst.Call, ())],
            [(handler, handler[0].call_parts, None) for handler in self.leaves.get(cst.Call, ())],
            [
                (recognizer, recognizer.call_parts, recognizer.call_heads(ctx) if recognizer.call_heads else None)
                for recognizer in self.recognizers.get(cst.Call, ())
            ] if ctx.use_prefilter else [],
        )

    def walk(self, module: cst.Module) -> None:
        """`walk.walk` with the engine's bookkeeping and the rules' dispatch inlined: this runs for every node
        of every file, and a Python call less per node is a tenth of the engine's time.

        A work list, not a recursive function: CPython 3.11 keeps its frames in 16 KB chunks and frees a chunk as
        soon as the frame at its start returns, so a recursion going up and down across a chunk's edge maps and unmaps
        memory at every crossing (the recursive walks made 1,659 `munmap` calls on the benchmark sample, the work lists
        14 in all: docs/performance.md)."""
        ctx = self.ctx
        stack, scope_nodes = ctx.stack, ctx.scope_nodes
        callgraph = ctx.callgraph
        visits, leaves, recognizers, references = self.visits, self.leaves, self.recognizers, self.references
        call_table = self.call_table
        entered = entered_types(visits.keys() | leaves.keys(), enter_leaves=False)
        # A bare name is a reference to an import only if some import binds it: the other names are not entered.
        imported = ctx.scopes.imported_names() if references and cst.Name not in entered else frozenset()
        # node type -> what its nodes get: (visit handlers, leave handlers, recognizers, the fields to walk, last first,
        # whether it is a scope, whether a reference, whether a call), worked out on first meeting the type: one lookup a
        # node, not one a question.
        plans: Dict[type, tuple] = {}
        # Nodes to enter, and below the children of each node entered, what leaves it: `_POP` when leaving is only taking
        # it off the stack (most nodes), else (node, its leave handlers, whether it is a scope). Children go on last
        # first, so that they come off in libcst's order.
        pending: list = [module]
        push, take = pending.append, pending.pop
        pop_stack = stack.pop
        while pending:
            node = take()
            if node is _POP:
                pop_stack()
                continue
            node_type = type(node)
            if node_type is tuple:
                node, node_leaves, is_scope = node
                if node_leaves:
                    self.dispatch(node_leaves, node)
                pop_stack()
                if is_scope:
                    scope_nodes.pop()
                continue
            plan = plans.get(node_type)
            if plan is None:
                plan = plans[node_type] = (
                    visits.get(node_type), leaves.get(node_type), recognizers.get(node_type),
                    walked_fields(node_type, entered)[::-1], node_type in SCOPE_TYPES,
                    bool(references) and (node_type is cst.Name or node_type is cst.Attribute),
                    node_type is cst.Call,
                )
            node_visits, node_leaves, node_recognizers, names, is_scope, is_reference, is_call = plan
            stack.append(node)
            if is_scope:
                scope_nodes.append(node)
                if node_type is cst.FunctionDef and callgraph is not None:
                    # Every function is in the call graph, also one that calls nothing and shows no fact.
                    callgraph.key_of(node, scope_nodes)
            if is_call and call_table is not None:
                written = callee_names(node.func)
                for_call = call_table.get(written)
                if for_call is None:
                    for_call = call_table[written] = self.for_call(written)
                node_visits, node_leaves, node_recognizers = for_call
            if node_recognizers:
                for recognizer in node_recognizers:
                    fact = recognizer(node, ctx)
                    if fact:
                        callgraph.add_fact(fact, node, scope_nodes)
            if is_call and callgraph is not None:
                callee = callgraph.callee_key(node, stack)
                if callee:
                    callgraph.add_call(node, callee, stack, scope_nodes)
            if node_visits:
                for rule, method in node_visits:  # `dispatch`, inlined
                    if not rule.crashed:
                        try:
                            method(node)
                        except RecursionError:
                            raise
                        except Exception as error:
                            self.crashed(rule, error, node)
            if is_reference:
                self.on_reference(node)
            push((node, node_leaves, is_scope) if node_leaves or is_scope else _POP)
            for name in names:
                value = getattr(node, name)
                value_type = type(value)
                if value_type in entered:
                    push(value)
                elif value_type is tuple or value_type is list:
                    for child in reversed(value):
                        child_type = type(child)
                        if child_type in entered or (child_type is cst.Name and child.value in imported):
                            push(child)
                elif value_type is cst.Name and value.value in imported:
                    push(value)

    def for_call(self, callee: Tuple[str, ...]) -> Tuple[list, list, list]:
        """The visit handlers, leave handlers and recognizers that want calls of `callee` (`callee_names`): those
        whose `call_parts` the callee's names or the import of its first name hold."""
        names = frozenset(callee).union(self.ctx.scopes.import_parts(callee[-1])) if callee else frozenset()
        head = callee[-1] if callee else None
        visits, leaves, recognizers = (
            [
                item for item, parts, heads in pairs
                if (heads is None or head in heads) and (parts is None or not parts.isdisjoint(names))
            ]
            for pairs in self._call_items
        )
        return visits, leaves, recognizers

    def dispatch(self, handlers: list, node: cst.CSTNode) -> None:
        for rule, method in handlers:
            if not rule.crashed:
                try:
                    method(node)
                except RecursionError:
                    raise
                except Exception as error:
                    self.crashed(rule, error, node)

    def finish(self, rule: Rule) -> None:
        try:
            rule.finish()
        except RecursionError:
            raise
        except Exception as error:
            self.crashed(rule, error, None)

    def crashed(self, rule: Rule, error: Exception, node: Optional[cst.CSTNode]) -> None:
        # A rule's bug must not hide other rules' findings: the rule stops, the others go on.
        rule.crashed = True
        self.ctx.findings.append(_internal_error(self.ctx, rule, error, node))

    def on_reference(self, node: cst.CSTNode) -> None:
        if not is_outermost_reference(node, self.ctx.stack):
            return
        if self.reference_parts is not None and not self._may_name_a_part(node):
            return
        qualified = self.ctx.qualified_name(node)
        if qualified is None:
            return
        for rule, method in self.references:
            if not rule.crashed:
                try:
                    method(node, qualified)
                except RecursionError:
                    raise
                except Exception as error:
                    self.crashed(rule, error, node)


    def _may_name_a_part(self, node: cst.CSTNode) -> bool:
        parts = self.reference_parts
        while type(node) is cst.Attribute:
            if node.attr.value in parts:
                return True
            node = node.value
        return type(node) is cst.Name and (node.value in parts or node.value in self.reference_heads)


def callee_names(func: cst.BaseExpression) -> Tuple[str, ...]:
    """The names written in a callee, last first: `("backward", "loss")` for `loss.backward`, `("float", "images")`
    for `images.cuda().float`, `("forward", "layers", "self")` for `self.layers[0].forward`; the first name of the
    chain, when it is one, comes last."""
    names = []
    node = func
    while True:
        node_type = type(node)
        if node_type is cst.Attribute:
            names.append(node.attr.value)
            node = node.value
        elif node_type is cst.Call:
            node = node.func
        elif node_type is cst.Subscript:
            node = node.value
        else:
            if node_type is cst.Name:
                names.append(node.value)
            return tuple(names)


def _internal_error(ctx: FileContext, rule: Rule, error: Exception, node: Optional[cst.CSTNode]) -> Finding:
    start = end = Location(1, 1)
    if node is not None:
        try:
            start, end = ctx.location(node)
        except Exception:  # the position pass failing must not mask the original error
            pass
    message = f"internal error in {rule.code} ({rule.name}): {type(error).__name__}: {error}; please report this bug"
    return Finding(rule.code, rule.name, message, ctx.filename, start, end)

