"""The value model: the expressions a value may come from.

`Values.of(ctx).origins(expr)` answers "where can the value of `expr`, evaluated
here, have been made?" with a list of `Origin`s, found by following:

- names to the bindings that reach the point (`flow.py`: in source order, `if`
  arms joined), in whatever scope binds them;
- unpacking (`a, b = pair`) and subscripts (`loaders[phase]`, `cfg["workers"]`)
  into literal tuples, lists and dicts (and `dict(train=..., val=...)`), and loop
  targets, a comprehension's as a `for`'s, into the items of those (`for phase, loader
  in loaders.items()`, `[evaluate(env, net) for net in nets]`);
- parameters to what every call of their function passes (`_parameter`), where every
  call is one this file makes by the function's name (`_only_called_here`), or one the
  files of its folder that import it make (`_calls_elsewhere`); a marimo cell's parameter
  to what the one cell that returns the name binds it to (`Scopes.cell_definition`); where
  the calls are not all known, a parameter annotated with a class of the project (`bert:
  BERT`) is still opaque, and names that class (`Origin.instance_of`);
- identity wrappers (`Variable(x)`, `nn.DataParallel(model)`, DDP,
  `torch.compile(model)`), copies (`copy.deepcopy(model)`: another object holding
  the same value) and the methods that return their module (`.to`,
  `.cuda`, `.train`, `.eval`, `.half`, ...): `model = model.cuda()` is the model;
  `.module`/`._orig_mod` of such a wrapper is what it wraps;
- `self.x` to what any method of the class assigns it;
- calls: of a function of the file to what it returns, of a method through an
  instance of a class of the file (`trainer.step(x)` after `trainer = Trainer()`)
  to what the method returns, of a model instance to what its class's `forward` returns, of an `nn.Sequential` to what its last layer
  gives, of a module that cannot be followed further to an origin that names the
  module (`Origin.applied`): the output of `nn.Softmax(dim=1)` at the end of a
  `Sequential` is an origin applied from `nn.Softmax(dim=1)`.

What cannot be followed (a parameter of a function called from elsewhere, a loop
variable over a DataLoader, a call of an unknown function) is an origin of its own,
`opaque` when nothing at all is known of it.
The model is torch-agnostic in its mechanics; the few torch names it follows
through are listed here, and rules decide what an origin means.

Calls are followed `_MAX_DEPTH` levels deep, which bounds the cost and keeps the
reach as today's rules had it: one function's body and what it calls directly.
"""

from __future__ import annotations

import os
import re
from collections import deque
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.flow import Binding, Flow, scan
from torchlint.analysis.project import PROJECT
from torchlint.engine.scopes import SCOPE_TYPES, cell_returns, scope_nodes_of
from torchlint.engine.walk import STATEMENT_TYPES, OwnScopeVisitor, child_nodes, statement_structure, walk, walk_visitor

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# The calls other project files make of a module-level name of this file (`summaries.calls_from_importers`, which sets
# this when it is imported): the summaries build on the value model, so the value model cannot import them.
CALLS_FROM_IMPORTERS: Optional[Callable[["FileContext", str], Optional[List[Tuple["FileContext", cst.Call, Tuple[cst.CSTNode, ...], Optional[cst.CSTNode]]]]]] = None

# Module methods that return the module itself (on tensors: a copy holding the same values, or a cast).
RETURNING_SELF = frozenset({
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train", "eval", "requires_grad_", "to_empty",
    "share_memory",
})
# torch's wrappers that are Modules themselves (an `nn.DataParallel` holds the module it wraps as `.module`), unlike
# `torch.compile`, which returns a function when given one.
MODULE_WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
})
# Calls whose result stands for their first argument: for a model, its forward is the wrapped one.
IDENTITY_WRAPPERS = MODULE_WRAPPERS | {"torch.autograd.Variable", "torch.autograd.variable.Variable", "torch.compile"}
# Calls whose iteration yields the items of their first argument, in order: progress bars.
PROGRESS_BARS = frozenset({
    "tqdm.tqdm", "tqdm.std.tqdm", "tqdm.auto.tqdm", "tqdm.autonotebook.tqdm", "tqdm.notebook.tqdm", "tqdm.rich.tqdm",
    "tqdm.tqdm_notebook", "tqdm.notebook.tqdm_notebook", "rich.progress.track",
})
SEQUENTIAL = frozenset({"torch.nn.Sequential", "torch.nn.modules.container.Sequential"})
# Among them, the casts: on a tensor they make a value of another dtype (`origins(..., through_casts=False)`).
CASTS = frozenset({"float", "double", "half", "bfloat16"})
# Calls whose result is a copy of their first argument: another object, of the same kind and value.
COPIES = frozenset({"copy.deepcopy", "copy.copy"})
# `nn.Module` methods that bind a tensor to an attribute name (`self.register_buffer("mask", ...)`).
_REGISTERING = frozenset({"register_buffer", "register_parameter"})
_COPY_LAST_PARTS = frozenset(name.rpartition(".")[2] for name in COPIES)
# `functools.partial(f, *args, **keywords)`: each call of it calls `f` with those arguments first (`partial_call`).
PARTIAL = frozenset({"functools.partial"})
# The `for` clause of a comprehension that binds a name, and the name's index path in the clause's target (None after
# a starred target, where it is not known).
_ClauseTarget = Tuple[cst.CompFor, Optional[Tuple[int, ...]]]
_WRAPPER_LAST_PARTS = frozenset(name.rpartition(".")[2] for name in IDENTITY_WRAPPERS)
# The attributes through which a wrapper gives the module it wraps: DataParallel's and DDP's, `torch.compile`'s.
_WRAPPED_ATTRIBUTES = frozenset({"module", "_orig_mod"})
_MAX_DEPTH = 6
_CONSTANT_NAMES = frozenset({"None", "True", "False"})
_IMPORTS = (cst.Import, cst.ImportFrom)
_MISSING = syntax.MISSING
# What the question being answered (`origins`, `imported`) has followed so far: (expression, statement, scope,
# file, depth) -> its origins, for the answers no cycle cut short. A question reaches the same expressions by many paths (a registry of models, each built
# in every branch of a factory); kept for one question only, so an answer never depends on the ones before it.
_ANSWERED: Dict[tuple, List[Origin]] = {}
# How many times the question met an expression already on its path (a cycle), so far.
_CUTS = [0]


# Place and Origin are named tuples: the value model makes them at every step it follows, and a frozen dataclass
# costs several times more to make.
class Place(NamedTuple):
    """Where an expression is evaluated: the file (its context: another project file for a followed import), the
    scope nodes enclosing it (outermost first) and its statement."""

    context: "FileContext"
    scopes: Tuple[cst.CSTNode, ...]
    statement: Optional[cst.CSTNode] = None

    @property
    def stack(self) -> Tuple[cst.CSTNode, ...]:
        """What `FileContext.qualified_name(node, stack)` needs to resolve a name here."""
        return self.scopes if self.statement is None else self.scopes + (self.statement,)


class Origin(NamedTuple):
    """An expression a value may come from, and where it is evaluated.

    `applied`: the value is the output of the module this origin is built from (`node` is then the call that
    builds the module, such as `nn.Softmax(dim=1)`). `opaque`: nothing is known of the value (`node` is the
    name or expression that could not be followed). `instance_of`, on an opaque parameter whose calls are not all
    known: the class of the project its annotation names (`def __init__(self, bert: BERT)`), where that class is
    defined; the value is taken to be an instance of it or of a subclass, as the annotation declares (Python does
    not check it: a caller may pass anything).
    """

    node: cst.CSTNode
    place: Place
    applied: bool = False
    opaque: bool = False
    instance_of: Optional["Origin"] = None


class Argument(NamedTuple):
    """What one call of a function passes for one of its parameters (`Values.arguments`)."""

    call: cst.Call
    # Where the call is made (in this file or another project file).
    site: Place
    # The origins of the value passed, or of the parameter's default where the call passes none.
    origins: List[Origin]

    @property
    def call_stack(self) -> Tuple[cst.CSTNode, ...]:
        """Every node around the call, outermost first, ending with it: a rule's stack at the call."""
        return path_to(self.call, self.site.scopes)


def constant_of(origins: List[Origin]):
    """The literal value every one of `origins` is, else `syntax.MISSING`."""
    found = _MISSING
    for origin in origins:
        value = _MISSING if origin.applied or origin.opaque else syntax.literal(origin.node)
        if syntax.is_missing(value) or (not syntax.is_missing(found) and value != found):
            return _MISSING
        found = value
    return found


