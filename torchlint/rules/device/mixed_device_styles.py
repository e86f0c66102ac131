import builtins
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.analysis.conversions import Conversion, computed_cuda_device, conversion, implements_method
from torchlint.analysis.devices import in_a_cuda_branch
from torchlint.analysis.modules import builds_module
from torchlint.analysis.syntax import literal
from torchlint.analysis.values import Values
from torchlint.engine.scopes import parameters, scope_nodes_of
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.device._chains import chain_parent, tail_edit, to_call
from torchlint.rules.triggers import attributes

_BUILTINS = frozenset(dir(builtins))
# Operands the value model can follow to their origins.
_FOLLOWED = (cst.Name, cst.Attribute, cst.Subscript, cst.Call)
# Tensor methods whose result is no tensor on the device any more: a Python value, a shape.
_OFF_DEVICE_RESULTS = frozenset({"item", "tolist", "numpy", "size", "dim", "numel", "get_device", "data_ptr"})
# Comparisons of objects rather than of tensors' values: they run on any devices.
_IDENTITY_COMPARISONS = (cst.Is, cst.IsNot, cst.In, cst.NotIn)
INPUT_DEVICE_MESSAGE = (
    "`.cuda(...)` given the device of another value (`x.device`): where that value is on the CPU this raises "
    "`RuntimeError: Invalid device, must be cuda device`; use `.to(...)`, which moves to any device"
)


