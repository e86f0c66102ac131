from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.training import optimizer_class
from torchlint.engine.scopes import SCOPE_TYPES
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

TENSOR_FACTORIES = frozenset(
    f"torch.{name}"
    for name in (
        "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace",
        "eye", "tensor", "normal", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
        "randint_like",
    )
)
# Drawing in another dtype or on another device gives other numbers.
RANDOM_FACTORIES = frozenset(
    f"torch.{name}" for name in ("rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like", "randint_like")
)
# Their values are exact in every dtype; `torch.tensor([0.1])` or `torch.arange(0, 1, 0.1)` built in float64
# differ from the float32 values cast to float64.
EXACT_IN_EVERY_DTYPE = frozenset(
    f"torch.{name}" for name in ("zeros", "ones", "empty", "eye", "zeros_like", "ones_like", "empty_like")
)
DTYPE_NAMES = frozenset({
    "float", "float32", "double", "float64", "half", "float16", "bfloat16", "int8", "int16", "int32", "int64",
    "long", "int", "short", "uint8", "bool", "complex64", "complex128",
})
# Conversion method -> the dtype it casts to (None: it moves the tensor).
CONVERSIONS = {
    "to": None, "cuda": None, "cpu": None, "type": None,
    "float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
}
# A factory with requires_grad=True builds a floating tensor: the default dtype, float32, unless told otherwise.
FLOAT32 = frozenset({"torch.float", "torch.float32"})
_PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_NO_SPACE = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))


def non_leaf_factory(call: cst.Call, ctx, stack=None) -> Optional[cst.Call]:
    """For `torch.randn(3, requires_grad=True).to(device)`: the factory call whose result the conversion copies."""
    factory = semantics.receiver(call)
    if semantics.method_name(call) not in CONVERSIONS or not isinstance(factory, cst.Call):
        return None
    if ctx.qualified_name(factory.func, stack) not in TENSOR_FACTORIES:
        return None
    requires_grad = semantics.keyword(factory, "requires_grad")
    return factory if requires_grad is not None and semantics.literal(requires_grad.value) is True else None