class Values:
    """One per file (`Values.of(ctx)`): the scopes' flows, scanned on first use, and the answers so far."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._flows: Dict[int, Flow] = {}
        self._returns: Dict[int, List[cst.Return]] = {}
        # The answers to `origins` questions so far, by (expression, statement, scope, through casts): several rules
        # ask the same (is `criterion` a class-index loss, a model, a tensor?), and an answer depends on the question
        # only, never on those asked before it (`_ANSWERED`).
        self._origins: Dict[Tuple[int, int, int, bool], List[Origin]] = {}
        # Set for the duration of one `origins` question.
        self._through_casts = True
        self._through_copies = True
        # Above 0 while following the receiver of `.module`/`._orig_mod`: the wrapper calls are what is asked about.
        self._keep_wrappers = 0
        # Calls of each name of the file, and names used otherwise (`_calls_of`), gathered on first need.
        self._name_uses: Optional["_NameUses"] = None
        # Whether another project file may import this one's module-level names, and whether the module runs what it
        # defines on import (`_only_called_here`), asked once.
        self._imported_elsewhere: Optional[bool] = None
        self._program: Optional[bool] = None
        # The names of the methods the classes at the top of the module define (`called_method`), read once.
        self._methods: Optional[FrozenSet[str]] = None
        # id of a statement -> for each name its comprehensions read that one of their `for` clauses binds, by id: that
        # clause and the name's place in its target (`_comprehension_targets`), found on first need.
        self._comprehension_reads: Dict[int, Dict[int, _ClauseTarget]] = {}
        # id of a class -> what its methods register by name (`_registered`), read on first need.
        self._registrations: Dict[int, Dict[str, List[Tuple[cst.BaseExpression, cst.FunctionDef]]]] = {}

    @classmethod
    def of(cls, ctx: "FileContext") -> "Values":
        return ctx.shared(cls)

    # ------------------------------------------------------------ questions rules ask

    def origins(
        self, expr: cst.BaseExpression, stack: Optional[Sequence[cst.CSTNode]] = None, through_casts: bool = True,
        dereferenced: bool = False, through_copies: bool = True,
    ) -> List[Origin]:
        """The origins of `expr` evaluated at the innermost point of `stack` (default: the node being visited).

        `through_casts=False` stops at `.float()`, `.half()` and the like, for questions about a tensor's dtype.
        `through_copies=False` stops at `copy.deepcopy(...)`, for questions about the object itself rather than what
        it holds (a deep copy of the model is another module, which the optimizer does not train).
        `dereferenced=True` for a value the code goes on to index or read an attribute of (`loss.data[0]`): `None`
        has neither, so where the value was `None` the program has already failed, and that origin is left out (a
        helper's early `return None` does not hide the tensor it returns otherwise).
        """
        place = self.place(self.ctx.stack if stack is None else stack)
        key = (id(expr), id(place.statement), id(place.scopes[-1]), through_casts, through_copies)
        found = self._origins.get(key)
        if found is None:
            self._through_casts, self._through_copies = through_casts, through_copies
            try:
                found = self._origins[key] = _distinct(self._follow(expr, place, 0, frozenset()))
            finally:
                self._through_casts = self._through_copies = True
                _ANSWERED.clear()
        if dereferenced:
            return [origin for origin in found if not _is_none(origin.node)] or list(found)
        return list(found)  # a copy: the kept answer is not the caller's to change

    def constant(self, expr: cst.BaseExpression, stack: Optional[Sequence[cst.CSTNode]] = None):
        """The literal value `expr` always has here (`num_workers` after `num_workers = 0`), else `syntax.MISSING`."""
        return constant_of(self.origins(expr, stack))

    def assigned_here(self, name: cst.BaseExpression, stack: Optional[Sequence[cst.CSTNode]] = None) -> List[cst.BaseExpression]:
        """The values assigned to the variable `name` whose assignments reach this point, one step back
        (`labels` after `labels = y.long()` is `[y.long()]`); [] when one binding reaching it is not `name = value`."""
        stack = self.ctx.stack if stack is None else stack
        if type(name) is not cst.Name:
            return []
        found = self.bindings(name, self.place(stack))
        if found is None:
            return []
        bindings = found[1]
        if any(binding.value is None or binding.element for binding in bindings):
            return []
        return [binding.value for binding in bindings]

    def bindings(self, name: cst.Name, place: Place) -> Optional[Tuple[cst.CSTNode, List[Binding]]]:
        """The scope node that binds `name` at `place` and its bindings that may hold there, for the questions the
        origins leave open (an opaque origin: which parameter, which loop target); None for an import or a name
        bound nowhere."""
        scope = self.ctx.scopes.binding_scope(name.value, place.scopes)
        if scope is None or name.value in scope.imports:
            return None
        flow = self.flow(scope.node)
        position = flow.position(place.stack) if scope.node is place.scopes[-1] else None
        return scope.node, flow.reaching(name.value, position)

    def returned(self, call: cst.Call, stack: Optional[Sequence[cst.CSTNode]] = None) -> List[Tuple[cst.BaseExpression, Place]]:
        """The values `call` (made at the innermost point of `stack`) may return, each where its `return` statement is:
        those of the function of a project file it calls by its name, or of the method of a class of the file it
        calls through an instance (`called_method`); [] when it may call anything else."""
        stack = self.ctx.stack if stack is None else stack
        if type(call.func) not in (cst.Name, cst.Attribute):
            return []
        try:
            callees = self._callees(call, call.func, self.place(stack), 0, frozenset())
        finally:
            _ANSWERED.clear()
        if not callees or any(type(callee.node) is not cst.FunctionDef for callee in callees):
            return []
        found: List[Tuple[cst.BaseExpression, Place]] = []
        for callee in _distinct(callees):
            found += self._at(callee.place)._returned(callee.node, callee.place)
        return found

    def imported(self, path: str) -> Optional[List[Origin]]:
        """The origins of what the import path `path` (`fp16_util.zero_grad`) names in a project file, as this file
        imports it; None when the path names no project file's module-level name."""
        try:
            found = self._in_project_file(path, 0, frozenset())
        finally:
            _ANSWERED.clear()
        return _distinct(found) if found is not None else None

    def place(self, stack: Sequence[cst.CSTNode]) -> Place:
        scopes = tuple(scope_nodes_of(stack))
        statement = None
        for node in reversed(stack):
            if type(node) in SCOPE_TYPES:
                break
            if type(node) in STATEMENT_TYPES:
                statement = node
                break
        return Place(self.ctx, scopes, statement)

    def flow(self, scope: cst.CSTNode) -> Flow:
        found = self._flows.get(id(scope))
        if found is None:
            found = self._flows[id(scope)] = scan(scope, enter_expressions=self.ctx.scopes.has_walrus)
        return found

    def returns(self, function: cst.FunctionDef) -> List[cst.Return]:
        """The `return value` statements of `function`, not of functions nested in it."""
        found = self._returns.get(id(function))
        if found is None:
            collector = _Returns()
            # `return` is a statement: the walk need not enter expressions.
            walk_visitor(function.body, collector, statement_structure(type(function.body)))
            found = self._returns[id(function)] = collector.returns
        return found

    def enclosing_class(self, place: Place) -> Optional[Tuple[cst.ClassDef, Tuple[cst.CSTNode, ...]]]:
        """The class whose method `place` is in, and the scopes around the class."""
        scopes = place.scopes
        if len(scopes) >= 2 and type(scopes[-1]) is cst.FunctionDef and type(scopes[-2]) is cst.ClassDef:
            return scopes[-2], scopes[:-2]
        return None

    def _forward_outputs(self, model_class: cst.ClassDef, around: Tuple[cst.CSTNode, ...], depth: int, seen: frozenset) -> List[Origin]:
        """What calling an instance of `model_class` returns: the values its `forward` returns."""
        forward = method_of(model_class, "forward")
        if forward is None:
            return []
        scopes = around + (model_class, forward)
        found = []
        for statement in self.returns(forward):
            found += self._follow(statement.value, Place(self.ctx, scopes, statement), depth + 1, seen)
        return found

    # ------------------------------------------------------------ following

    def _at(self, place: Place) -> "Values":
        """The model of the file `place` is in: an origin may lie in a project file this one imports."""
        return self if place.context is self.ctx else Values.of(place.context)

    def _follow(self, expr: cst.BaseExpression, place: Place, depth: int, seen: frozenset) -> List[Origin]:
        key = (id(expr), id(place.statement))
        if depth > _MAX_DEPTH:
            return []
        if key in seen:
            _CUTS[0] += 1
            return []
        memo_key = (key, id(place.scopes[-1]), id(place.context), depth, self._keep_wrappers)
        found = _ANSWERED.get(memo_key)
        if found is not None:
            return found
        cuts = _CUTS[0]
        seen = seen | {key}
        expr_type = type(expr)
        if expr_type is cst.Name:
            found = self._name(expr, place, depth, seen)
        elif expr_type is cst.Attribute:
            found = self._attribute(expr, place, depth, seen)
        elif expr_type is cst.Subscript:
            found = self._subscript(expr, place, depth, seen)
        elif expr_type is cst.Call:
            found = self._call(expr, place, depth, seen)
        elif expr_type is cst.NamedExpr:
            found = self._follow(expr.value, place, depth, seen)
        elif expr_type is cst.IfExp:  # `net.module if use_cuda else net`: either arm, joined as `if` arms are
            found = self._follow(expr.body, place, depth, seen) + self._follow(expr.orelse, place, depth, seen)
        else:
            found = [Origin(expr, place)]
        if len(found) > 1:
            # Paths often meet again (a registry of models, each reached by every branch that builds one): each
            # step answers with one of each origin, or the lists grow with every meeting.
            found = _distinct(found)
        if _CUTS[0] == cuts:  # an answer a cycle cut short depends on the path: not kept
            _ANSWERED[memo_key] = found
        return found

    def import_path(self, expr: cst.BaseExpression, scopes: Sequence[cst.CSTNode]) -> Optional[str]:
        """The import path the model follows `expr` through when it is evaluated inside `scopes` (`model.Net` for `Net`
        after `from model import Net`, `utils.build` for `utils.build` after `import utils`); None when it follows
        something else."""
        if type(expr) is cst.Name:
            scope = self.ctx.scopes.binding_scope(expr.value, scopes)
            return scope.imports.get(expr.value) if scope is not None else None
        receiver = expr.value if type(expr) is cst.Attribute else None
        if type(receiver) is cst.Name and self.ctx.scopes.is_imported_anywhere(receiver.value):
            path = self.ctx.scopes.resolve(receiver.value, scopes)
            if path is not None:
                return f"{path}.{expr.attr.value}"
        return None

    def _name(self, name: cst.Name, place: Place, depth: int, seen: frozenset) -> List[Origin]:
        if place.statement is not None:
            bound = self._comprehension_targets(place.statement).get(id(name))
            if bound is not None:  # `net` in `[evaluate(env, net) for net in nets]`: an item of `nets`, as for a `for`
                items = self._iterated(bound[0].iter, bound[1], place, depth, seen) if bound[1] is not None else None
                return items or [Origin(name, place, opaque=True)]
        scope = self.ctx.scopes.binding_scope(name.value, place.scopes)
        if scope is None:
            return [Origin(name, place, opaque=name.value not in _CONSTANT_NAMES)]
        imported = scope.imports.get(name.value)
        if imported is not None and name.value not in scope.variables:
            return self._imported(imported, name, place, depth, seen)
        index = place.scopes.index(scope.node) if scope.node in place.scopes else len(place.scopes) - 1
        scopes = place.scopes[: index + 1]
        flow = self.flow(scope.node)
        if scope.node is place.scopes[-1]:
            reaching = flow.reaching(name.value, _position_read(flow, place))
        else:
            reaching = self._bound_where_called(flow, name.value, place.scopes[index:]) or _seen_inside(
                flow, name.value, place.scopes[index + 1] if index + 1 < len(place.scopes) else None,
            )
        found: List[Origin] = []
        for binding in reaching:
            if imported is not None and type(binding.definition) in _IMPORTS:
                # `import model` then `model = model.RNNModel(...)`: the module until the name is rebound.
                found += self._imported(imported, name, place, depth, seen)
            elif binding.definition is not None:
                found.append(Origin(binding.definition, Place(self.ctx, scopes, binding.statement)))
            elif binding.value is None:
                items = None
                if binding.statement is None and type(scope.node) is cst.FunctionDef:
                    items = self._parameter(name, scope.node, scopes, place, depth, seen)
                elif type(binding.statement) is cst.For and binding.name == name.value:
                    loop_place = Place(self.ctx, scopes, binding.statement)
                    items = self._iterated(binding.statement.iter, binding.element, loop_place, depth, seen)
                found += items if items else [Origin(name, place, opaque=True)]
            else:
                statement_place = Place(self.ctx, scopes, binding.statement)
                item_of = self._next_item(binding.value, statement_place, depth, seen)
                if item_of is not None:  # `x = next(batches)` after `batches = iter(loader)`: as `for x in loader`
                    items = self._iterated(item_of[0], binding.element, item_of[1], depth, seen)
                    found += items if items else [Origin(name, place, opaque=True)]
                    continue
                origins = self._follow(binding.value, statement_place, depth, seen)
                for index in binding.element:
                    origins = self._elements(origins, index, depth, seen)
                found += origins
        return found or [Origin(name, place, opaque=True)]

    def _comprehension_targets(self, statement: cst.CSTNode) -> Dict[int, _ClauseTarget]:
        """The names the comprehensions of `statement` (outside nested statements and scopes) read where a `for` clause
        of theirs binds them, by id: each with that clause and its place in the clause's target. A clause's names are
        seen by the later clauses, the conditions and the element; the first iterable is read around the
        comprehension, and an inner comprehension's clause hides an outer one's name."""
        found = self._comprehension_reads.get(id(statement))
        if found is not None:
            return found
        found = self._comprehension_reads[id(statement)] = {}
        pending = deque([statement])
        while pending:  # outer comprehensions first: an inner one rebinding a name marks its reads afterwards
            node = pending.popleft()
            if type(node) in _COMPREHENSIONS:
                bound: Dict[str, _ClauseTarget] = {}
                clause = node.for_in
                while clause is not None:
                    if clause is not node.for_in:
                        _mark_reads(clause.iter, bound, found)
                    bound.update((target.value, (clause, path)) for target, path in _target_paths(clause.target, ()))
                    for condition in clause.ifs:
                        _mark_reads(condition.test, bound, found)
                    clause = clause.inner_for_in
                for part in (node.key, node.value) if type(node) is cst.DictComp else (node.elt,):
                    _mark_reads(part, bound, found)
            for child in child_nodes(node):
                if type(child) not in STATEMENT_TYPES and type(child) not in SCOPE_TYPES:
                    pending.append(child)
        return found

    def _bound_where_called(self, flow: Flow, name: str, scopes: Tuple[cst.CSTNode, ...]) -> Optional[List[Binding]]:
        """The bindings of the module-level `name` that code run by calls of the module sees, read in a function of the
        module or in a class's `__init__` (`scopes`: the module, then the scopes down to the read): those that reach
        the calls of the function, or of the class, by its name, when its definition is one a later one of the same
        name replaces (a notebook's "wrong, then right" cells) or the file is a notebook, and every use of the name is
        such a call at module level. A class defined in one cell and built right there sees the list that cell made,
        not the one a later cell rebinds the name to. None otherwise (`_seen_inside` answers)."""
        if type(flow.node) is not cst.Module or len(scopes) < 2:
            return None
        inner = scopes[1]
        if type(inner) is cst.FunctionDef:
            runs_at_call = len(scopes) == 2
        else:
            runs_at_call = (
                type(inner) is cst.ClassDef and len(scopes) == 3 and type(scopes[2]) is cst.FunctionDef
                and scopes[2].name.value == "__init__"
            )
        defined = flow.statements.get(id(inner))
        if not runs_at_call or inner.decorators or defined is None:
            return None
        called = inner.name.value
        replaced = any(binding.order > defined[0] for binding in flow.bindings.get(called, ()))
        if not replaced and self.ctx.file_kind is not FileKind.NOTEBOOK:
            return None  # another file may import it and call it once the module has run
        # (Asked after the bindings: the uses of the file's names are a walk of the whole file.)
        uses = self._name_uses_of_file()
        if called in uses.other:
            return None
        found: Dict[int, Binding] = {}
        for _, call_scopes, statement in uses.calls.get(called, ()):
            if len(call_scopes) != 1:
                return None  # a call in a function runs whenever that function does
            position = flow.position(Place(self.ctx, call_scopes, statement).stack)
            if position is None:
                return None
            callees = flow.reaching(called, position)
            if any(binding.definition is inner for binding in callees):
                if len(callees) != 1:
                    return None
                found.update((id(binding), binding) for binding in flow.reaching(name, position))
        return list(found.values()) or None

    def _parameter(
        self, name: cst.Name, function: cst.FunctionDef, scopes: Tuple[cst.CSTNode, ...], place: Place, depth: int,
        seen: frozenset,
    ) -> List[Origin]:
        """The values a parameter of `function` (whose scopes, ending with it, are `scopes`) may hold: what each call
        of the function passes for it, or its default where a call passes nothing, when every call of the function
        is one this file makes by its name (`_calls_of`); else nothing is known of it but the class of the project
        its annotation may name (`Origin.instance_of`). A marimo cell is called by marimo, with the names other cells
        return: its parameter is what the one cell returning it binds."""
        defining = self.ctx.scopes.cell_definition(name.value, function)
        if defining is not None:  # a marimo cell's parameter: what the one cell that defines the name binds it to
            returned, names = cell_returns(defining)
            written = next(written for written in names if written.value == name.value)
            return self._follow(written, Place(self.ctx, scopes[:-1] + (defining,), returned), depth, seen)
        passed = self._passed(name, function, scopes)
        found: List[Origin] = []
        for _, _, value, evaluated in passed or ():
            found += self._at(evaluated)._follow(value, evaluated, depth + 1, seen)
        if found:
            return found
        annotated = self._annotated_class(name, function, scopes, depth, seen) if passed is None else None
        return [Origin(name, place, opaque=True, instance_of=annotated)]

    def _annotated_class(
        self, name: cst.Name, function: cst.FunctionDef, scopes: Tuple[cst.CSTNode, ...], depth: int, seen: frozenset,
    ) -> Optional[Origin]:
        """The class of the project the annotation of `function`'s parameter `name` names (`bert: BERT`, also
        `model.BERT` or a class imported from a project file), where it is defined; None for any other annotation
        (a library's class, a string, `Optional[...]`: the model follows only what it can resolve to one class)."""
        params = function.params
        param = next((
            param for param in (*params.posonly_params, *params.params, *params.kwonly_params)
            if param.name.value == name.value
        ), None)
        if param is None or param.annotation is None or type(param.annotation.annotation) not in (cst.Name, cst.Attribute):
            return None
        # An annotation is evaluated where the def statement is.
        classes = _distinct(self._follow(param.annotation.annotation, Place(self.ctx, scopes[:-1], function), depth + 1, seen))
        if len(classes) != 1 or type(classes[0].node) is not cst.ClassDef:
            return None
        return classes[0]

    def arguments(self, name: cst.Name, stack: Optional[Sequence[cst.CSTNode]] = None) -> Optional[List[Argument]]:
        """For a parameter read at the innermost point of `stack` (default: the node being visited) in its own
        function, not rebound before that point: each call of the function (`_calls_of`), with the origins of what
        it passes for the parameter, or of its default; None for any other name, or when not every call is known."""
        place = self.place(self.ctx.stack if stack is None else stack)
        function = place.scopes[-1]
        scope = self.ctx.scopes.binding_scope(name.value, place.scopes)
        if type(function) is not cst.FunctionDef or scope is None or scope.node is not function:
            return None
        if not self.holds_what_was_passed(name, place):
            return None
        try:
            passed = self._passed(name, function, place.scopes)
            if passed is None:
                return None
            return [
                Argument(call, site, _distinct(self._at(evaluated)._follow(value, evaluated, 0, frozenset())))
                for call, site, value, evaluated in passed
            ]
        finally:
            _ANSWERED.clear()

    def holds_what_was_passed(self, name: cst.Name, place: Place) -> bool:
        """`name`, read at `place`, is a parameter of its function still holding what the call passed: no other
        binding of it reaches."""
        found = self.bindings(name, place)
        return found is not None and type(found[0]) is cst.FunctionDef and bool(found[1]) and not any(
            binding.statement is not None or binding.value is not None or binding.definition is not None
            for binding in found[1]
        )

    def never_given_keywords(self, name: cst.Name, stack: Optional[Sequence[cst.CSTNode]] = None) -> bool:
        """`name`, read at the innermost point of `stack` (default: the node being visited) in its own function and
        not rebound before it, is that function's `**` parameter, and it is always empty: every call of the function
        is known (`_calls_of`) and none passes a keyword no named parameter takes, nor a `*`/`**` unpacking (a
        loader helper's `DataLoader(ds, **kwargs)` whose callers never give it `num_workers`)."""
        place = self.place(self.ctx.stack if stack is None else stack)
        function = place.scopes[-1]
        if type(function) is not cst.FunctionDef:
            return False
        params = function.params
        star_kwarg = params.star_kwarg
        if star_kwarg is None or star_kwarg.name.value != name.value:
            return False
        if not self.holds_what_was_passed(name, place):
            return False
        sites = self._calls_of(function, place.scopes[:-1])
        if not sites:
            return False
        named = {param.name.value for param in list(params.params) + list(params.kwonly_params)}
        return all(
            not arg.star and (arg.keyword is None or arg.keyword.value in named)
            for call, _ in sites for arg in call.args
        )

    def _passed(
        self, name: cst.Name, function: cst.FunctionDef, scopes: Tuple[cst.CSTNode, ...],
    ) -> Optional[List[Tuple[cst.Call, Place, cst.BaseExpression, Place]]]:
        """What each call of `function` passes for its parameter `name`: the call, where it is made, the expression
        it passes (or the parameter's default) and where that is evaluated; None when not every call is known
        (`_calls_of`) or one passes nothing known for it (`*args`, no argument and no default)."""
        sites = self._calls_of(function, scopes[:-1])
        if not sites:
            return None
        params = function.params
        positional = list(params.posonly_params) + list(params.params)
        skip = 1 if type(scopes[-2]) is cst.ClassDef else 0  # `self`, bound by the instance or the class's call
        param = next((param for param in positional + list(params.kwonly_params) if param.name.value == name.value), None)
        if param is None or (param in positional and positional.index(param) < skip):
            return None
        index = positional.index(param) - skip if param in positional else None
        found = []
        for call, site in sites:
            if any(arg.star for arg in call.args):
                return None
            given = syntax.keyword(call, name.value) or (syntax.positional(call, index) if index is not None else None)
            if given is not None:
                found.append((call, site, given.value, site))
            elif param.default is not None:
                found.append((call, site, param.default, Place(self.ctx, scopes[:-1], function)))
            else:
                return None
        return found

    def _calls_of(self, function: cst.FunctionDef, around: Tuple[cst.CSTNode, ...]) -> List[Tuple[cst.Call, Place]]:
        """Every call of `function` (`around`: the scopes around its def), with where it is made: the calls of a
        function by its name, or of a class by its name for its `__init__`; [] when it may be called otherwise, so
        its parameters hold what no call here shows (`_only_called_here`)."""
        definition: cst.CSTNode = function
        if type(around[-1]) is cst.ClassDef:
            if function.name.value != "__init__":
                return self._method_calls_of(function, around)
            definition, around = around[-1], around[:-1]
        elsewhere: List[Tuple[cst.Call, Place]] = []
        if not self._only_called_here(definition, around):
            found = self._calls_elsewhere(definition, around)
            if found is None:
                return []
            elsewhere = found
        name = definition.name.value
        uses = self._name_uses_of_file()
        sites = []
        for call, scopes, statement in uses.calls.get(name, ()):
            # The name must mean this definition where it is called (not a local of the same name).
            scope = self.ctx.scopes.binding_scope(name, scopes)
            if scope is None or scope.node is not around[-1]:
                return []
            sites.append((call, Place(self.ctx, scopes, statement)))
        return sites + elsewhere

    def _calls_elsewhere(self, definition: cst.CSTNode, around: Tuple[cst.CSTNode, ...]) -> Optional[List[Tuple[cst.Call, Place]]]:
        """The calls other project files make of the module-level function or class `definition`, when this file only
        calls it by its name (`_uses_only_as_calls`) and every file that may import it is seen and only calls it
        (`summaries.calls_from_importers`: `from trainer import train` then `train(model, loader)` in main.py), for
        the file being linted; else None."""
        if type(around[-1]) is not cst.Module or self.ctx.file_kind in (FileKind.TEST, FileKind.NOTEBOOK):
            return None
        if PROJECT.followed_into(self.ctx):
            # Reached from another file (main.py following `train(...)`), through one call whose arguments that file
            # follows: joining every importer's calls here would mix theirs into that call's answer.
            return None
        if CALLS_FROM_IMPORTERS is None or PROJECT.importer_candidates(self.ctx.filename) is None:
            # Its importers cannot all be known, which `calls_from_importers` would find only after the walk below.
            return None
        if not self._uses_only_as_calls(definition, around):
            return None
        found = CALLS_FROM_IMPORTERS(self.ctx, definition.name.value)
        if found is None:
            return None
        return [(call, Place(there, scopes, statement)) for there, call, scopes, statement in found]

    def _method_calls_of(self, method: cst.FunctionDef, around: Tuple[cst.CSTNode, ...]) -> List[Tuple[cst.Call, Place]]:
        """Every call of `method`, a plain method of a class at the top of the module, through the class's instances
        (`trainer.fit(loader)`) and, in the class's own methods, through `self` (a trainer's `__init__` calling
        `self.parallel_model(model)`), when those are all its calls: the class is only called here
        (`_only_called_here`: no other file or subclass makes instances, so `self` is an instance of it), and every
        use of the method's name in the file is a call whose receiver is an instance of it (`called_method`) or
        `self`; else [] (a bound method passed on, a receiver not followed)."""
        model_class = around[-1]
        if method.decorators or len(around) != 2 or not self._only_called_here(model_class, around[:-1]):
            return []
        name = method.name.value
        uses = self._name_uses_of_file()
        if name in uses.method_reads:
            return []
        sites = []
        for call, scopes, statement in uses.method_calls.get(name, ()):
            place = Place(self.ctx, scopes, statement)
            if _on_self(call, scopes, model_class):
                sites.append((call, place))
                continue
            found = self.called_method(call, place.stack)
            if found is None:
                return []
            if found[0] is model_class:
                sites.append((call, place))
        return sites

    def _only_called_here(self, definition: cst.CSTNode, around: Tuple[cst.CSTNode, ...]) -> bool:
        """The function or class `definition` (`around`: the scopes around it) is called only by its name in this
        file: the name is bound once, by it, and never read other than to call it (not passed, wrapped or
        subclassed), no decorator but torch's registers it anywhere, and no other file can import it. A def inside a function is its function's own; a
        module-level one is the file's in a notebook, in a script (its `__main__` guard, or a module-level call of
        its own functions: importing it would run it) or when its name is private (`_helper`), and then only while
        no other file of its folder imports the module."""
        name = definition.name.value
        at_top = type(around[-1]) is cst.Module
        kind = self.ctx.file_kind
        if at_top:
            if kind is FileKind.TEST or not (
                kind is FileKind.NOTEBOOK or kind is FileKind.SCRIPT or name.startswith("_") or self._runs_itself()
            ):
                return False
        elif type(around[-1]) is not cst.FunctionDef:
            return False
        if not self._uses_only_as_calls(definition, around):
            return False
        return not at_top or kind is FileKind.NOTEBOOK or not self._imported_by_neighbours()

    def _uses_only_as_calls(self, definition: cst.CSTNode, around: Tuple[cst.CSTNode, ...]) -> bool:
        """This file binds the name of `definition` once, by it, and reads it only to call it (not passed, wrapped or
        subclassed), and no decorator but torch's registers it anywhere."""
        for decorator in definition.decorators:
            # A registry's decorator (`@MODELS.register`, `@app.command`) hands the function to callers elsewhere;
            # torch's (`@torch.no_grad()`) only wrap it.
            target = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
            if not (self.ctx.qualified_name(target, around) or "").startswith("torch."):
                return False
        name = definition.name.value
        uses = self._name_uses_of_file()
        return name not in uses.other and uses.definitions.get(name, 0) == 1

    def _runs_itself(self) -> bool:
        if self._program is None:
            self._program = _runs_itself(self.ctx.module)
        return self._program

    def method_calls(self, model_class: cst.ClassDef, name: str) -> List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]]:
        """The calls `obj.name(...)` in this file of the method `name` of `model_class` (a class at the top of the
        module) through its instances (`called_method`), each with the nodes around it, outermost first, the call
        last."""
        found = []
        uses = self._name_uses_of_file()
        for call, scopes, statement in uses.method_calls.get(name, ()):
            if self.called_method(call, Place(self.ctx, scopes, statement).stack) == (model_class, name):
                found.append((call, path_to(call, scopes)))
        return found

    def called_method(self, call: cst.Call, stack: Sequence[cst.CSTNode]) -> Optional[Tuple[cst.ClassDef, str]]:
        """For `obj.name(...)` whose receiver is, by every origin, an instance built in this file of one class at the
        top of the module that defines the method (`model = RNN(...)`, then `model.init_hidden(n)`, also through
        parameters and `self.model`): that class and the method's name. None for `self.name(...)` (the call graph's)
        and anything else."""
        try:
            called = self._called_method(call, self.place(stack), 0, frozenset())
        finally:
            _ANSWERED.clear()
        return (called[0], call.func.attr.value) if called is not None else None

    def _called_method(
        self, call: cst.Call, place: Place, depth: int, seen: frozenset,
    ) -> Optional[Tuple[cst.ClassDef, Tuple[cst.CSTNode, ...]]]:
        """`called_method` within the question being answered: the class, and the scopes around it."""
        func = call.func
        if type(func) is not cst.Attribute or (type(func.value) is cst.Name and func.value.value in ("self", "cls")):
            return None
        if self._methods is None:
            self._methods = _top_level_methods(self.ctx.module)
        if func.attr.value not in self._methods:  # most method calls are of other objects (`plt.plot`)
            return None
        built = self._instance_class(func.value, place, depth, seen)
        if built is None or built.place.context is not self.ctx:
            return None
        model_class = built.node
        if not any(statement is model_class for statement in self.ctx.module.body) or method_of(model_class, func.attr.value) is None:
            return None
        return model_class, built.place.scopes

    def _project_method(self, call: cst.Call, place: Place, depth: int, seen: frozenset) -> Optional[Origin]:
        """For `obj.name(...)` whose receiver is, by every origin, an instance of one class at the top of another
        project file, built in any project file (pix2pixHD's `data_loader.load_data()` after `data_loader =
        CreateDataLoader(opt)`, which builds a `CustomDatasetDataLoader()` of a third file): the method that class
        defines, where it is defined; None otherwise. Its calls are not this file's, so its parameters stay what the
        class's own file knows of them (`_method_calls_of`)."""
        func = call.func
        if type(func) is not cst.Attribute or (type(func.value) is cst.Name and func.value.value in ("self", "cls")):
            return None
        built = self._instance_class(func.value, place, depth, seen, built_anywhere=True)
        if built is None:
            return None
        there = built.place.context
        method = method_of(built.node, func.attr.value)
        if there is self.ctx or method is None or not any(statement is built.node for statement in there.module.body):
            return None
        return Origin(method, Place(there, built.place.scopes + (built.node,)))

    def instance_class(self, receiver: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> Optional[Origin]:
        """The class that `receiver` (evaluated inside `stack`) is, by every origin, an instance built in this file of
        (`model = RNN(...)`, then `model`, also through parameters and `self.model`): the class's origin, in the file
        that defines it (another project file for an imported class); None for anything else."""
        try:
            return self._instance_class(receiver, self.place(stack), 0, frozenset())
        finally:
            _ANSWERED.clear()

    def _instance_class(
        self, receiver: cst.BaseExpression, place: Place, depth: int, seen: frozenset, built_anywhere: bool = False,
    ) -> Optional[Origin]:
        """`instance_class` within the question being answered (a method's returns followed through its receiver,
        `_callees`): it keeps that question's path and settings. `built_anywhere`: the instances may also be built in
        other project files (`_project_method`)."""
        classes: Dict[int, Origin] = {}
        for origin in _distinct(self._follow(receiver, place, depth, seen)):
            if type(origin.node) is not cst.Call or origin.applied or origin.opaque or (
                not built_anywhere and origin.place.context is not self.ctx
            ):
                return None
            built = [
                built for built in _distinct(self._at(origin.place)._follow(origin.node.func, origin.place, depth, seen))
                if type(built.node) is cst.ClassDef
            ]
            if len(built) != 1:
                return None
            classes[id(built[0].node)] = built[0]
        return next(iter(classes.values())) if len(classes) == 1 else None

    def _imported_by_neighbours(self) -> bool:
        if self._imported_elsewhere is None:
            stem = os.path.splitext(os.path.basename(self.ctx.filename))[0].encode()
            pattern = re.compile(rb"\b(?:import|from)\s+(?:\.*\w+\.)*\.?" + re.escape(stem) + rb"\b")
            self._imported_elsewhere = bool(stem) and PROJECT.neighbours_hold(
                self.ctx.filename, lambda data: pattern.search(data) is not None,
            )
        return self._imported_elsewhere

    def calls_by_name(self, name: str) -> Optional[List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]]]:
        """The calls of the name `name` in the file, each with the nodes around it (outermost first, the call last);
        None when the name is also read otherwise (passed on, assigned, decorated: a call could happen anywhere)."""
        uses = self._name_uses_of_file()
        if name in uses.other:
            return None
        return [(call, path_to(call, scopes)) for call, scopes, _ in uses.calls.get(name, ())]

    def _name_uses_of_file(self) -> "_NameUses":
        if self._name_uses is None:
            self._name_uses = _NameUses(self.ctx)
            walk_visitor(self.ctx.module, self._name_uses)
        return self._name_uses


    def _imported(self, path: str, written: cst.CSTNode, place: Place, depth: int, seen: frozenset) -> List[Origin]:
        """A name imported from a project file (`analysis/project.py`) is followed into it; others are origins."""
        found = self._in_project_file(path, depth + 1, seen)
        return found if found is not None else [Origin(written, place)]

    def _in_project_file(self, path: str, depth: int, seen: frozenset) -> Optional[List[Origin]]:
        if PROJECT.locate_name(self.ctx.filename, path) is None:
            return None
        found = PROJECT.resolve(self.ctx.filename, path, self.ctx.config)
        if found is None:
            return None
        module, name = found
        return Values.of(module.context)._name(cst.Name(name), Place(module.context, (module.context.module,)), depth, seen)

    def _attribute(self, attribute: cst.Attribute, place: Place, depth: int, seen: frozenset) -> List[Origin]:
        path = self.import_path(attribute, place.scopes)
        if path is not None and self._still_the_module(attribute.value, place):  # `utils.build` after `import utils`
            return self._imported(path, attribute, place, depth, seen)
        receiver = attribute.value
        if attribute.attr.value in _WRAPPED_ATTRIBUTES:
            unwrapped = self._unwrapped(receiver, place, depth, seen)
            if unwrapped is not None:
                return unwrapped
        owner = self.enclosing_class(place)
        if owner is None or type(receiver) is not cst.Name or not _is_self(receiver, place.scopes):
            return [Origin(attribute, place)]
        model_class, around = owner
        scope = self.ctx.scopes.scope_of(model_class)
        values = scope.attributes.get(attribute.attr.value, [])
        found: List[Origin] = []
        for value in values:  # `self.x = ...` in any method, `cls.x = ...` in a classmethod (`setUpClass`)
            method = scope.attribute_methods.get(id(value))
            if method is not None:
                found += self._follow(value, Place(self.ctx, around + (model_class, method)), depth, seen)
        for value, method in self._registered(model_class).get(attribute.attr.value, ()):
            found += self._follow(value, Place(self.ctx, around + (model_class, method)), depth, seen)
        found += self._class_level(attribute, model_class, around, place, depth, seen)
        return found or [Origin(attribute, place)]

    def _registered(self, model_class: cst.ClassDef) -> Dict[str, List[Tuple[cst.BaseExpression, cst.FunctionDef]]]:
        """The tensors the class's methods register by name, `self.register_buffer("mask", torch.ones(n, n))` (also
        `register_parameter`): read as `self.mask` afterwards, like an attribute the method assigns."""
        found = self._registrations.get(id(model_class))
        if found is None:
            found = self._registrations[id(model_class)] = {}
            for method in model_class.body.body:
                if type(method) is not cst.FunctionDef or not method.params.params:
                    continue
                owner = method.params.params[0].name.value

                def on_visit(node: cst.CSTNode) -> bool:
                    if (
                        type(node) is cst.Call and type(node.func) is cst.Attribute
                        and node.func.attr.value in _REGISTERING and type(node.func.value) is cst.Name
                        and node.func.value.value == owner
                    ):
                        name, value = syntax.positional(node, 0), syntax.positional(node, 1) or syntax.keyword(node, "tensor")
                        registered = syntax.literal(name.value, None) if name is not None else None
                        if isinstance(registered, str) and value is not None:
                            found.setdefault(registered, []).append((value.value, method))
                    return type(node) not in (cst.FunctionDef, cst.ClassDef, cst.Lambda) or node is method

                walk(method, on_visit, lambda node: None)
        return found

    def _class_level(
        self, attribute: cst.Attribute, model_class: cst.ClassDef, around: Tuple[cst.CSTNode, ...], place: Place,
        depth: int, seen: frozenset,
    ) -> List[Origin]:
        """What the class body binds `self.x`'s name to (`outputs = [...]` under `class TestLoss:`), every binding
        joined: an instance reads the class's attribute until it sets its own. A binding whose value is not known (a
        method, a loop target) is the attribute itself, unknown."""
        found: List[Origin] = []
        scopes = around + (model_class,)
        for binding in self.flow(model_class).bindings.get(attribute.attr.value, ()):
            if binding.value is None or binding.definition is not None:
                found.append(Origin(attribute, place))
                continue
            origins = self._follow(binding.value, Place(self.ctx, scopes, binding.statement), depth, seen)
            for index in binding.element:
                origins = self._elements(origins, index, depth, seen)
            found += origins
        return found

    def _still_the_module(self, receiver: cst.BaseExpression, place: Place) -> bool:
        """The imported name `receiver` holds the module at `place`: every binding of it that reaches there is the
        import (`model.RNNModel` in `model = model.RNNModel(...)`, not `model.init_hidden` after it)."""
        if type(receiver) is not cst.Name:
            return True
        scope = self.ctx.scopes.binding_scope(receiver.value, place.scopes)
        if scope is None or receiver.value not in scope.variables:
            return True
        flow = self.flow(scope.node)
        if scope.node is place.scopes[-1]:
            reaching = flow.reaching(receiver.value, flow.position(place.stack))
        else:
            index = place.scopes.index(scope.node) if scope.node in place.scopes else len(place.scopes) - 1
            reaching = _seen_inside(flow, receiver.value, place.scopes[index + 1] if index + 1 < len(place.scopes) else None)
        return all(type(binding.definition) in _IMPORTS for binding in reaching)

    def _unwrapped(self, wrapper: cst.BaseExpression, place: Place, depth: int, seen: frozenset) -> Optional[List[Origin]]:
        """For `model.module` (`._orig_mod`): the origins of the modules `model` wraps, when every value of `model`
        is an identity wrapper's call (`nn.DataParallel(net)`, `torch.compile(net)`); else None."""
        self._keep_wrappers += 1
        try:
            wrappers = self._follow(wrapper, place, depth, seen)
        finally:
            self._keep_wrappers -= 1
        found: List[Origin] = []
        for origin in wrappers:
            wrapped = _wrapped_module(origin)
            if wrapped is None:
                return None
            found += self._at(origin.place)._follow(wrapped, origin.place, depth, seen)
        return found or None

    def _subscript(self, subscript: cst.Subscript, place: Place, depth: int, seen: frozenset) -> List[Origin]:
        if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
            return [Origin(subscript, place)]
        key = syntax.literal(subscript.slice[0].slice.value)
        return self._elements(self._follow(subscript.value, place, depth, seen), key, depth, seen, subscript)

    def next_item(self, value: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> Optional[Tuple[cst.BaseExpression, Place]]:
        """For `next(batches)` evaluated at `stack`, where every value of `batches` is `iter(items)` with one `items`
        (or `next(iter(items))`): `items` and where it is evaluated, so the value is one item of `items`, as a `for`
        target over it is (`Binding`s of loop targets have no value; these have the `next(...)` call). Else None."""
        try:
            return self._next_item(value, self.place(stack), 0, frozenset())
        finally:
            _ANSWERED.clear()

    def items_bound(self, binding: Binding, scopes: Tuple[cst.CSTNode, ...]) -> Optional[Tuple[cst.BaseExpression, Place]]:
        """For a binding (of a name in the scope ending `scopes`) to one item of an iterable, part `binding.element` of
        it: a `for` target or `x = next(batches)` after `batches = iter(items)`; the iterable and where it is
        evaluated. None for any other binding."""
        if type(binding.statement) is cst.For and binding.value is None and binding.definition is None:
            return binding.statement.iter, Place(self.ctx, scopes, binding.statement)
        if binding.value is None:
            return None
        return self.next_item(binding.value, Place(self.ctx, scopes, binding.statement).stack)

    def _next_item(self, value: cst.BaseExpression, place: Place, depth: int, seen: frozenset) -> Optional[Tuple[cst.BaseExpression, Place]]:
        iterator = advanced_iterator(value, self.ctx, place.scopes)
        if iterator is None:
            return None
        found: Optional[Tuple[cst.BaseExpression, Place]] = None
        for origin in self._follow(iterator, place, depth, seen):
            there = self._at(origin.place)
            items = None if origin.applied or origin.opaque else iterated_items(origin.node, there.ctx, origin.place.scopes)
            if items is None:
                return None
            # `except StopIteration: batches = iter(loader)` starts the same items again: one `items` all the same.
            if found is not None and found[1].context.code(found[0]) != there.ctx.code(items):
                return None
            found = (items, origin.place)
        return found

    def _iterated(
        self, iterable: cst.BaseExpression, element: Tuple[int, ...], place: Place, depth: int, seen: frozenset,
    ) -> Optional[List[Origin]]:
        """The origins of the part `element` (an unpacking path) of the items a `for` over `iterable` gets, when it
        iterates literal containers (`for loader in [train_loader, val_loader]`, `for phase, loader in
        loaders.items()`, `.values()`, `enumerate(...)` and `zip(...)` of those, `tqdm(...)` and `iter(...)` of any of
        them); None when they are not known."""
        if type(iterable) is cst.Call:
            func = iterable.func
            builtin = func.value if type(func) is cst.Name and self.ctx.scopes.binding_scope(func.value, place.scopes) is None else None
            if builtin in ("enumerate", "zip") and iterable.args and not any(arg.star or arg.keyword for arg in iterable.args):
                # enumerate: (index, item); zip: one item of each argument.
                if not element or (element[0] != 1 if builtin == "enumerate" else element[0] >= len(iterable.args)):
                    return None
                wrapped = iterable.args[0 if builtin == "enumerate" else element[0]].value
                return self._iterated(wrapped, element[1:], place, depth, seen)
            items = iterated_items(iterable, self.ctx, place.scopes)
            if items is not None:  # `iter(loaders)`, `loaders.__iter__()`: the items of what it wraps
                return self._iterated(items, element, place, depth, seen)
            first = iterable.args[0] if iterable.args else None
            if first is not None and first.keyword is None and not first.star and (
                self.ctx.qualified_name_in(func, PROGRESS_BARS, place.stack)
            ):  # `tqdm(loaders.items())`: the items of what it wraps
                return self._iterated(first.value, element, place, depth, seen)
            method = syntax.method_name(iterable)
            if method in ("values", "items") and not iterable.args:
                containers = self._follow(func.value, place, depth, seen)
                if not containers or not all(_dict_entries(origin) is not None for origin in containers):
                    return None
                if method == "items":
                    if not element or element[0] not in (0, 1):
                        return None
                    kind, element = ("keys" if element[0] == 0 else "values"), element[1:]
                else:
                    kind = "values"
                found: List[Origin] = []
                for container in containers:
                    there = self._at(container.place)
                    for key, value in _dict_entries(container):
                        if kind == "values":
                            found += there._follow(value, container.place, depth, seen)
                        elif key is not None:
                            found.append(Origin(key, container.place))
                        else:
                            return None
                return self._parts(found, element, depth, seen)
        containers = self._follow(iterable, place, depth, seen)
        if not containers or not all(
            not origin.applied and (type(origin.node) in (cst.Tuple, cst.List, cst.Set) or _repeated_item(origin) is not None)
            for origin in containers
        ):
            return None
        items: List[Origin] = []
        for container in containers:
            repeated = _repeated_item(container)
            if repeated is not None:  # `[F.softmax(torch.randn(5, 5), dim=1) for _ in range(10)]`
                items += self._at(container.place)._follow(repeated, container.place, depth, seen)
                continue
            if any(type(item) is cst.StarredElement for item in container.node.elements):
                return None
            there = self._at(container.place)
            for item in container.node.elements:
                items += there._follow(item.value, container.place, depth, seen)
        return self._parts(items, element, depth, seen)

    def _parts(self, origins: List[Origin], element: Tuple[int, ...], depth: int, seen: frozenset) -> Optional[List[Origin]]:
        for index in element:
            origins = self._elements(origins, index, depth, seen)
        return origins or None

    def _elements(self, containers: List[Origin], key, depth: int, seen: frozenset, written: Optional[cst.CSTNode] = None) -> List[Origin]:
        """The origins of `container[key]` for each container origin (`key` MISSING: any element)."""
        found: List[Origin] = []
        for container in containers:
            node = container.node
            if type(node) is cst.Call and _dict_entries(container) is not None:  # dict(train=..., val=...)
                chosen = [arg.value for arg in node.args if syntax.is_missing(key) or arg.keyword.value == key]
                elements = chosen or [arg.value for arg in node.args]
            elif not container.applied and type(node) in (cst.Tuple, cst.List) and not any(
                isinstance(element, cst.StarredElement) for element in node.elements
            ):
                elements = [element.value for element in node.elements]
                if isinstance(key, int) and -len(elements) <= key < len(elements):
                    elements = [elements[key]]
                elif not syntax.is_missing(key):
                    elements = []
            elif not container.applied and type(node) is cst.Dict and all(
                isinstance(element, cst.DictElement) for element in node.elements
            ):
                chosen = [
                    element.value for element in node.elements
                    if syntax.is_missing(key) or syntax.literal(element.key) == key
                ]
                elements = chosen or [element.value for element in node.elements]
            elif not container.applied and _repeated_item(container) is not None:
                # `nets[0]` of `nets = [Net() for _ in range(n)]`: every element is the item, evaluated where it is.
                elements = [_repeated_item(container)]
            else:
                found.append(Origin(written or node, container.place, opaque=True))
                continue
            for element in elements:
                found += self._at(container.place)._follow(element, container.place, depth, seen)
        return found

    def _call(self, call: cst.Call, place: Place, depth: int, seen: frozenset) -> List[Origin]:
        # `model.forward(x)` returns what `model(x)` does (`syntax.called_module`); `self.forward(x)` is followed as the
        # method it names, whatever the method's first parameter is called.
        func = syntax.called_module(call)
        if func is not call.func and _is_self(func, place.scopes):
            func = call.func
        method = syntax.method_name(call)
        if method in RETURNING_SELF and (self._through_casts or method not in CASTS):
            return self._follow(func.value, place, depth, seen)
        if self._through_copies and syntax.terminal_name(func) in _COPY_LAST_PARTS and self.ctx.qualified_name_in(func, COPIES, place.stack):
            copied = syntax.positional(call, 0) or syntax.keyword(call, "x")
            if copied is not None:  # `copy.deepcopy(model)`: another module, built as `model` was, holding its weights
                return self._follow(copied.value, place, depth, seen)
        if not self._keep_wrappers:
            wrapped = _wrapped_module(Origin(call, place))
            if wrapped is not None:
                return self._follow(wrapped, place, depth, seen)
        if type(func) is cst.Name and func.value == "self":
            owner = self.enclosing_class(place)
            if owner is not None:
                return self._forward_outputs(owner[0], owner[1], depth, seen) or [Origin(call, place)]
        if type(func) not in (cst.Name, cst.Attribute):
            return self._applied(self._follow(func, place, depth, seen), call, place, depth, seen)
        callees = self._callees(call, func, place, depth, seen)
        if callees is None:
            return [Origin(call, place)]  # a method of something else: what it returns is not known here
        return self._applied(callees, call, place, depth, seen)

    def _callees(self, call: cst.Call, func: cst.BaseExpression, place: Place, depth: int, seen: frozenset) -> Optional[List[Origin]]:
        """What `func`, the name or attribute `call` calls, may be: its origins (a function, a module, a class), or for
        `obj.name(...)` through an instance of a class of the file (`called_method`) the method the class defines;
        None for a method of anything else. A function of an imported module (`pytorch_ssim.ssim(...)` after `import
        pytorch_ssim`) is what the import names, as after `from pytorch_ssim import ssim`."""
        if type(func) is cst.Attribute and self.import_path(func, place.scopes) is not None and self._still_the_module(func.value, place):
            return self._follow(func, place, depth + 1, seen)
        if type(func) is cst.Attribute and _is_self(func.value, place.scopes):
            methods = self._own_methods(func.attr.value, place)
            if methods is not None:
                return methods
        if type(func) is cst.Attribute and not _is_self(func.value, place.scopes) and func.attr.value not in _WRAPPED_ATTRIBUTES:
            called = self._called_method(call, place, depth + 1, seen)
            if called is None:
                method = self._project_method(call, place, depth + 1, seen)
                return [method] if method is not None else None
            model_class, around = called
            return [Origin(method_of(model_class, func.attr.value), Place(self.ctx, around + (model_class,)))]
        return self._follow(func, place, depth + 1, seen)

    def _own_methods(self, name: str, place: Place) -> Optional[List[Origin]]:
        """For `self.name(...)` in a method of a class at the top of the module: the methods `name` that call may run,
        the class's own and those of the file's subclasses of it that override it (`self._forward(...)` in a base
        trainer's `train`), each where it is defined; None when the class does not define it as a plain method (it
        comes from a base, is a property or other decorated attribute) or an instance attribute of that name may hide
        it (`self.step = ...`)."""
        owner = self.enclosing_class(place)
        if owner is None or len(owner[1]) != 1:
            return None
        model_class, around = owner
        if name in self.ctx.scopes.scope_of(model_class).attributes:
            return None
        found: List[Origin] = []
        for candidate in _with_subclasses(model_class, self.ctx.module):
            method = method_of(candidate, name)
            if method is None:
                continue
            if method.decorators or name in self.ctx.scopes.scope_of(candidate).attributes:
                return None
            found.append(Origin(method, Place(self.ctx, around + (candidate,))))
        return found if found and found[0].place.scopes[-1] is model_class else None

    def _applied(self, callees: List[Origin], call: cst.Call, place: Place, depth: int, seen: frozenset) -> List[Origin]:
        """What calling each of `callees` returns."""
        found: List[Origin] = []
        for callee in callees:
            node = callee.node
            there = self._at(callee.place)
            if type(node) is cst.FunctionDef:
                for value, statement_place in there._returned(node, callee.place):
                    value = there._arm_chosen_by(value, node, statement_place, call)
                    found += there._follow(value, statement_place, depth + 1, seen)
            elif type(node) is cst.Call and not callee.applied:
                found += there._module_outputs(callee, depth, seen)
            else:
                found.append(Origin(call, place))
        return found or [Origin(call, place)]

    def _arm_chosen_by(self, value: cst.BaseExpression, function: cst.FunctionDef, place: Place, call: cst.Call) -> cst.BaseExpression:
        """`value`, which `function` returns at `place` to `call`; for `a if flag else b` whose test is a parameter the
        function does not rebind before it, given a constant by `call` (`True`, `False`, `None`, a number) or left
        at such a default, the arm that constant chooses: `return (loss, fake) if return_fake else loss`, called as
        `model.g_loss(z)`, returns the loss alone, and `model.g_loss(z, return_fake=True)` the pair."""
        if type(value) is not cst.IfExp or type(value.test) is not cst.Name:
            return value
        flow = self.flow(function)
        bindings = flow.reaching(value.test.value, _position_read(flow, place))
        if len(bindings) != 1 or bindings[0].statement is not None or bindings[0].value is not None or bindings[0].definition is not None:
            return value  # not the parameter as the call gave it
        given = _constant_passed(function, place.scopes[-2], value.test.value, call)
        if given is _MISSING:
            return value
        return value.body if given else value.orelse

    def _returned(self, function: cst.FunctionDef, defined: Place) -> List[Tuple[cst.BaseExpression, Place]]:
        """The values the `return` statements of `function` (defined at `defined`, in this file) give, each where its
        statement is."""
        scopes = defined.scopes + (function,)
        return [(statement.value, Place(self.ctx, scopes, statement)) for statement in self.returns(function)]

    def _module_outputs(self, module: Origin, depth: int, seen: frozenset) -> List[Origin]:
        """What applying the module built by `module` (a call such as `Net()` or `nn.Sequential(...)`) returns."""
        built = module.node
        place = module.place
        if place.context is not self.ctx:
            return self._at(place)._module_outputs(module, depth, seen)
        classes = [
            origin for origin in self._follow(built.func, place, depth + 1, seen) if type(origin.node) is cst.ClassDef
        ]
        if classes:
            found = []
            for origin in classes:
                found += self._at(origin.place)._forward_outputs(origin.node, origin.place.scopes, depth, seen)
            return found or [Origin(built, place, applied=True)]
        if self.ctx.qualified_name_in(built.func, SEQUENTIAL, place.stack):
            layers = [arg.value for arg in built.args if arg.keyword is None and not arg.star]
            if layers:
                found = []
                for layer in self._follow(layers[-1], place, depth + 1, seen):
                    found += self._module_outputs(layer, depth + 1, seen) if type(layer.node) is cst.Call else [layer]
                return found
        return [Origin(built, place, applied=True)]


def iterated_items(node: cst.CSTNode, ctx: "FileContext", scopes: Sequence[cst.CSTNode]) -> Optional[cst.BaseExpression]:
    """`items` when `node` makes an iterator over them: `iter(items)` (the builtin, which no binding hides at `scopes`)
    or `items.__iter__()`, the method `iter()` calls, which older code writes out (`loader.__iter__().next()`)."""
    return _builtin_or_dunder(node, ctx, scopes, "iter", "__iter__")


def advanced_iterator(node: cst.CSTNode, ctx: "FileContext", scopes: Sequence[cst.CSTNode]) -> Optional[cst.BaseExpression]:
    """`it` when `node` takes its next item: `next(it)` (the builtin, no default) or `it.__next__()`."""
    return _builtin_or_dunder(node, ctx, scopes, "next", "__next__")


def _builtin_or_dunder(
    node: cst.CSTNode, ctx: "FileContext", scopes: Sequence[cst.CSTNode], builtin: str, dunder: str,
) -> Optional[cst.BaseExpression]:
    """The one operand of `builtin(operand)` or `operand.dunder()`, the method the builtin calls."""
    if type(node) is not cst.Call:
        return None
    func = node.func
    if type(func) is cst.Attribute and func.attr.value == dunder and not node.args:
        return func.value
    if (
        type(func) is cst.Name and func.value == builtin and len(node.args) == 1
        and not node.args[0].star and node.args[0].keyword is None
        and ctx.scopes.binding_scope(builtin, scopes) is None
    ):
        return node.args[0].value
    return None


def _repeated_item(origin: Origin) -> Optional[cst.BaseExpression]:
    """For a list comprehension or generator whose item reads none of the names its `for` clauses bind (`[make() for
    _ in range(n)]`): the item, and where it means the same: where the comprehension is. In a class body (`outputs =
    [...]` under `class TestLoss:`) the item's names skip the class's own: only an item that reads none of those
    means the same there; else None."""
    node = origin.node
    if type(node) not in (cst.ListComp, cst.GeneratorExp):
        return None
    bound: set = set()
    clause = node.for_in
    while clause is not None:
        bound.update(name.value for name in _names_of(clause.target))
        clause = clause.inner_for_in
    read = _free_names(node.elt)
    if bound & read:
        return None
    around = origin.place.scopes[-1]
    if type(around) is cst.ClassDef:
        scope = origin.place.context.scopes.scope_of(around)
        if read & (scope.variables | scope.imports.keys()):
            return None
    return node.elt


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


def _free_names(node: cst.CSTNode) -> set:
    """The names `node` reads from around it: in a comprehension within it, those its own `for` clauses bind are its
    own, but where its first iterable reads them (`[Variable(torch.LongTensor([randint(0, 4) for _ in range(5)])) for
    _ in range(10)]`: the inner `_` is not the outer one)."""
    if type(node) not in _COMPREHENSIONS:
        names: set = set()
        pending = [node]
        while pending:  # a loop, not recursion: an item may be a long chain of operators
            current = pending.pop()
            if type(current) is cst.Name:
                names.add(current.value)
            elif type(current) in _COMPREHENSIONS:
                names |= _free_names(current)
            else:
                pending.extend(child_nodes(current))
        return names
    own: set = set()
    inner: set = set()
    clause = node.for_in
    while clause is not None:
        own.update(name.value for name in _names_of(clause.target))
        inner |= _free_names(clause.iter) if clause is not node.for_in else set()
        for condition in clause.ifs:
            inner |= _free_names(condition.test)
        clause = clause.inner_for_in
    for part in (node.key, node.value) if type(node) is cst.DictComp else (node.elt,):
        inner |= _free_names(part)
    return _free_names(node.for_in.iter) | (inner - own)


def _mark_reads(part: cst.CSTNode, bound: Dict[str, _ClauseTarget], found: Dict[int, _ClauseTarget]) -> None:
    """Note in `found` each name `part` reads that `bound` holds (by the name's id)."""
    if not bound:
        return
    for name in _names_of(part):
        target = bound.get(name.value)
        if target is not None:
            found[id(name)] = target


def _target_paths(target: cst.CSTNode, path: Tuple[int, ...]) -> List[Tuple[cst.Name, Optional[Tuple[int, ...]]]]:
    """The names a `for` target binds, each with its index path in the item (`i, (a, b)`: `b` is `(1, 1)`); None for
    the starred one and those after it, whose index is not known."""
    if type(target) is cst.Name:
        return [(target, path)]
    found: List[Tuple[cst.Name, Optional[Tuple[int, ...]]]] = []
    if type(target) in (cst.Tuple, cst.List):
        starred = False
        for index, item in enumerate(target.elements):
            starred = starred or type(item) is cst.StarredElement
            found += [(name, None) for name in _names_of(item.value)] if starred else _target_paths(item.value, path + (index,))
    return found


def _names_of(node: cst.CSTNode) -> List[cst.Name]:
    found: List[cst.Name] = []
    pending = [node]
    while pending:
        current = pending.pop()
        if type(current) is cst.Name:
            found.append(current)
        pending.extend(child_nodes(current))
    return found


def _is_none(node: cst.CSTNode) -> bool:
    return type(node) is cst.Name and node.value == "None"


def partial_call(call: cst.Call, ctx: "FileContext", stack: Optional[Sequence[cst.CSTNode]] = None) -> Optional[cst.Call]:
    """For `functools.partial(f, *args, **keywords)` (`from functools import partial as p` too): the call of `f` that
    every call of the partial makes, as far as the partial fixes it, `f(*args, **keywords)`, for the rules that judge a
    call by its callee and keywords (`partial(nn.CrossEntropyLoss, reduce=False)` passes `reduce=False` to the loss);
    else None. The view is made of the partial's own nodes, so a finding on its callee or an argument lands on the
    partial's; the view itself is not in the file: a rule reports on, or replaces, the partial call."""
    if not call.args or not ctx.qualified_name_in(call.func, PARTIAL, stack):
        return None
    wrapped = call.args[0]
    if wrapped.keyword is not None or wrapped.star:
        return None
    return call.with_changes(func=wrapped.value, args=call.args[1:])


def _wrapped_module(origin: Origin) -> Optional[cst.BaseExpression]:
    """What the identity wrapper call `origin` wraps (`net` of `nn.DataParallel(net)`), None for any other origin."""
    call = origin.node
    if type(call) is not cst.Call or origin.applied or origin.opaque or syntax.terminal_name(call.func) not in _WRAPPER_LAST_PARTS:
        return None
    if not origin.place.context.qualified_name_in(call.func, IDENTITY_WRAPPERS, origin.place.stack):
        return None
    wrapped = syntax.positional(call, 0) or syntax.keyword(call, "module") or syntax.keyword(call, "data")
    return wrapped.value if wrapped is not None else None


def _dict_entries(container: Origin) -> Optional[List[Tuple[Optional[cst.BaseExpression], cst.BaseExpression]]]:
    """(key, value) of each entry of a dict written out: a `{...}` literal without `**`, or a call of the builtin
    `dict` with keywords only (`dict(train=..., val=...)`: the keys are names, given as None); None for anything else."""
    node = container.node
    if container.applied or container.opaque:
        return None
    if type(node) is cst.Dict:
        if all(type(element) is cst.DictElement for element in node.elements):
            return [(element.key, element.value) for element in node.elements]
        return None
    if (
        type(node) is cst.Call and type(node.func) is cst.Name and node.func.value == "dict" and node.args
        and all(arg.keyword is not None and not arg.star for arg in node.args)
        and container.place.context.scopes.binding_scope("dict", container.place.scopes) is None
    ):
        return [(None, arg.value) for arg in node.args]
    return None


def _distinct(origins: List[Origin]) -> List[Origin]:
    """One of each origin: two paths often lead to the same assignment."""
    seen = set()
    found = []
    for origin in origins:
        key = (id(origin.node), id(origin.place.statement), origin.applied, origin.opaque)
        if key not in seen:
            seen.add(key)
            found.append(origin)
    return found


def method_of(model_class: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    for statement in model_class.body.body:
        if type(statement) is cst.FunctionDef and statement.name.value == name:
            return statement
    return None


# How many classes up `inherited_method` looks for a method.
_MAX_BASES_DEPTH = 4


def inherited_method(built: Origin, name: str, depth: int = 0) -> Optional[Origin]:
    """The method `name` an instance of the class `built` (a class's origin) calls: the class's own, else the first
    base's of the project that has it, `_MAX_BASES_DEPTH` classes up (`TrainOptions(BaseOptions)` calling
    `BaseOptions.parse`)."""
    scopes = built.place.scopes + (built.node,)
    method = method_of(built.node, name)
    if method is not None:
        return Origin(method, Place(built.place.context, scopes))
    if depth >= _MAX_BASES_DEPTH:
        return None
    values = Values.of(built.place.context)
    for base in built.node.bases:
        for origin in values.origins(base.value, built.place.scopes):
            if type(origin.node) is cst.ClassDef:
                found = inherited_method(origin, name, depth + 1)
                if found is not None:
                    return found
    return None


def _with_subclasses(base: cst.ClassDef, module: cst.Module) -> List[cst.ClassDef]:
    """`base` (a class at the top of `module`) and the classes at the top of `module` that derive from it, directly or
    through one another, by name (`class Trainer(BaseTrainer):`)."""
    found = [base]
    names = {base.name.value}
    for statement in module.body:  # a subclass is defined after its base
        if type(statement) is cst.ClassDef and statement is not base and any(
            type(arg.value) is cst.Name and arg.value.value in names for arg in statement.bases
        ):
            found.append(statement)
            names.add(statement.name.value)
    return found


def _constant_passed(function: cst.FunctionDef, around: cst.CSTNode, name: str, call: cst.Call) -> object:
    """Whether what `call` gives the parameter `name` of `function` (defined in `around`) is true, for a constant
    (`True`, `False`, `None`, an integer) passed or left as the default; `_MISSING` for anything else. Positional
    arguments are read past the receiver of a method called through an instance, and not read for a decorated method
    (a static method's first parameter is the call's first argument)."""
    params = function.params
    param = next((param for param in (*params.posonly_params, *params.params, *params.kwonly_params) if param.name.value == name), None)
    if param is None or any(arg.star for arg in call.args):
        return _MISSING
    method = type(around) is cst.ClassDef
    if method and function.decorators:
        keyword = syntax.keyword(call, name)
        written = keyword.value if keyword is not None else param.default
    else:
        written = syntax.argument_for(call, function, name, method) or param.default
    value = syntax.literal(written)
    return bool(value) if value is None or type(value) in (bool, int) else _MISSING


def _is_self(expr: cst.CSTNode, scopes: Sequence[cst.CSTNode]) -> bool:
    """`expr` is the first parameter of the method whose code holds the point (`scopes`, innermost last): of a def
    made directly in a class. The first parameter of any other function is what its calls pass (`model` in
    `def train(model, loader)`)."""
    scope = scopes[-1]
    if type(expr) is not cst.Name or type(scope) is not cst.FunctionDef or len(scopes) < 2 or type(scopes[-2]) is not cst.ClassDef:
        return False
    if any(syntax.terminal_name(decorator.decorator) == "staticmethod" for decorator in scope.decorators):
        return False  # its first parameter is whatever the call passes
    params = scope.params.posonly_params or scope.params.params
    return bool(params) and params[0].name.value == expr.value


class _Returns(OwnScopeVisitor):
    def __init__(self):
        self.returns: List[cst.Return] = []

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.returns.append(node)


def _on_self(call: cst.Call, scopes: Tuple[cst.CSTNode, ...], model_class: cst.ClassDef) -> bool:
    """`call` is `self.name(...)` made in a plain method of `model_class`, `self` being that method's first
    parameter (a call in a function nested in the method, or through `cls`, is not)."""
    func = call.func
    if type(func) is not cst.Attribute or type(func.value) is not cst.Name or len(scopes) < 2 or scopes[-2] is not model_class:
        return False
    function = scopes[-1]
    if type(function) is not cst.FunctionDef or function.decorators:
        return False
    positional = list(function.params.posonly_params) + list(function.params.params)
    return bool(positional) and positional[0].name.value == func.value.value


class _NameUses(cst.CSTVisitor):
    """Each name's calls by that name (`make_loader(...)`) with where they are made, the names read in any other way
    (passed on, assigned, decorated: a call could then happen anywhere), and how many `def`s and `class`es bind each
    name. Names that are no reads are left out: attribute names, keywords of a call, parameters.

    One walk of the file, with handlers for the node types it reads and for statements (a read-only visitor costs
    nothing at the others)."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.calls: Dict[str, List[Tuple[cst.Call, Tuple[cst.CSTNode, ...], Optional[cst.CSTNode]]]] = {}
        self.other: set = set()
        self.definitions: Dict[str, int] = {}
        # Calls of a method name that a class at the top of the module defines (`model.init_hidden(...)`), and such
        # names read as an attribute without a call (`callback = trainer.fit`).
        self.method_calls: Dict[str, List[Tuple[cst.Call, Tuple[cst.CSTNode, ...], Optional[cst.CSTNode]]]] = {}
        self.method_reads: set = set()
        self._callees: set = set()
        self._methods = _top_level_methods(ctx.module)
        self._not_reads: set = set()
        # The scope nodes around the visited node, outermost first; a def's scope starts at its body (its decorators
        # and defaults are evaluated around it).
        self._scopes: Tuple[cst.CSTNode, ...] = (ctx.module,)
        self._bodies: Dict[int, cst.CSTNode] = {}
        # The statements around the visited node, outermost first.
        self._statements: List[cst.CSTNode] = []

    def enter_statement(self, node: cst.CSTNode) -> None:
        self._statements.append(node)

    def leave_statement(self, node: cst.CSTNode) -> None:
        self._statements.pop()

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._not_reads:
            self.other.add(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is cst.Name:
            self._not_reads.add(id(func))
            self.calls.setdefault(func.value, []).append((node, self._scopes, self._statements[-1] if self._statements else None))
        elif type(func) is cst.Attribute and func.attr.value in self._methods:
            self._callees.add(id(func))
            self.method_calls.setdefault(func.attr.value, []).append((node, self._scopes, self._statements[-1] if self._statements else None))
        for arg in node.args:
            if arg.keyword is not None:
                self._not_reads.add(id(arg.keyword))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_reads.add(id(node.attr))
        if node.attr.value in self._methods and id(node) not in self._callees:
            self.method_reads.add(node.attr.value)

    def visit_Param(self, node: cst.Param) -> None:
        self._not_reads.add(id(node.name))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._definition(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._statements.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._definition(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self._statements.pop()

    def _definition(self, node) -> None:
        self._statements.append(node)
        self._not_reads.add(id(node.name))
        self.definitions[node.name.value] = self.definitions.get(node.name.value, 0) + 1
        self._bodies[id(node.body)] = node

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._enter_body(node)

    def leave_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._leave_body(node)

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        self._enter_body(node)

    def leave_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        self._leave_body(node)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._scopes += (node,)

    def leave_Lambda(self, node: cst.Lambda) -> None:
        self._scopes = self._scopes[:-1]

    def _enter_body(self, block) -> None:
        owner = self._bodies.get(id(block))
        if owner is not None:
            self._scopes += (owner,)

    def _leave_body(self, block) -> None:
        if id(block) in self._bodies:
            self._scopes = self._scopes[:-1]


# The other statements only mark where a call is made.
for _statement_type in STATEMENT_TYPES - {cst.FunctionDef, cst.ClassDef}:
    setattr(_NameUses, f"visit_{_statement_type.__name__}", _NameUses.enter_statement)
    setattr(_NameUses, f"leave_{_statement_type.__name__}", _NameUses.leave_statement)


def _position_read(flow: Flow, place: Place) -> Optional[Tuple[int, Tuple[int, ...]]]:
    """Where `place` reads the names of its scope (`flow`): at its statement; for the module itself, with no statement
    (a name another file imports, `_in_project_file`), after the module's last statement: an import reads what the
    module's run left bound (a class defined twice: the later one)."""
    position = flow.position(place.stack)
    if position is None and place.statement is None and type(flow.node) is cst.Module:
        return 1 + max((order for order, _ in flow.statements.values()), default=0), ()
    return position


def _seen_inside(flow: Flow, name: str, inner: Optional[cst.CSTNode]) -> List[Binding]:
    """The bindings of `name` in the scope of `flow` that code inside `inner` (a def or class statement of that scope)
    may see: it runs any time after the definition has run, so every binding after it, and of those before it the
    ones that reach it (after `Net = A` then `Net = B`, a function defined below sees `B`: a notebook's later cell
    replaces a class an earlier cell defined). Inside a lambda, every binding."""
    position = flow.statements.get(id(inner)) if inner is not None and type(inner) in (cst.FunctionDef, cst.ClassDef) else None
    if position is None:
        return flow.reaching(name, None)
    later = [binding for binding in flow.bindings.get(name, ()) if binding.order >= position[0]]
    return flow.reaching(name, position) + later


def _top_level_methods(module: cst.Module) -> FrozenSet[str]:
    return frozenset(
        statement.name.value for cls in module.body if type(cls) is cst.ClassDef
        for statement in cls.body.body if type(statement) is cst.FunctionDef
    )


def path_to(node: cst.CSTNode, scopes: Tuple[cst.CSTNode, ...]) -> Tuple[cst.CSTNode, ...]:
    """Every node around `node`, outermost first, ending with it (a rule's stack), found from the innermost of the
    scopes around it: asked for a few calls, so no stack is kept for every call of the file."""
    # Depth first without recursion (a long `a + b + ...` nests as deep as it is long): each entry is a node and
    # the children of it still to try.
    path: List[cst.CSTNode] = [scopes[-1]]
    pending = [iter(child_nodes(scopes[-1]))]
    while pending and path[-1] is not node:
        child = next(pending[-1], None)
        if child is None:
            pending.pop()
            path.pop()
        else:
            path.append(child)
            pending.append(iter(child_nodes(child)))
    # Outside the innermost scope only the scopes are kept: a stack is read back to the function holding its point.
    return tuple(scopes[:-1]) + tuple(path)


def _runs_itself(module: cst.Module) -> bool:
    """A module-level statement calls what the module defines (`main()` without a `__main__` guard, `Trainer(...)`,
    `trainer.fit()` on an instance made there): importing the file runs it, so it is a program rather than a library
    others import."""
    defined = {statement.name.value for statement in module.body if type(statement) in (cst.FunctionDef, cst.ClassDef)}
    calls = []
    for statement in module.body:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.Expr and type(small.value) is cst.Call:
                calls.append(small.value)
            elif type(small) is cst.Assign and type(small.value) is cst.Call:
                if _called_head(small.value.func) in defined:
                    defined.update(
                        target.target.value for target in small.targets if type(target.target) is cst.Name
                    )
                calls.append(small.value)
    return any(_called_head(call.func) in defined for call in calls)


def _called_head(expr: cst.BaseExpression) -> Optional[str]:
    """The name a chain of attributes and calls starts at: `Trainer` for `Trainer(...).fit`."""
    while type(expr) is cst.Attribute or type(expr) is cst.Call:
        expr = expr.value if type(expr) is cst.Attribute else expr.func
    return expr.value if type(expr) is cst.Name else None