class MixedDeviceStyles(Rule):
    """
    ## What it does
    Flags a `.cuda(...)` call whose tensor or module then meets, in one computation,
    a value moved with `.to(<device>)`: both are arguments of one call (`model(src,
    mask.cuda())`), one is the module the other is given to (a `.cuda()` model called
    on `.to(device)` inputs, or the other way round), or they are combined by an
    operator. A moved value is recognised where it is moved, through the names it is
    assigned to (`x = x.cuda()`, `early = host.cuda()`) and the methods and operators
    applied to it (`x.cuda()[:, None] > 0`); a module moved in place (`model.cuda()`
    as a statement) counts wherever that module is used, and so does the output of a module
    moved with `.to(device)` (`model = Net().to(device)`, then `out = model(x)` meets
    `y.cuda()` in `F.cross_entropy(out, y.cuda())`).

    Also flags `.cuda(d)` where `d` is the device of another value (`x.cuda(y.device)`,
    `device = t.device` then `m.cuda(device)`), in any file: `.cuda()` accepts only
    CUDA devices, so where that value is on the CPU it raises `RuntimeError: Invalid
    device, must be cuda device` (observed on torch 2.13).

    ## Why is this bad?
    Code that moves with `.to(device)` has chosen its device in one place; the
    `.cuda()` calls ignore that choice. Where `device` is the CPU (a laptop, a CI
    runner, a CPU-only build of torch), the `.to(device)` code runs and the `.cuda()`
    lines raise `AssertionError: Torch not compiled with CUDA enabled`; where it is
    another GPU or `mps`, the values that meet are on two different devices. One
    style, `.to(device)`, keeps the choice in one place.

    Not flagged: a file that shows both styles side by side, as tutorials do, where
    the `.cuda()` values are only printed, inspected or compared by identity
    (`y is y.cuda()`) and never meet a `.to(device)` value; a `.cuda()` copy whose
    original (`z = x.cuda(1)`, then `x`) is what meets the `.to(device)` values;
    modules placed on numbered GPUs for model parallelism (`block.cuda(2)`); files
    that use only one style; `.cuda()` calls inside a `def cuda(...)` method (a class
    implementing `.cuda()` for its own tensors); `.cuda(index)` with a device the
    program computed (`.cuda(rank)`, `.cuda(device_index)`), which follows a choice
    made elsewhere, as `.to(device)` does, and is usually reached only once that
    choice is a CUDA device; a `.cuda()` in a branch taken only when the program asks
    for CUDA (`if device.type == "cuda": model = nn.DataParallel(model).cuda()`), which
    never runs where the chosen device is the CPU (a branch on `torch.cuda.is_available()`
    still counts: CUDA may be there while the program chose the CPU); Python's own functions (`print(a, b)`); a `.to("cuda")` or
    `.to(torch.device("cuda:0"))`, which hard-codes CUDA just as `.cuda()` does, and a
    module moved in place by such a statement before it is called on `.cuda()` inputs (the
    latest in-place move that runs whenever the call does decides the module's device).

    Given up for that precision: `.cuda()` calls in files that mix the styles but
    never let the values meet, which the rule used to flag; a `.cuda()` value that
    meets `.to(device)` values only further on, through the output of a model that is
    not itself moved (`out = net(x.to(device))` on a `net` parameter, then
    `loss(out, y.cuda())`) or a call the value model
    cannot follow; a module moved in place that is a parameter of the function
    (`model.cuda()` as a statement on a `model` argument).

    ## Fix safety
    Safe. `x.cuda()` becomes `x.to(device)` when a variable named `device` (the
    `device-name` option) is bound before the call in an enclosing scope, otherwise
    `x.to("cuda")`, which moves to the same current CUDA device as `.cuda()`.
    `.cuda(1)` becomes `.to("cuda:1")`, `.cuda(y.device)` becomes `.to(y.device)`
    (the same move wherever `.cuda(y.device)` runs); `non_blocking=` and
    `memory_format=` are kept.

    ## Options
    - `device-name`: the variable the fix moves to (default `device`).
    """

    code = "TL201"
    name = "mixed-device-styles"
    # Only `.cuda(...)` calls are reported (the `.to(...)` they are set against is a far more common word).
    triggers = attributes("cuda")
    fix_safety = "safe"
    message = (
        "`.cuda()` on a value that meets values moved with `.to(device)`: it ignores the device the rest of "
        "the code chose, so without a GPU it raises `AssertionError: Torch not compiled with CUDA enabled` "
        "while the `.to(device)` code runs; use `.to(device)` here too"
    )
    example = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model().to(device)
    for inputs, labels in loader:
        inputs = inputs.cuda()  # expect: TL201:14
        outputs = model(inputs)
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model().to(device)
    for inputs, labels in loader:
        inputs = inputs.to(device)
        outputs = model(inputs)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.cuda_calls: List[Tuple[Conversion, Tuple[cst.CSTNode, ...]]] = []
        self.to_calls: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]] = []
        # `.to("cuda")`: the same choice `.cuda()` makes, not the one `.to(device)` code keeps in one place.
        self.cuda_to_calls: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]] = []
        self.input_devices: List[Tuple[Conversion, Tuple[cst.CSTNode, ...]]] = []
        # Computations whose operands must share a device (arithmetic, comparisons).
        self.computations: List[Tuple[Tuple[cst.BaseExpression, ...], Tuple[cst.CSTNode, ...]]] = []
        # The calls that move nothing, computations too (of a call's receiver, callee and arguments): their operands
        # are read in `finish`, and only where `.cuda()` and `.to()` values both occur.
        self.calls: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        read = conversion(node, self.ctx)
        if read is None or not read.moves:
            self.calls.append((node, tuple(self.ctx.stack)))
            return
        if node.func.attr.value == "cuda":
            if implements_method(self.ctx, "cuda"):
                return
            if read.device_node is not None and self._device_of_a_value(read.device_node):
                self.input_devices.append((read, tuple(self.ctx.stack)))
            elif not computed_cuda_device(read) and not in_a_cuda_branch(self.ctx.stack, availability=False):
                self.cuda_calls.append((read, tuple(self.ctx.stack)))
        elif node.func.attr.value == "to":
            hard_coded = self._names_cuda(read.device_node)
            (self.cuda_to_calls if hard_coded else self.to_calls).append((node, tuple(self.ctx.stack)))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self._computation((node.left, node.right))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        self._computation(_compared(node))

    def _computation(self, operands: Tuple[cst.BaseExpression, ...]) -> None:
        if len(operands) >= 2:
            self.computations.append((operands, tuple(self.ctx.stack)))

    def _call_computations(self) -> List[Tuple[Tuple[cst.BaseExpression, ...], Tuple[cst.CSTNode, ...]]]:
        found = []
        for call, stack in self.calls:
            operands = _call_operands(call, self.ctx, stack)
            if len(operands) >= 2:
                found.append((operands, stack))
        return found

    def finish(self) -> None:
        for read, stack in self.input_devices:
            self.report(read.call, INPUT_DEVICE_MESSAGE, fix=self._fix(read, stack))
        if not self.to_calls or not self.cuda_calls:
            return
        meeting = self._cuda_calls_meeting_to_values()
        for read, stack in self.cuda_calls:
            if id(read.call) in meeting:
                self.report(read.call, fix=self._fix(read, stack))

    # ------------------------------------------------------------ where `.cuda()` values meet `.to(device)` values

    def _names_cuda(self, device: Optional[cst.BaseExpression]) -> bool:
        """`.to("cuda")`, `.to(torch.device("cuda:0"))`: a move that hard-codes CUDA as `.cuda()` does, so a
        `.cuda()` value meeting it follows the same choice (monai moves a model with `net.to("cuda")` right before
        calling it on `x.cuda()`)."""
        if device is None:
            return False
        values = Values.of(self.ctx)
        for origin in values.origins(device):
            node = origin.node
            if type(node) is cst.Call and self.ctx.qualified_name(node.func, origin.place.stack) == "torch.device" and node.args:
                node = node.args[0].value
            constant = values.constant(node, origin.place.stack) if type(node) is cst.Name else literal(node)
            if not (isinstance(constant, str) and constant.split(":")[0] == "cuda"):
                return False
        return True

    def _device_of_a_value(self, device: cst.BaseExpression) -> bool:
        """`.cuda(x.device)`, or a variable assigned one: the device of a tensor or module, possibly the CPU."""
        return any(
            type(origin.node) is cst.Attribute and origin.node.attr.value == "device"
            for origin in Values.of(self.ctx).origins(device)
        )

    def _cuda_calls_meeting_to_values(self) -> Set[int]:
        """The `.cuda()` calls (ids) whose value is an operand of a computation that also takes a value moved with
        `.to(device)`: the tensors or modules meet there, and only one device choice can hold."""
        moves = _Moves(self.ctx, [(read.call, stack, "cuda") for read, stack in self.cuda_calls] + [
            (call, stack, "to") for call, stack in self.to_calls
        ] + [(call, stack, "to-cuda") for call, stack in self.cuda_to_calls])
        meeting: Set[int] = set()
        for operands, stack in self._call_computations() + self.computations:
            carried = [moves.carried(operand, stack) for operand in operands]
            for index, moved in enumerate(carried):
                cuda_calls = {call for style, call in moved if style == "cuda"}
                if cuda_calls and any(
                    style == "to" for other, moves_of_other in enumerate(carried) if other != index for style, _ in moves_of_other
                ):
                    meeting |= cuda_calls
        return meeting

    def _fix(self, read: Conversion, stack: Sequence[cst.CSTNode]):
        if not read.complete:
            return None
        device = read.device
        if read.device_node is None and self._device_variable_bound(read.call, stack):
            device = self.ctx.config.device_name
        content = to_call(device, *read.keywords)
        return Fix.safe(f"Replace with `.{content}`", tail_edit(self.ctx, read.call, read.call, content))

    def _device_variable_bound(self, call: cst.Call, stack: Sequence[cst.CSTNode]) -> bool:
        """The device variable is a parameter, or assigned before `call`, in the scope the call would read it from."""
        name = self.ctx.config.device_name
        scope = self.ctx.scopes.binding_scope(name, stack)
        if scope is None or name not in scope.variables:
            return False
        call_start, _ = self.ctx.location(call)
        if any(self.ctx.location(value)[1] <= call_start for value in scope.assignments.get(name, ())):
            return True
        return isinstance(scope.node, (cst.FunctionDef, cst.Lambda)) and any(
            param.name.value == name for param in parameters(scope.node.params)
        )