class NonLeafRequiresGrad(Rule):
    """
    ## What it does
    Flags a tensor factory called with `requires_grad=True` whose result goes straight
    into `.to(...)`, `.cuda()`, `.cpu()`, `.float()`, `.double()`, `.half()`, `.bfloat16()`
    or `.type(...)` in the same expression:
    `w = torch.randn(3, requires_grad=True).to(device)`.

    `.requires_grad_()` applied after the conversion, and `nn.Parameter(...)` around it,
    are not flagged: both give a leaf. Reported only where being a leaf matters: the
    result is given to an optimizer (in its call, or in a list or dict it is given), its
    `.grad` or `.is_leaf` is read in the file, or it is returned. A result used only as
    data (copied with `.clone().detach()`, passed as the gradient of `backward`, fed to
    a model) harms nothing and is not reported; what that gives up: a `.grad` read in
    another file.

    ## Why is this bad?
    A conversion that changes the device or the dtype is an operation autograd records:
    the variable holds its output, a non-leaf, and the leaf that receives gradients is
    the temporary nobody kept. Observed on torch 2.13: after backward `w.grad` is `None`
    (a warning appears only when `.grad` is read), and `torch.optim.SGD([w])` raises
    `ValueError: can't optimize a non-leaf Tensor`. A conversion that changes nothing
    (`.float()` on float32, `.cpu()` on the CPU) returns the tensor itself and keeps the
    leaf, so those are not reported: `.cpu()` of a factory built on the CPU, `.float()`
    of one built in float32.

    ## Fix safety
    The device and dtype move into the factory's keyword arguments
    (`torch.zeros(3, requires_grad=True, device=device)`), which builds the tensor
    directly as a leaf. The fix is safe when the values stay the same: a device move of
    a non-random factory, or a dtype change of `zeros`/`ones`/`empty`/`eye`. It is unsafe
    for random factories (`randn` drawn in float64, or on the GPU's generator, gives
    other numbers than float32 CPU draws converted afterwards) and for dtype changes of
    `tensor`/`full`/`arange`/`linspace` (`torch.tensor([0.1])` cast to float64 is not
    float64 `0.1`). No fix is offered when the factory already passes that keyword or
    `**kwargs`, or when the conversion's argument is not clearly a device or a dtype.
    """

    code = "TL104"
    name = "non-leaf-requires-grad"
    # Only a factory call given `requires_grad=True` as a keyword is reported.
    triggers = words("requires_grad")
    # ... and only where a conversion method is called on it.
    call_parts = frozenset(CONVERSIONS)
    fix_safety = "safe or unsafe"
    message = (
        "converting a `requires_grad=True` factory result gives a non-leaf copy whenever the device or dtype "
        "changes: its `.grad` stays None after backward and optimizers refuse it (`ValueError: can't optimize a "
        "non-leaf Tensor`); pass the device/dtype to the factory instead"
    )
    example = """
    import torch

    weights = torch.ones(3, requires_grad=True).to(device)  # expect: TL104:11
    bias = torch.zeros(3, requires_grad=True).half()  # expect: TL104:8
    optimizer = torch.optim.SGD([weights, bias], lr=0.1)
    """
    use_instead = """
    import torch

    weights = torch.ones(3, requires_grad=True, device=device)
    bias = torch.zeros(3, requires_grad=True, dtype=torch.float16)
    optimizer = torch.optim.SGD([weights, bias], lr=0.1)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # (conversion, its fix, the code of the targets it is assigned to): reported in `finish` if one matters.
        self.pending: List[Tuple[cst.Call, Optional[Fix], Tuple[str, ...]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        factory = self._factory_behind_no_ops(node)
        if factory is None or self._made_leaf_again(node) or self._changes_nothing(node, factory):
            return
        keywords = self._keywords(node, factory)
        fix = None
        if keywords:
            added = [cst.Arg(value=value, keyword=cst.Name(name), equal=_NO_SPACE) for name, value in keywords]
            moved = factory.with_changes(args=_appended(factory.args, added))
            described = ", ".join(f"{name}={self.ctx.code(value)}" for name, value in keywords)
            edit = self.ctx.replace(node, self.ctx.code(moved))
            factory_name = self.ctx.qualified_name(factory.func)
            same_values = factory_name not in RANDOM_FACTORIES and (
                factory_name in EXACT_IN_EVERY_DTYPE or all(name == "device" for name, _ in keywords)
            )
            fix = (Fix.safe if same_values else Fix.unsafe)(f"pass `{described}` to the factory", edit)
        # The value that leaves the chain of conversions this one is in (`.type(...)` then `.to(device)`) is what the
        # code keeps: where it goes decides whether being a leaf matters.
        stack = self.ctx.stack
        index = len(stack) - 1
        while (
            index >= 2 and type(stack[index - 1]) is cst.Attribute and type(stack[index - 2]) is cst.Call
            and semantics.method_name(stack[index - 2]) in CONVERSIONS
        ):
            index -= 2
        parent = stack[index - 1] if index >= 1 else None
        targets = _plain_targets(parent, stack[index])
        if targets:
            self.pending.append((node, fix, tuple(self.ctx.code(target) for target in targets)))
        elif type(parent) is not cst.Arg or any(optimizer_class(outer, self.ctx) for outer in self.ctx.stack[:-1]):
            # An argument of any other call is a temporary whose `.grad` nobody can read.
            self.report(node, fix=fix)

    def finish(self) -> None:
        if not self.pending:
            return
        uses = _LeafUses(self.ctx)
        self.ctx.module.visit(uses)
        for node, fix, targets in self.pending:
            if any(target in uses.matter for target in targets):
                self.report(node, fix=fix)

    def _factory_behind_no_ops(self, conversion: cst.Call) -> Optional[cst.Call]:
        """The factory this conversion copies, looking through conversions that change nothing
        (`torch.randn(3, requires_grad=True).float().to(device)` is reported once, at `.to`)."""
        inner = semantics.receiver(conversion)
        if isinstance(inner, cst.Call) and semantics.method_name(inner) in CONVERSIONS:
            factory = self._factory_behind_no_ops(inner)
            if factory is None or not self._changes_nothing(inner, factory):
                return None
            return factory if semantics.method_name(conversion) in CONVERSIONS else None
        return non_leaf_factory(conversion, self.ctx)

    def _changes_nothing(self, conversion: cst.Call, factory: cst.Call) -> bool:
        """`.cpu()` of a factory built on the CPU, `.float()` of one built in float32: torch returns the
        tensor itself, still a leaf (observed on torch 2.13), so there is nothing to report."""
        keywords = self._conversion_keywords(semantics.method_name(conversion), conversion)
        if not keywords:
            return False
        for name, value in keywords:
            given = semantics.keyword(factory, name)
            if name == "device":
                wanted = semantics.literal(value)
                if wanted != "cpu" or (given is not None and semantics.literal(given.value) != "cpu"):
                    return False
            elif self.ctx.qualified_name(value) not in FLOAT32 or (given is not None and self.ctx.qualified_name(given.value) not in FLOAT32):
                return False
        return True

    def _made_leaf_again(self, conversion: cst.Call) -> bool:
        """`nn.Parameter(<conversion chain>)` and `<conversion chain>.requires_grad_()` are leaves."""
        stack = self.ctx.stack
        index = len(stack) - 1
        while index >= 2 and isinstance(stack[index - 1], cst.Attribute) and isinstance(stack[index - 2], cst.Call):
            outer = stack[index - 2]
            if semantics.method_name(outer) == "requires_grad_":
                return True
            if semantics.method_name(outer) not in CONVERSIONS:
                return False
            index -= 2
        if index >= 2 and isinstance(stack[index - 1], cst.Arg) and isinstance(stack[index - 2], cst.Call):
            return self.ctx.qualified_name(stack[index - 2].func) in _PARAMETER
        return False

    def _keywords(self, conversion: cst.Call, factory: cst.Call) -> List[Tuple[str, cst.BaseExpression]]:
        """The `device=`/`dtype=` arguments equivalent to the conversion, or [] when that is not clear."""
        if semantics.has_star_kwargs(factory):
            return []
        method = semantics.method_name(conversion)
        keywords = self._conversion_keywords(method, conversion)
        if not keywords or any(semantics.keyword(factory, name) is not None for name, _ in keywords):
            return []
        return keywords

    def _conversion_keywords(self, method: str, call: cst.Call) -> List[Tuple[str, cst.BaseExpression]]:
        if CONVERSIONS[method] is not None:
            torch_name = self._torch_name()
            if call.args or torch_name is None:
                return []
            return [("dtype", cst.parse_expression(f"{torch_name}.{CONVERSIONS[method]}"))]
        if method == "cpu":
            return [] if call.args else [("device", cst.SimpleString('"cpu"'))]
        if method == "cuda":
            return self._cuda_keywords(call)
        keywords = []
        for arg in call.args:
            name = arg.keyword.value if arg.keyword is not None else self._kind(arg.value)
            if arg.star or name not in ("device", "dtype") or (method == "type" and name != "dtype"):
                return []
            keywords.append((name, arg.value))
        return keywords

    def _cuda_keywords(self, call: cst.Call) -> List[Tuple[str, cst.BaseExpression]]:
        if not call.args:
            return [("device", cst.SimpleString('"cuda"'))]
        arg = call.args[0]
        if len(call.args) > 1 or arg.star or (arg.keyword is not None and arg.keyword.value != "device"):
            return []
        index = semantics.literal(arg.value)
        if isinstance(index, int) and not isinstance(index, bool):
            return [("device", cst.SimpleString(f'"cuda:{index}"'))]
        return [("device", arg.value)]

    def _kind(self, value: cst.BaseExpression) -> Optional[str]:
        """"device" or "dtype" for a `.to(...)` positional argument, when the code shows which."""
        module, _, name = (self.ctx.qualified_name(value) or "").rpartition(".")
        if module == "torch" and name in DTYPE_NAMES:
            return "dtype"
        if isinstance(value, cst.SimpleString):
            return "device"
        if isinstance(value, cst.Call) and self.ctx.qualified_name(value.func) == "torch.device":
            return "device"
        terminal = semantics.terminal_name(value) or ""
        return "device" if "device" in terminal.lower() or terminal in ("dev", "rank", "local_rank") else None

    def _torch_name(self) -> Optional[str]:
        """The name this file imports torch under, for writing `torch.float64`."""
        for local, module in self.ctx.scopes.scope_of(self.ctx.module).imports.items():
            if module == "torch":
                return local
        return None


class _LeafUses(cst.CSTVisitor):
    """The code of the expressions whose being a leaf matters: `x.grad` or `x.is_leaf` read, or `x` given to an
    optimizer, in its call or in a list, tuple or dict literal (or one a name is assigned) given to it."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.matter: Set[str] = set()
        # name -> the literal containers assigned to it anywhere in the file
        self.containers: Dict[str, List[cst.BaseExpression]] = {}
        self.optimized: List[cst.BaseExpression] = []
        # The scopes around the visited node, for resolving names as the file binds them there.
        self.scopes: List[cst.CSTNode] = [ctx.module]

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in SCOPE_TYPES and node is not self.ctx.module:
            self.scopes.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        if self.scopes[-1] is original_node:
            self.scopes.pop()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in ("grad", "is_leaf"):
            self.matter.add(self.ctx.code(node.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if type(node.value) in _CONTAINERS:
            for target in node.targets:
                if type(target.target) is cst.Name:
                    self.containers.setdefault(target.target.value, []).append(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        method = semantics.method_name(node)
        if optimizer_class(node, self.ctx, self.scopes) or method == "add_param_group":
            self.optimized.extend(arg.value for arg in node.args)
        elif method in ("append", "extend", "insert") and type(node.func.value) is cst.Name and node.args:
            # `params.append(w)`: what a list is filled with is in it as much as its literal's elements.
            self.containers.setdefault(node.func.value.value, []).append(cst.List([cst.Element(node.args[-1].value)]))

    def leave_Module(self, original_node: cst.Module) -> None:
        pending, seen = list(self.optimized), set()
        while pending:
            expr = pending.pop()
            if id(expr) in seen:
                continue
            seen.add(id(expr))
            if type(expr) in _CONTAINERS:
                pending.extend(_elements(expr))
                continue
            self.matter.add(self.ctx.code(expr))
            if type(expr) is cst.Name:
                pending.extend(self.containers.get(expr.value, ()))


_CONTAINERS = (cst.List, cst.Tuple, cst.Set, cst.Dict)


def _plain_targets(parent, conversion: cst.Call) -> Tuple[cst.BaseExpression, ...]:
    """The names or attributes `conversion` is assigned to whole (`w = ...`, `w: Tensor = ...`); () otherwise."""
    if type(parent) is cst.Assign and parent.value is conversion:
        targets = tuple(target.target for target in parent.targets)
    elif type(parent) is cst.AnnAssign and parent.value is conversion:
        targets = (parent.target,)
    else:
        return ()
    return targets if all(type(target) in (cst.Name, cst.Attribute) for target in targets) else ()



def _elements(container: cst.BaseExpression) -> List[cst.BaseExpression]:
    if type(container) is cst.Dict:
        return [element.value for element in container.elements if isinstance(element, cst.DictElement)]
    return [element.value for element in container.elements]


def _appended(args, added: List[cst.Arg]) -> List[cst.Arg]:
    """`args` followed by `added`, keeping a one-argument-per-line layout with its trailing comma."""
    args = list(args)
    if len(args) >= 2 and isinstance(args[-1].comma, cst.Comma) and isinstance(args[-2].comma, cst.Comma):
        trailing = args[-1].comma
        args[-1] = args[-1].with_changes(comma=args[-2].comma)
        added = [arg.with_changes(comma=args[-2].comma) for arg in added[:-1]] + [added[-1].with_changes(comma=trailing)]
    return args + added
