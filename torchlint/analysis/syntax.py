"""Reading calls and literals: the syntax helpers under the vocabulary (`semantics.py`) and the value model.

Nothing here knows torch or follows a name: each function reads the node it is given.
"""

from __future__ import annotations

import ast
from typing import List, Optional, Tuple

import libcst as cst

from torchlint.engine.scopes import dotted_name

# What `literal` and the value model answer for a value that is not a known constant.
MISSING = object()
_CONSTANTS = {"True": True, "False": False, "None": None}


def keyword(call: cst.Call, name: str) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def keyword_is_true(call: cst.Call, name: str) -> bool:
    """The call passes `name=True`, written literally."""
    given = keyword(call, name)
    return given is not None and literal(given.value) is True


def has_star_kwargs(call: cst.Call) -> bool:
    return any(arg.star == "**" for arg in call.args)


def positional(call: cst.Call, index: int) -> Optional[cst.Arg]:
    args = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return args[index] if index < len(args) else None


def call_argument(call: cst.Call, index: int, name: str) -> Optional[cst.BaseExpression]:
    """The value given for the parameter `name`, by keyword or at its position `index`."""
    arg = keyword(call, name) or positional(call, index)
    return arg.value if arg is not None else None


def argument_for(call: cst.Call, function: cst.FunctionDef, name: str, method: bool = False) -> Optional[cst.BaseExpression]:
    """What `call` of `function` passes for its parameter `name`; None for a call with `*args` or `**kwargs` or one
    that leaves it to its default. `method`: the call goes through an instance (`self.f(...)`), which fills the
    first parameter."""
    params = function.params
    ordered = [param.name.value for param in list(params.posonly_params) + list(params.params)][1 if method else 0:]
    if any(argument.star for argument in call.args):
        return None
    given = keyword(call, name) or (
        positional(call, ordered.index(name)) if name in ordered else None
    )
    return given.value if given is not None else None


def literal(node: Optional[cst.CSTNode], default=MISSING):
    """The value of a literal expression (numbers, strings, True/False/None, tuples of those), else `default`:
    what `ast.literal_eval` makes of the node's code (tests/test_syntax.py checks both agree on every fixture)."""
    if node is None:
        return default
    # The common shapes are read from the node; the rest is Python's reading of the generated code (ten times the
    # cost, and every `ast.literal_eval` leaves a cycle of closures for the collector). Most nodes asked about are
    # calls, names and attributes, which are never literals.
    node_type = type(node)
    if node_type is cst.Name:
        return _CONSTANTS.get(node.value, default)
    if node_type not in _MAYBE_LITERAL and not (node_type is cst.Call and _is_empty_set(node)):
        return default
    if not node.lpar:
        if node_type is cst.Integer:
            return int(node.value, 0)
        if node_type is cst.Float:
            return float(node.value)
        # A plain string without escapes or a carriage return (which Python's reading turns into a line feed).
        if node_type is cst.SimpleString and node.value[0] in "'\"" and "\\" not in node.value and "\r" not in node.value:
            quotes = 3 if node.value[:3] in ('"""', "'''") else 1
            return node.value[quotes:-quotes]
    if (node_type is cst.Tuple or node_type is cst.List) and not any(type(element) is cst.StarredElement for element in node.elements):
        values = [literal(element.value) for element in node.elements]
        if any(value is MISSING for value in values):
            return default
        return tuple(values) if node_type is cst.Tuple else values
    try:
        if node_type is cst.SimpleString and not node.lpar:
            return ast.literal_eval(node.value)
        return ast.literal_eval(cst.Module([]).code_for_node(node))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return default


# What `ast.literal_eval` can evaluate, besides a bare name and `set()`.
_MAYBE_LITERAL = frozenset({
    cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.UnaryOperation,
    cst.BinaryOperation, cst.Tuple, cst.List, cst.Set, cst.Dict, cst.Ellipsis,
})