def _assigned_name(call: cst.Call, stack: Sequence[cst.CSTNode]) -> Optional[str]:
    """`early` for `early = host.cuda()` and `pixels = images.to(device).float()`: the name a move's value is
    assigned to, through the methods chained on it."""
    index = len(stack) - 1
    while True:
        parent = chain_parent(stack, index)
        if parent is None:
            break
        index -= 2
    node, assign = stack[index], stack[index - 1] if index >= 1 else None
    if type(assign) is cst.Assign and assign.value is node and len(assign.targets) == 1:
        target = assign.targets[0].target
        return target.value if type(target) is cst.Name else None
    return None


def _compared(comparison: cst.Comparison) -> Tuple[cst.BaseExpression, ...]:
    """The operands whose values a comparison computes with (`is` and `in` compare objects, on any devices)."""
    return (comparison.left,) + tuple(
        target.comparator for target in comparison.comparisons if not isinstance(target.operator, _IDENTITY_COMPARISONS)
    )


def _key(origin) -> Tuple[int, bool]:
    return id(origin.node), origin.applied


def _call_operands(call: cst.Call, ctx, stack: Sequence[cst.CSTNode]) -> Tuple[cst.BaseExpression, ...]:
    """What a call (at the innermost point of `stack`) computes with: a method's receiver or the called module, and
    the arguments (the elements of a list or tuple argument too: `torch.cat([a, b])`). Python's own functions
    (`print(a, b)`) compute nothing."""
    func = call.func
    if type(func) is cst.Name and func.value in _BUILTINS and ctx.scopes.binding_scope(func.value, scope_nodes_of(stack)) is None:
        return ()
    operands = []
    if type(func) in (cst.Name, cst.Attribute) and ctx.qualified_name(func, stack) is None:
        operands.append(func)  # `model(x)`, `self.encoder(x)`: the module computes
        if type(func) is cst.Attribute:
            operands.append(func.value)  # `x.add(y)`: the receiver computes
    for arg in call.args:
        if type(arg.value) in (cst.List, cst.Tuple):
            operands.extend(element.value for element in arg.value.elements)
        else:
            operands.append(arg.value)
    return tuple(operands)


