from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes, words
from torchlint.rules.device import _shared

# Random factories draw from the CPU generator; built on the GPU they draw from the GPU's, other numbers.
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm"})
# Factories whose values do not depend on the dtype they are computed in.
EXACT_FACTORIES = frozenset({"zeros", "ones", "empty", "eye"})
FACTORIES = frozenset(
    f"torch.{name}"
    for name in RANDOM_FACTORIES | EXACT_FACTORIES | {"full", "arange", "linspace", "logspace", "tensor", "as_tensor"}
)
# The methods that can move a tensor to a device (`.type(torch.cuda.FloatTensor)` too).
_MOVING_METHODS = frozenset({"cuda", "cpu", "to", "type"})


class FactoryThenMove(Rule):
    """
    ## What it does
    Flags a tensor factory (`torch.zeros/ones/empty/full/rand/randn/randint/arange/
    linspace/eye/tensor/...`) without `device=` whose result goes straight into
    `.to(device)` or `.cuda()`.

    ## Why is this bad?
    The tensor is built and filled in host memory, then copied to the device: a
    host allocation, a fill and a transfer that `device=` on the factory avoids
    (the factory then fills the tensor on the device directly).

    Not flagged: factories already given `device=`; `*_like` factories (they
    inherit the device of their argument); factories with `requires_grad=True`,
    which TL104 reports (the move also makes the result a non-leaf).

    ## Fix safety
    `torch.zeros(n).to(device)` -> `torch.zeros(n, device=device)`, with a dtype
    given to `.to(...)` moved to `dtype=`. Safe, except in two cases where it is
    unsafe: random factories (`rand`, `randn`, `randint`, `randperm`), which draw
    different numbers from the device's generator than from the CPU's, so seeded
    runs change; and a dtype moved into a factory whose values depend on it
    (`torch.tensor([0.1]).to(device, torch.float64)` holds float32's 0.1, while
    `torch.tensor([0.1], dtype=torch.float64)` holds float64's). No fix when the
    factory already passes the keyword, passes `**kwargs`, or has a non-literal
    `requires_grad`, nor when `.to(x)` may be given a tensor: `.to(tensor)` also
    casts to its dtype, and `device=tensor` raises `TypeError`. The argument must
    be a device string, `torch.device(...)`, `x.device`, a name assigned only
    those, or the `device-name` variable (`device`) when nothing else is assigned
    to it in its scope: a parameter named `device` is trusted to hold a device.

    ## Options
    - `device-name`: the variable trusted to hold a device (default `device`).
    """

    code = "TL206"
    name = "factory-then-move"
    # Only a move (`.cuda()`, `.to()`, `.type()`) chained on a torch factory is reported, and the factory's name
    # (the last part of `torch.<factory>`) is written however torch is imported.
    triggers = words(*(factory.rsplit(".", 1)[-1] for factory in FACTORIES)) & attributes(*_MOVING_METHODS)
    fix_safety = "safe or unsafe"
    message = (
        "the tensor is built and filled in host memory, then copied to the device: a host allocation and a "
        "transfer that `device=` avoids; pass `device=` (and `dtype=`) to the factory"
    )
    example = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mask = torch.ones(64, 64).to(device)  # expect: TL206:8
    positions = torch.arange(128).to(device, torch.float32)  # expect: TL206:13
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mask = torch.ones(64, 64, device=device)
    positions = torch.arange(128, device=device, dtype=torch.float32)
    """

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is not cst.Attribute or func.attr.value not in _MOVING_METHODS or type(func.value) is not cst.Call:
            return
        factory = func.value
        if not self.ctx.qualified_name_in(factory.func, FACTORIES):
            return
        name = self.ctx.qualified_name(factory.func)
        if semantics.keyword(factory, "device") is not None or semantics.has_star_kwargs(factory):
            return
        requires_grad = semantics.keyword(factory, "requires_grad")
        grad = semantics.literal(requires_grad.value, None) if requires_grad is not None else False
        if grad is True:
            return  # TL104 reports it
        move = _shared.conversion(node, self.ctx)
        if move is None or not move.moves or _stays_on_host(move):
            return
        # With a non-literal requires_grad the fix could turn a non-leaf into a leaf.
        self.report(node, fix=self._fix(factory, name, move, fixable=grad is False))

    def _fix(self, factory: cst.Call, name: str, move: _shared.Conversion, fixable: bool) -> Optional[Fix]:
        if not fixable or not move.complete or any(text.startswith("memory_format=") for text in move.keywords):
            return None
        # `.to(...)` arguments move as they are; `.cuda(1)` and `.float()`-style calls are named in code.
        from_to = semantics.method_name(move.call) == "to"
        if from_to and semantics.keyword(move.call, "device") is None and not self._is_device(move.device_node):
            return None  # `.to(other_tensor)` also casts, and `device=other_tensor` raises TypeError
        keywords = [("device", move.device_node if from_to else _shared.expression(move.device))]
        if move.casts:
            code = move.dtype_code(self.ctx)
            if code is None or semantics.keyword(factory, "dtype") is not None:
                return None
            keywords.append(("dtype", move.dtype_node or _shared.expression(code)))
        content = self.ctx.code(_shared.with_keywords(factory, keywords))
        short = name[len("torch."):]
        safe = short not in RANDOM_FACTORIES and (not move.casts or short in EXACT_FACTORIES)
        description = "Pass " + " and ".join(f"`{keyword}=`" for keyword, _ in keywords) + " to the factory"
        edit = self.ctx.replace(move.call, content)
        return Fix.safe(description, edit) if safe else Fix.unsafe(description, edit)

    def _is_device(self, expr: cst.BaseExpression, seen=frozenset()) -> bool:
        """`expr` is provably a device, not a tensor: a device string or f-string, `torch.device(...)`,
        `x.device`, a name only ever assigned one of those, or the `device-name` variable when nothing else
        is assigned to it in its scope (a parameter, typically)."""
        if isinstance(expr, cst.IfExp):
            return self._is_device(expr.body, seen) and self._is_device(expr.orelse, seen)
        if isinstance(expr, cst.Attribute):
            return expr.attr.value == "device"
        if not isinstance(expr, cst.Name):
            return _shared.names_device(expr, self.ctx)  # strings, f-strings, `torch.device(...)`
        if expr.value in seen:
            return False
        values = self.ctx.assigned_values(expr)
        if not values:
            return expr.value == self.ctx.config.device_name
        return all(self._is_device(value, seen | {expr.value}) for value in values)


def _stays_on_host(move: _shared.Conversion) -> bool:
    """`.cpu()` / `.to("cpu")` after a factory: nothing is copied."""
    if move.device_node is None:
        return move.device == '"cpu"'
    return semantics.literal(move.device_node, None) == "cpu"