def _is_empty_set(call: cst.Call) -> bool:
    return type(call.func) is cst.Name and call.func.value == "set" and not call.args


def is_missing(value) -> bool:
    return value is MISSING


def method_name(call: cst.Call) -> Optional[str]:
    """`m` for a call `receiver.m(...)`."""
    return call.func.attr.value if type(call.func) is cst.Attribute else None


def receiver(call: cst.Call) -> Optional[cst.BaseExpression]:
    return call.func.value if type(call.func) is cst.Attribute else None


def called_module(call: cst.Call) -> cst.BaseExpression:
    """What `call` applies, read as a module call: `model` for `model.forward(x)` as for `model(x)`, `self.block` for
    `self.block.forward(x)`; `call.func` for any other call. An explicit `forward` runs the same code on the same
    arguments as calling the module; it only skips the module's hooks, which no rule reads. `super().forward(x)` is
    the parent class's method run on this module, not a call of the module `super()` gives."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value != "forward":
        return func
    owner = func.value
    if type(owner) is cst.Call and type(owner.func) is cst.Name and owner.func.value == "super":
        return func
    return owner


def isinstance_test(test: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, List[cst.BaseExpression]]]:
    """For `isinstance(x, C)` or `isinstance(x, (C, D))`: the instance tested and the classes."""
    if type(test) is not cst.Call or type(test.func) is not cst.Name or test.func.value != "isinstance" or len(test.args) != 2:
        return None
    classes = test.args[1].value
    return test.args[0].value, [element.value for element in classes.elements] if type(classes) is cst.Tuple else [classes]


def terminal_name(expr: cst.BaseExpression) -> Optional[str]:
    """`opt` for `opt`, `self.opt`, `trainer.opt`."""
    if type(expr) is cst.Name:
        return expr.value
    if type(expr) is cst.Attribute:
        return expr.attr.value
    return None


def head_name(expr: cst.BaseExpression) -> Optional[str]:
    """`utils` for `utils`, `utils.data.build`; None when the chain does not start at a name (`f().x`)."""
    while type(expr) is cst.Attribute:
        expr = expr.value
    return expr.value if type(expr) is cst.Name else None


def expression_key(code: str) -> str:
    """What an expression's source (`ctx.code(expr)`) says, without how it is written: line breaks, spaces,
    parentheses and quote style do not change it (`path + 'net.pt'` and `(path\n + "net.pt")` give one key)."""
    try:
        return ast.dump(ast.parse(f"({code}\n)", mode="eval"))
    except (SyntaxError, ValueError):  # an expression Python's parser takes only in context: compare its text
        return code


def names_in(expr: Optional[cst.CSTNode]) -> List[str]:
    """Variables (`loss`) and attribute chains (`self.total`) an expression reads."""
    found: List[str] = []
    _add_names(expr, found)
    return found


def _add_names(expr: Optional[cst.CSTNode], found: List[str]) -> None:
    # Asked of most assignments' values: exact types (`isinstance` on libcst's abstract node classes is slow), and
    # one list filled down the recursion rather than a generator at each level.
    if expr is None:
        return
    dotted = dotted_name(expr)
    if dotted is not None:
        found.append(dotted)
        return
    expr_type = type(expr)
    if expr_type is cst.Call:
        _add_names(receiver(expr), found)
        for arg in expr.args:
            _add_names(arg.value, found)
    elif expr_type is cst.BinaryOperation:
        _add_names(expr.left, found)
        _add_names(expr.right, found)
    elif expr_type is cst.UnaryOperation:
        _add_names(expr.expression, found)
    elif expr_type is cst.Subscript or expr_type is cst.Attribute:
        _add_names(expr.value, found)
    elif expr_type is cst.Tuple or expr_type is cst.List or expr_type is cst.Dict:
        for element in expr.elements:
            _add_names(element.value, found)
    elif expr_type is cst.IfExp:  # either arm is the value; the test is only read
        _add_names(expr.body, found)
        _add_names(expr.orelse, found)