class _Moves:
    """The device moves of a file, and which of them a value may have gone through."""

    def __init__(self, ctx, moves: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...], str]]):
        self.ctx = ctx
        values = Values.of(ctx)
        # Each move as (style, id of the call), by the call.
        self.styles = {id(call): (style, id(call)) for call, _, style in moves}
        # A value followed back to the receiver of a move went through it (the parameter `x` in `x = x.cuda()`).
        self.by_receiver = {id(call.func.value): (style, id(call)) for call, _, style in moves}
        self.receiver_origins: Dict[int, Set[Tuple[int, bool]]] = {}
        # A module moves in place: values with the module's origin are the moved module.
        self.by_module: Dict[Tuple[int, bool], List[Tuple[str, int]]] = {}
        # A tensor move makes a copy, held by the name it is assigned to (`early = host.cuda()`): that name, with
        # the receiver's origins, holds the copy; the original (`host`) has the same origins and does not.
        self.by_name: Dict[Tuple[int, str], List[Tuple[str, int]]] = {}
        # A module moved in place by a statement (`net.to("cuda")`), by the variable: the latest such move that
        # runs whenever a later use does decides where the module is there.
        self.in_place: Dict[Tuple[int, str], List[Tuple[Tuple[cst.CSTNode, ...], cst.Call]]] = {}
        for call, stack, style in moves:
            self._note_in_place(call, stack)
            origins = values.origins(call.func.value, stack)
            self.receiver_origins[id(call)] = {_key(origin) for origin in origins}
            for origin in origins:
                if type(origin.node) is cst.Call and builds_module(ctx, origin.node, origin.place.stack):
                    self.by_module.setdefault(_key(origin), []).append((style, id(call)))
            target = _assigned_name(call, stack)
            if target is not None:
                scope = ctx.scopes.binding_scope(target, scope_nodes_of(stack))
                if scope is not None:
                    self.by_name.setdefault((id(scope.node), target), []).append((style, id(call)))

    def _note_in_place(self, call: cst.Call, stack) -> None:
        receiver = call.func.value
        if type(receiver) is cst.Name and len(stack) >= 2 and type(stack[-2]) is cst.Expr:
            scope = self.ctx.scopes.binding_scope(receiver.value, scope_nodes_of(stack))
            if scope is not None:
                self.in_place.setdefault((id(scope.node), receiver.value), []).append((stack, call))

    def _moved_in_place_before(self, name: cst.Name, stack) -> Optional[cst.Call]:
        """The in-place move of the module `name` that last runs before this use whenever the use runs."""
        scopes = scope_nodes_of(stack)
        scope = self.ctx.scopes.binding_scope(name.value, scopes)
        moves = self.in_place.get((id(scope.node), name.value)) if scope is not None else None
        if not moves or scope.node is not scopes[-1]:
            return None
        flow = Values.of(self.ctx).flow(scope.node)
        use = flow.position(stack)
        if use is None:
            return None
        latest = None
        for move_stack, call in moves:
            move = flow.position(move_stack)
            if move is not None and move[0] < use[0] and use[1][: len(move[1])] == move[1]:
                if latest is None or move[0] > latest[0]:
                    latest = (move[0], call)
        return latest[1] if latest is not None else None

    def carried(self, operand: cst.BaseExpression, stack) -> Set[Tuple[str, int]]:
        """The moves (style, id of the call) that the value of `operand` may have gone through."""
        if type(operand) is cst.Name:
            latest = self._moved_in_place_before(operand, stack)
            if latest is not None:
                return {self.styles[id(latest)]} if id(latest) in self.styles else set()
        moves, bases = self._last_moves(operand, stack)
        found = {self.styles[id(move)] for move in moves if id(move) in self.styles}
        for base in bases:
            found |= self._carried_by_origins(base, stack)
        return found

    def _carried_by_origins(self, base: cst.BaseExpression, stack) -> Set[Tuple[str, int]]:
        origins = Values.of(self.ctx).origins(base, stack)
        found = set()
        for node in [base] + [origin.node for origin in origins]:
            found.update(self.styles[id(move)] for move in self._last_moves(node, stack)[0] if id(move) in self.styles)
            if id(node) in self.by_receiver:
                found.add(self.by_receiver[id(node)])
        keys = {_key(origin) for origin in origins}
        for key in keys:
            found.update(self.by_module.get(key, ()))
        if type(base) is cst.Name:
            scope = self.ctx.scopes.binding_scope(base.value, scope_nodes_of(stack))
            if scope is not None:
                for style, call in self.by_name.get((id(scope.node), base.value), ()):
                    if keys & self.receiver_origins[call]:
                        found.add((style, call))
        return found

    def _last_moves(self, expr: cst.BaseExpression, stack) -> Tuple[List[cst.Call], List[cst.BaseExpression]]:
        """The last device move in each chain that computes `expr` (`x.cuda()` in `x.cuda()[:, None].float()`),
        through operators, whose result is on their operands' device (`(x.cuda() > 0)`); and the values that
        chains without a move start from (`x` in `x.sum()`), when the value model can follow them."""
        while True:
            if type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.UnaryOperation:
                expr = expr.expression
            elif type(expr) in (cst.BinaryOperation, cst.Comparison):
                parts = (expr.left, expr.right) if type(expr) is cst.BinaryOperation else _compared(expr)
                moves, bases = [], []
                for part in parts:
                    part_moves, part_bases = self._last_moves(part, stack)
                    moves += part_moves
                    bases += part_bases
                return moves, bases
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and self.ctx.qualified_name(expr.func, stack) is None:
                read = conversion(expr, self.ctx, stack)
                if read is not None and read.moves:
                    return [expr], []
                if expr.func.attr.value in _OFF_DEVICE_RESULTS:
                    return [], []
                expr = expr.func.value
            else:
                return [], [expr] if type(expr) in _FOLLOWED else []
