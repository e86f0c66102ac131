"""Whether code under an `if` runs, when its test reads values known where the code is reached.

Two sources of known values: the literal arguments of the call that runs a function (`run_epoch(...,
mode="eval")` against its `if mode == "train":`), also where that function passes a parameter on unchanged to
the functions it calls (`loss_epoch(..., opt=None)` calling `loss_batch(..., opt)` against its `if opt is not
None:`), and the flags a function sets to a literal before its loop
(`self.is_test = False` against `if self.is_test:` in a helper the loop calls). A test that reads anything else
is unknown, and code under it may run.
"""

from __future__ import annotations

import operator
from typing import Callable, Collection, Dict, Iterator, Mapping, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.loops import enclosing
from torchlint.engine.callgraph import CallGraph
from torchlint.engine.scopes import dotted_name
from torchlint.engine.walk import walk_visitor

# An `if` test (or an `a if c else b` condition) and the arm that holds the code: True for the body.
Arm = Tuple[cst.BaseExpression, bool]

_COMPARISONS: Dict[type, Callable[[object, object], bool]] = {
    cst.Equal: operator.eq, cst.NotEqual: operator.ne, cst.Is: operator.is_, cst.IsNot: operator.is_not,
    cst.In: lambda left, right: left in right, cst.NotIn: lambda left, right: left not in right,
}
_UNKNOWN = syntax.MISSING


def arms(stack: Sequence[cst.CSTNode]) -> Tuple[Arm, ...]:
    """The tests that hold the innermost point of `stack` within its function, innermost first, each with its arm."""
    found = []
    for index, node in enclosing(stack):
        if type(node) is cst.If or type(node) is cst.IfExp:
            inner = stack[index + 1]
            if inner is node.test:
                continue  # the test itself runs whichever arm follows
            found.append((node.test, inner is node.body))
    return tuple(found)


def skipped(held_by: Sequence[Arm], known: Mapping[str, object]) -> bool:
    """Some test holding the code is known to pick the other arm."""
    for test, arm in held_by:
        value = truth(test, known)
        if value is not None and value is not arm:
            return True
    return False


def truth(test: cst.BaseExpression, known: Mapping[str, object]) -> Optional[bool]:
    """The truth of `test` when the dotted names in `known` hold their values; None when it reads anything else."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = truth(test.expression, known)
        return None if inner is None else not inner
    if type(test) is cst.BooleanOperation:
        left, right = truth(test.left, known), truth(test.right, known)
        if type(test.operator) is cst.And:
            return False if False in (left, right) else (True if left and right else None)
        return True if True in (left, right) else (False if left is False and right is False else None)
    if type(test) is cst.Comparison:
        left = _value(test.left, known)
        for comparison in test.comparisons:
            right = _value(comparison.comparator, known)
            compare = _COMPARISONS.get(type(comparison.operator))
            if left is _UNKNOWN or right is _UNKNOWN or compare is None:
                return None
            try:
                if not compare(left, right):
                    return False
            except TypeError:  # `"a" in 3`: the program would raise; nothing is known
                return None
            left = right
        return True
    value = _value(test, known)
    return None if value is _UNKNOWN else bool(value)


def _value(expr: cst.BaseExpression, known: Mapping[str, object]):
    name = dotted_name(expr) if type(expr) in (cst.Name, cst.Attribute) else None
    if name is not None and name in known:
        return known[name]
    return syntax.literal(expr, _UNKNOWN)


def literal_arguments(call: cst.Call, function: cst.FunctionDef, method: bool) -> Dict[str, object]:
    """Parameter name -> the literal `call` passes for it, or the parameter's literal default when it passes
    nothing. `method`: the call goes through an instance (`self.f(...)`), which fills the first parameter."""
    if any(argument.star for argument in call.args):
        return {}
    params = function.params
    found = {}
    for param in (list(params.posonly_params) + list(params.params))[1 if method else 0:] + list(params.kwonly_params):
        given = syntax.argument_for(call, function, param.name.value, method)
        value = syntax.literal(given if given is not None else param.default, _UNKNOWN)
        if value is not _UNKNOWN:
            found[param.name.value] = value
    return found


# Values a forwarded parameter carries on: those no call can change in place (a list passed on may be appended to).
_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes)


def forwarded_arguments(callgraph: CallGraph, call: cst.Call, callee: str, method: bool) -> Dict[str, Dict[str, object]]:
    """Function key -> parameter name -> the literal it holds in every run of that function that `call` of the
    file's function `callee` starts: `callee`'s own `literal_arguments`, and in the functions it reaches, a
    parameter whose every call there passes a literal, leaves it to a literal default, or passes on a parameter of
    the caller known there and never rebound in it (`loss_epoch(..., opt=None)` calling `loss_batch(..., opt)`).
    Only immutable values are carried on. A function reached in a cycle, named anywhere there but as the callee of
    a call (a callback run with other arguments), or when `callee` calls itself back, gets nothing past `callee`."""
    first = callgraph.functions.get(callee)
    if first is None or type(first.node) is not cst.FunctionDef:
        return {}
    known = {callee: literal_arguments(call, first.node, method)}
    region = {function.key: function for function in callgraph.reachable(callee, depth=len(callgraph.functions))}
    sites = {key: [(caller, site) for caller in region.values() for site in caller.calls if site.callee == key] for key in region}
    if sites[callee]:
        return known
    escaping = _named_besides_calls(region.values())
    pending = [key for key in region if key != callee]
    progress = True
    while progress:
        progress = False
        for key in list(pending):
            if all(caller.key in known for caller, _ in sites[key]):
                pending.remove(key)
                progress = True
                node = region[key].node
                if type(node) is cst.FunctionDef and key.rsplit(".", 1)[-1] not in escaping:
                    known[key] = _agreed(
                        _site_arguments(site.node, node, region[caller.key].node, known[caller.key]) for caller, site in sites[key]
                    )
    return known


def _site_arguments(call: cst.Call, function: cst.FunctionDef, caller: cst.CSTNode, caller_known: Mapping[str, object]) -> Dict[str, object]:
    """Parameter name of `function` -> the literal `call` in `caller` gives it: a literal argument, a literal default,
    or a parameter of `caller` that holds a known value and that `caller` never rebinds."""
    if any(argument.star for argument in call.args) or type(caller) is not cst.FunctionDef:
        return {}
    method = type(call.func) is cst.Attribute
    params = function.params
    rebound = assigned_among(caller.body, set(caller_known))
    found = {}
    for param in (list(params.posonly_params) + list(params.params))[1 if method else 0:] + list(params.kwonly_params):
        given = syntax.argument_for(call, function, param.name.value, method)
        if type(given) is cst.Name and given.value in caller_known and given.value not in rebound:
            value = caller_known[given.value]
        else:
            value = syntax.literal(given if given is not None else param.default, _UNKNOWN)
        if isinstance(value, _IMMUTABLE):
            found[param.name.value] = value
    return found


def _agreed(passed: Iterator[Dict[str, object]]) -> Dict[str, object]:
    """The entries every one of `passed` holds with the same value (`1` and `True` differ)."""
    found: Optional[Dict[str, object]] = None
    for arguments in passed:
        if found is None:
            found = dict(arguments)
            continue
        for name in list(found):
            if name not in arguments or type(arguments[name]) is not type(found[name]) or arguments[name] != found[name]:
                del found[name]
    return found or {}


def _named_besides_calls(functions) -> Set[str]:
    """Names (and attribute names) that the bodies of `functions` use other than as what a call calls: a function
    named there may be passed on and run with other arguments."""
    found: Set[str] = set()

    called: Set[int] = set()  # ids of the names calls call, seen before the call's children

    class _Names(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            called.add(id(node.func.attr if type(node.func) is cst.Attribute else node.func))

        def visit_Name(self, node: cst.Name) -> None:
            if id(node) not in called:
                found.add(node.value)

    for function in functions:
        if function.node is not None:
            walk_visitor(function.node.body, _Names())
    return found


def literal_flags_before(statement_path: Sequence[cst.CSTNode]) -> Dict[str, object]:
    """Dotted name -> the literal it is set to by the plain assignments (`self.is_test = False`) that run before
    the last of `statement_path` in the same blocks: `statement_path` holds the nodes from a function down to a
    statement in it, outermost first. The last assignment of a name wins."""
    found: Dict[str, object] = {}
    for block, inner in zip(statement_path, statement_path[1:]):
        body = getattr(block, "body", None)
        if type(block) not in (cst.IndentedBlock, cst.Module) or not isinstance(body, (list, tuple)):
            continue
        for statement in body:
            if statement is inner:
                break
            for target, value in _plain_assignments(statement):
                found[target] = value
    return found


def _plain_assignments(statement: cst.CSTNode) -> Iterator[Tuple[str, object]]:
    if type(statement) is not cst.SimpleStatementLine:
        return
    for small in statement.body:
        if type(small) is cst.Assign:
            value = syntax.literal(small.value, _UNKNOWN)
            for target in small.targets:
                name = dotted_name(target.target) if type(target.target) in (cst.Name, cst.Attribute) else None
                if name is not None and value is not _UNKNOWN:
                    yield name, value


def assigned_among(node: cst.CSTNode, names: Collection[str]) -> Set[str]:
    """Those of the dotted `names` that something in `node` binds (an assignment, augmented or annotated, a loop,
    comprehension, `with` or walrus target, a `del`)."""
    found: Set[str] = set()

    class _Targets(cst.CSTVisitor):
        def _note(self, target: cst.BaseExpression) -> None:
            if type(target) in (cst.Name, cst.Attribute):
                name = dotted_name(target)
                if name in names:
                    found.add(name)
            elif type(target) in (cst.Tuple, cst.List):
                for element in target.elements:
                    self._note(element.value)

        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            self._note(node.target)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self._note(node.target)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            self._note(node.target)

        def visit_For(self, node: cst.For) -> None:
            self._note(node.target)

        def visit_AsName(self, node: cst.AsName) -> None:
            self._note(node.name)

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            self._note(node.target)

        def visit_CompFor(self, node: cst.CompFor) -> None:
            self._note(node.target)

        def visit_Del(self, node: cst.Del) -> None:
            self._note(node.target)

    walk_visitor(node, _Targets())
    return found
