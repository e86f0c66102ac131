from typing import Callable, Dict, List, NamedTuple, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.conversions import Conversion, conversion
from torchlint.analysis.devices import names_device
from torchlint.analysis.dtypes import made_dtype
from torchlint.analysis.loops import loop_nodes
from torchlint.analysis.steps import in_a_step_loop, per_step_function
from torchlint.analysis.values import IDENTITY_WRAPPERS, Values
from torchlint.engine.scopes import Scope, Scopes
from torchlint.engine.walk import walk, walk_visitor
from torchlint.finding import Fix
from torchlint.fixes.rewrites import code_in_place, with_keywords
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes, words

# Random factories draw from the CPU generator; built on the GPU they draw from the GPU's, other numbers.
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm"})
# Factories whose values do not depend on the dtype they are computed in.
EXACT_FACTORIES = frozenset({"zeros", "ones", "empty", "eye"})
FACTORY_NAMES = RANDOM_FACTORIES | EXACT_FACTORIES | {"full", "arange", "linspace", "logspace"}
FACTORIES = frozenset(f"torch.{name}" for name in FACTORY_NAMES)
# The methods that can move a tensor to a device (`.type(torch.cuda.FloatTensor)` too).
_MOVING_METHODS = frozenset({"cuda", "cpu", "to", "type"})
# In-place initialisers, which fill the tensor they are called on and return it (`torch.empty(n).normal_()`); the
# random ones draw from the generator of the tensor's device.
RANDOM_FILLS = frozenset({"normal_", "uniform_", "bernoulli_", "exponential_", "random_", "cauchy_", "log_normal_", "geometric_"})
_FILLS = RANDOM_FILLS | {"fill_", "zero_"}


class _Factory(NamedTuple):
    """The factory call a move follows, the `Variable(...)` wrappers around it, the in-place fills and no-op casts
    chained on it (`torch.empty(n).normal_()`, `torch.randint(...).long()`) and its qualified name."""

    call: cst.Call
    wrappers: Tuple[cst.Call, ...]
    chained: Tuple[cst.Call, ...]
    name: str


class FactoryThenMove(Rule):
    """
    ## What it does
    Flags a tensor factory (`torch.zeros/ones/empty/full/rand/randn/randint/randperm/arange/
    linspace/logspace/eye`) without `device=` whose result goes straight into
    `.to(device)` or `.cuda()`, also through `torch.autograd.Variable(...)`, which
    returns its argument (`Variable(torch.ones(n)).cuda()`), through in-place fills
    (`torch.empty(n, d).normal_().to(device)`, also `uniform_`, `fill_`, `zero_`,
    `bernoulli_`...) and casts to the dtype the factory makes already
    (`torch.randint(...).long().to(device)`), or through a variable
    that nothing else reads, assigned and moved in the same run of the same function
    (`hidden = torch.zeros(...)` ... `return hidden.to(device)`; reported at the
    factory, without a fix), or that the move rebinds and that is read only after it
    (`eps = torch.randn(n)`, then `eps = eps.cuda()`, also under an `if mu.is_cuda:`
    whose `else` may keep the host tensor, in a tuple assignment `x, eps = x.cuda(),
    eps.cuda()`, or as `Variable(eps).cuda()` or `Variable(eps.cuda())`, then
    `mu + std * eps`; also a second draw into the same name, as a GAN's step draws
    noise for the discriminator, then for the generator), where it runs every
    step: in the body of a loop, or in a function run once per step. Those are a
    `forward`, a `*_step` (`training_step`) or a function whose name says step,
    forward or iteration; a function named for training (`train`, `train_batch`)
    unless it holds the loop over the steps itself; a function of the same file with no
    loop of its own called from a loop, or any function called from one of those functions (`reparameterize` called from
    `forward`), a method also where it is called through an instance of its class
    (`hidden = model.init_hidden(n)` in the loop over the batches); and functions nested in one of them.

    ## Why is this bad?
    The tensor is built and filled in host memory, then copied to the device: a
    host allocation, a fill and a transfer that `device=` on the factory avoids
    (the factory then fills the tensor on the device directly). Once, that costs
    nothing worth a change; every step, it is a host-to-device copy in the hot loop.

    Not flagged: a factory-then-move that runs once: at module level outside a loop
    (a notebook cell, a demo), in a setup function called once (`__init__`, `main`,
    a `train()` before its loop, a helper named like a step that the file calls only
    from `__init__`, such as a `_dummy_forward` shape probe), or in a loop that holds the training loop (a loop
    running backward, written inside it or in a function of the file it calls:
    `for epoch in ...: train(epoch)`, or an inner loop calling a function of the file
    that runs backward: `for batch in loader: train_batch(batch)`), besides that
    inner loop: initial states or a
    sample drawn once per epoch; comprehensions (`[torch.zeros(n).cuda() for _ in
    range(k)]` builds a list once), and a loop over `range(...)` or a literal
    collection (also through `enumerate`, a progress bar or a `while` stepping it by
    hand) that does the same as a statement: it adds to a container (`append`,
    `extend`, `insert`, `add`, `table[i] = ...`), and each of its statements adds or
    names (`t = ...`) values only torch functions, tensor methods and number builtins
    make (`for x in range(10):
    tensors.append(torch.randn(n, 10).cuda())`, a notebook's demo of GPU memory; a step
    loop around it still counts, and a loop that also calls a model is a step loop); state made on first use under `if len(state) == 0:`,
    `if not state:`, `if x is None:` or `if key not in cache:` when the branch fills
    what it tests and keeps it: stores into it, or rebinds an attribute, or rebinds a
    name a loop of the same function comes back to (an optimizer's `step()` initialising
    its buffers; `if batch_size is None:` on a parameter the branch leaves alone, or
    `if states is None: states = ...` in a `forward` its callers give `None`, builds the
    tensor on every call); the `forward` of a `torch.autograd.Function` that only stands
    in for an operator while the model is exported (it defines `symbolic` and no
    `backward`, and makes its outputs up from random draws: YOLOv6's `ORT_NMS`), which
    runs when the model is traced, once; loops in test files (`test_*.py`, `tests/`),
    which repeat a test once per parameter. A variable holding a factory's result
    that is read besides its move (the host tensor is used), or made before the loop
    that moves it (TL310's loop-invariant transfer). Factories already given `device=`;
    `*_like` factories (they inherit the device of their argument); factories with
    `requires_grad=True`, left to TL104 (the move also makes the result a
    non-leaf). A cast that converts between the factory and the move
    (`torch.ones(n).long().to(device)`), left to TL202.

    Not `torch.tensor(data)` or `torch.as_tensor(data)` either: given `device=`, torch
    still builds them from the Python or NumPy data in host memory and copies them
    over (`internal_new_from_data` in torch's `tensor_new.cpp`), so `device=` saves
    nothing there (the rule reported them until a held-out review showed this).

    Given up for that precision: one-off copies, which the rule used to flag
    everywhere; per-step code it cannot see from the file: a function only passed
    as a callback (`Engine(update_fn)`), a step loop that also holds a backward in
    an inner loop (read as an epoch loop), the setup of a function with a loop of its
    own called from a step loop (read as a driver run once per item, like `for weight
    in weights: export(weight)`), a method called on another object
    (`model.init_hidden()` from the loop), a function called from another file.

    ## Fix safety
    `torch.zeros(n).to(device)` -> `torch.zeros(n, device=device)`, with a dtype
    given to `.to(...)` moved to `dtype=`; fills and casts in between stay
    (`torch.empty(n, device=device).normal_()`). Safe, except in two cases where it is
    unsafe: random factories (`rand`, `randn`, `randint`, `randperm`) and random
    fills (`normal_`, `uniform_`...), which draw
    different numbers from the device's generator than from the CPU's, so seeded
    runs change; and a dtype moved into a factory whose values depend on it
    (`torch.full((2,), 0.1).to(device, torch.float64)` holds float32's 0.1, while
    `torch.full((2,), 0.1, dtype=torch.float64)` holds float64's). No fix when the
    factory already passes the keyword, passes `**kwargs`, or has a non-literal
    `requires_grad`; when the move casts and a fill or cast follows the factory
    (the dtype cannot go into the factory); when a `Variable(...)` around it takes more than the tensor
    (with `requires_grad=True` the moved result is a non-leaf, the fixed one a
    leaf); nor when `.to(x)` may be given a tensor: `.to(tensor)` also casts to its
    dtype, and `device=tensor` raises `TypeError`. The argument must
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
    triggers = words(*FACTORY_NAMES) & attributes(*_MOVING_METHODS)
    call_parts = _MOVING_METHODS | FACTORY_NAMES  # the factories: where a variable's factory runs (`_named_move`)
    fix_safety = "safe or unsafe"
    preview = (
        "In preview after held-out rounds 52-54 (docs/precision.md): 36 of 41 findings true at first sight. The false "
        "ones ran once, not every step: the `forward` of a `torch.autograd.Function` that only stands in for an ONNX "
        "operator during export (it has a `symbolic`, and returns placeholder values; rounds 54 and 57, fixed in the "
        "twelfth session), a driver loop of one pass "
        "whose factory sits under a test of a local that is always None, a TensorBoard graph helper a per-batch "
        "callback calls only under `if ni == 0:` (rounds 53 and 54, not fixed), and a 0-element tensor in a rare "
        "early return (round 52, unclear). The rule leaves preview again when two rounds in a row read it at least 9 "
        "in 10 true."
    )
    uses_callgraph = True
    message = (
        "the tensor is built and filled in host memory, then copied to the device: a host allocation and a "
        "transfer that `device=` avoids; pass `device=` (and `dtype=`) to the factory"
    )
    example = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for images, labels in loader:
        mask = torch.ones(64, 64).to(device)  # expect: TL206:12
        positions = torch.arange(128).to(device, torch.float32)  # expect: TL206:17
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for images, labels in loader:
        mask = torch.ones(64, 64, device=device)
        positions = torch.arange(128, device=device, dtype=torch.float32)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # Each move of a new factory result, with what its fix needs and the stack at it. The fix is made in `finish`,
        # for the moves reported only: it costs the position of the call in the file.
        self.moves: List[Tuple[cst.Call, _Factory, Conversion, bool, Tuple[cst.CSTNode, ...]]] = []
        # id of each call that may be a factory -> the stack at it: where a variable's factory runs (`_named_move`)
        self.factory_stacks: Dict[int, Tuple[cst.CSTNode, ...]] = {}
        # A factory bound to a variable that only a move reads (`hidden = torch.zeros(...)` ...
        # `return hidden.to(device)`), with the stacks at the factory and at the move.
        self.named_moves: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...], Tuple[cst.CSTNode, ...]]] = []
        # id of a function (or the module) -> each variable's mentions in it (`_Mentions`), found once per scope.
        self._mentions: Dict[int, _Mentions] = {}

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if semantics.terminal_name(func) in FACTORY_NAMES:
            self.factory_stacks[id(node)] = tuple(self.ctx.stack)
        if type(func) is not cst.Attribute or func.attr.value not in _MOVING_METHODS:
            return
        if type(func.value) is cst.Name:
            self._named_move(node, func.value)
            return
        if type(func.value) is not cst.Call:
            return
        factory, wrappers, chained = self._unwrapped(func.value)
        if type(factory) is cst.Name and not chained:  # `Variable(z).cuda()`: the variable `z` moved
            self._named_move(node, factory, wrappers)
            return
        if type(factory) is not cst.Call or not self.ctx.qualified_name_in(factory.func, FACTORIES):
            return
        name = self.ctx.qualified_name(factory.func)
        if semantics.keyword(factory, "device") is not None or semantics.has_star_kwargs(factory):
            return
        requires_grad = _requires_grad(factory)
        if requires_grad is True:
            return  # TL104 reports it
        if not self._no_op_casts(factory, chained, self.ctx.stack):
            return
        move = conversion(node, self.ctx)
        if move is None or not move.moves or move.to_host:  # `.cpu()` after a factory copies nothing
            return
        # With a non-literal requires_grad the fix could turn a non-leaf into a leaf; so could dropping the move
        # after `Variable(t, requires_grad=True)`. A dtype the move casts to cannot go into a factory that casts or
        # fills after it.
        fixable = (
            requires_grad is False and all(len(wrapper.args) == 1 for wrapper in wrappers)
            and not (move.casts and chained)
        )
        self.moves.append((node, _Factory(factory, wrappers, chained, name), move, fixable, tuple(self.ctx.stack)))

    def finish(self) -> None:
        for call, factory, move, fixable, stack in self.moves:
            if _lazily_initialised(stack):
                continue
            if in_a_step_loop(self.ctx, stack) or per_step_function(self.ctx, stack):
                self.report(call, fix=self._fix(factory, move, fixable, stack))
        for factory_call, made_at, stack in self.named_moves:
            if not _lazily_initialised(made_at) and (in_a_step_loop(self.ctx, stack) or per_step_function(self.ctx, stack)):
                self.report(factory_call)  # no fix: the factory and the move are two places

    def _named_move(self, node: cst.Call, name: cst.Name, around: Tuple[cst.Call, ...] = ()) -> None:
        """`name.to(device)`, or `Variable(name).to(device)` with the wrappers `around` the name, where `name` holds a factory's result made in the same run of the same function (the same loops
        around both) and nothing else reads it: the same copy as `torch.zeros(...).to(device)` (an `init_hidden` that
        builds its states, then returns them moved)."""
        values = Values.of(self.ctx).assigned_here(name)
        if len(values) != 1 or type(values[0]) is not cst.Call:
            return
        # `Variable(torch.randn(n), requires_grad=False)` returns the factory's tensor (wrappers are read from the file's
        # imports, at the move: they are module-level names).
        factory, wrappers, chained = self._unwrapped(values[0])
        made_at = self.factory_stacks.get(id(factory)) if type(factory) is cst.Call else None
        if made_at is None or any(_requires_grad(wrapper) is not False for wrapper in wrappers + around):
            return
        if (
            not self.ctx.qualified_name_in(factory.func, FACTORIES, made_at) or semantics.keyword(factory, "device") is not None
            or semantics.has_star_kwargs(factory) or _requires_grad(factory) is not False
            or not self._no_op_casts(factory, chained, made_at)
        ):
            return
        move = conversion(node, self.ctx)
        if move is None or not move.moves or move.to_host:
            return
        stack = tuple(self.ctx.stack)
        function = _innermost_function(stack)
        if function is not _innermost_function(made_at) or not _same_nodes(loop_nodes(stack), loop_nodes(made_at)):
            return
        scope = function or self.ctx.module
        mentions = self._mentions.get(id(scope))
        if mentions is None:
            finder = _Mentions(scope, self.ctx.scopes)
            walk_visitor(scope, finder)
            mentions = self._mentions[id(scope)] = finder
        if _only_moved(mentions.found.get(name.value, []), values[0], node, name, stack, self._wrapping, mentions.read_in_nested):
            self.named_moves.append((factory, made_at, stack))

    def _unwrapped(
        self, expr: cst.BaseExpression,
    ) -> Tuple[Optional[cst.BaseExpression], Tuple[cst.Call, ...], Tuple[cst.Call, ...]]:
        """The value inside `Variable(...)` wrappers (they return their argument) and under in-place fills and casts
        chained on it (`torch.empty(n).normal_()`, `z.long()`), with the wrappers and the chained calls, outermost
        first; None for a call of anything else inside a wrapper."""
        wrappers: List[cst.Call] = []
        chained: List[cst.Call] = []
        while type(expr) is cst.Call:
            if self.ctx.qualified_name_in(expr.func, IDENTITY_WRAPPERS):
                data = semantics.positional(expr, 0) or semantics.keyword(expr, "data")
                if data is None:
                    return None, (), ()
                wrappers.append(expr)
                expr = data.value
                continue
            read = conversion(expr, self.ctx)
            filled = semantics.method_name(expr) in _FILLS and self.ctx.qualified_name(expr.func) is None
            if not (filled or read is not None and read.casts and not read.moves):
                break
            chained.append(expr)
            expr = expr.func.value
        if type(expr) is not cst.Call and not wrappers and not chained:
            return None, (), ()
        return expr, tuple(wrappers), tuple(chained)

    def _wrapping(self, value: cst.BaseExpression) -> cst.BaseExpression:
        """What `value` is inside the `Variable(...)` wrappers around it (`Variable(z.cuda())` is `z.cuda()`)."""
        while type(value) is cst.Call and self.ctx.qualified_name_in(value.func, IDENTITY_WRAPPERS) and len(value.args) == 1:
            value = value.args[0].value
        return value

    def _no_op_casts(self, factory: cst.Call, chained: Tuple[cst.Call, ...], stack) -> bool:
        """Every cast chained on the factory casts to the dtype it makes already (`torch.randint(...).long()`): a cast
        that converts is a conversion of its own, TL202's."""
        made = made_dtype(factory, self.ctx, stack)
        for call in chained:
            read = conversion(call, self.ctx, stack)
            if read is not None and (made is None or read.dtype != made):
                return False
        return True

    def _fix(self, factory: _Factory, move: Conversion, fixable: bool, stack: Tuple[cst.CSTNode, ...]) -> Optional[Fix]:
        if not fixable or not move.complete or any(text.startswith("memory_format=") for text in move.keywords):
            return None
        # `.to(...)` arguments move as they are; `.cuda(1)` and `.float()`-style calls are named in code.
        from_to = semantics.method_name(move.call) == "to"
        if from_to and semantics.keyword(move.call, "device") is None and not self._is_device(move.device_node, stack):
            return None  # `.to(other_tensor)` also casts, and `device=other_tensor` raises TypeError
        keywords = [("device", move.device_node if from_to else expression(move.device))]
        if move.casts:
            code = move.dtype_code(self.ctx, stack)
            if code is None or semantics.keyword(factory.call, "dtype") is not None:
                return None
            keywords.append(("dtype", move.dtype_node or expression(code)))
        built = with_keywords(factory.call, keywords)
        receiver = move.call.func.value
        content = code_in_place(self.ctx, built if receiver is factory.call else receiver.deep_replace(factory.call, built), stack)
        short = factory.name[len("torch."):]
        random = short in RANDOM_FACTORIES or any(semantics.method_name(call) in RANDOM_FILLS for call in factory.chained)
        safe = not random and (not move.casts or short in EXACT_FACTORIES)
        description = "Pass " + " and ".join(f"`{keyword}=`" for keyword, _ in keywords) + " to the factory"
        edit = self.ctx.replace(move.call, content)
        return Fix.safe(description, edit) if safe else Fix.unsafe(description, edit)

    def _is_device(self, expr: cst.BaseExpression, stack: Tuple[cst.CSTNode, ...], seen=frozenset()) -> bool:
        """`expr` (evaluated at the innermost point of `stack`) is provably a device, not a tensor: a device string
        or f-string, `torch.device(...)`, `x.device`, a name only ever assigned one of those, or the `device-name`
        variable when nothing else is assigned to it in its scope (a parameter, typically)."""
        if isinstance(expr, cst.IfExp):
            return self._is_device(expr.body, stack, seen) and self._is_device(expr.orelse, stack, seen)
        if isinstance(expr, cst.Attribute):
            return expr.attr.value == "device"
        if not isinstance(expr, cst.Name):
            return names_device(expr, self.ctx, stack)  # strings, f-strings, `torch.device(...)`
        if expr.value in seen:
            return False
        values = self.ctx.assigned_values(expr, stack)
        if not values:
            return expr.value == self.ctx.config.device_name
        return all(self._is_device(value, stack, seen | {expr.value}) for value in values)


def expression(code: str) -> cst.BaseExpression:
    """`code` parsed as an expression; one spanning lines is parenthesized, as it would be outside its call."""
    try:
        return cst.parse_expression(code)
    except cst.ParserSyntaxError:
        return cst.parse_expression(f"({code})")


def _requires_grad(factory: cst.Call):
    """The factory's `requires_grad=` as a literal (False when not given), MISSING when computed."""
    requires_grad = semantics.keyword(factory, "requires_grad")
    return semantics.literal(requires_grad.value) if requires_grad is not None else False


def _lazily_initialised(stack) -> bool:
    """Under `if len(state) == 0:`, `if not state:`, `if x is None:` or `if key not in cache:` in its function, where
    the branch fills what it tests: state made on the first step and kept (an optimizer's `step()`), not remade every
    step. A test of something the branch leaves alone (`if batch_size is None:` on a parameter) picks one of two ways
    to build the tensor each call; so does rebinding a local name (`if states is None: states = ...` in a `forward`
    its callers give `None`), unless a loop of the same function around the `if` keeps the binding for its next turn."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
        if type(node) is cst.If and stack[index + 1] is node.body:
            subject = _first_use_subject(node.test)
            if subject is None:
                continue
            if type(subject) not in (cst.Name, cst.Attribute, cst.Subscript):
                # `if self.state[p].get("buf") is None:`, `getattr(self, "buf", None)`: what it reads is not written
                # as it is tested, so the branch is taken for filling it.
                return True
            if _fills(node.body, subject, _kept_by_a_loop(stack[:index], subject)):
                return True
    return False


def _kept_by_a_loop(outer, subject: cst.BaseExpression) -> bool:
    """Rebinding `subject` keeps the value for later: it is an attribute or an item (`self.hidden`,
    `self.state[p]`), or a loop of the same function (or of the module) encloses the test, and its next turn sees the
    name bound."""
    if type(subject) is not cst.Name:
        return True
    for node in reversed(outer):
        if type(node) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
        if type(node) in (cst.For, cst.While):
            return True
    return False


def _first_use_subject(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """What a first-use test asks about: `state` of `not state` and `len(state) == 0`, `x` of `x is None`, `cache`
    of `key not in cache`, also as a side of `and` (`if rank == 0 and features is None:`: the branch still runs only
    while the state is unmade)."""
    subject = None
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        subject = _first_use_subject(test.left) or _first_use_subject(test.right)
    elif type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        if type(test.expression) in (cst.Name, cst.Attribute, cst.Subscript):
            subject = test.expression
    elif type(test) is cst.Comparison and len(test.comparisons) == 1:
        comparison = test.comparisons[0]
        operator, right = type(comparison.operator), comparison.comparator
        is_len = type(test.left) is cst.Call and type(test.left.func) is cst.Name and test.left.func.value == "len"
        if operator is cst.NotIn:
            subject = right
        elif operator is cst.Is and type(right) is cst.Name and right.value == "None":
            subject = test.left
        elif is_len and len(test.left.args) == 1 and operator is cst.Equal and type(right) is cst.Integer and right.value == "0":
            subject = test.left.args[0].value
    return subject


def _fills(body: cst.CSTNode, subject: cst.BaseExpression, rebinding_keeps: bool) -> bool:
    """The branch stores into `subject` (`subject[k] = ...`, `subject.k = ...`), calls a method on it
    (`subject.append(...)`, `subject.update(...)`), or, when `rebinding_keeps`, binds it."""
    found = []

    def visit(node: cst.CSTNode) -> bool:
        if type(node) in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign) and _written_into(node.target, subject, rebinding_keeps):
            found.append(node)
        elif type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.value.deep_equals(subject):
            found.append(node)
        return not found

    walk(body, visit, lambda node: None)
    return bool(found)


def _written_into(target: cst.BaseExpression, subject: cst.BaseExpression, rebinding_keeps: bool) -> bool:
    if type(target) in (cst.Tuple, cst.List):
        return any(_written_into(element.value, subject, rebinding_keeps) for element in target.elements)
    if target.deep_equals(subject):
        return rebinding_keeps
    while type(target) in (cst.Subscript, cst.Attribute):
        target = target.value
        if target.deep_equals(subject):
            return True
    return False


def _innermost_function(stack) -> Optional[cst.FunctionDef]:
    return next((node for node in reversed(stack[:-1]) if type(node) is cst.FunctionDef), None)


def _same_nodes(first: List[cst.CSTNode], second: List[cst.CSTNode]) -> bool:
    return len(first) == len(second) and all(one is other for one, other in zip(first, second))


def _only_moved(
    mentions: List[Tuple[cst.Name, Optional[cst.BaseExpression]]], made: cst.BaseExpression, move: cst.Call,
    receiver: cst.Name, stack: Tuple[cst.CSTNode, ...], unwrapped: Callable[[cst.BaseExpression], cst.BaseExpression],
    read_in_nested: Set[int],
) -> bool:
    """The variable's mentions in its function (`_Mentions.found`) read the factory's host tensor only in `move`: they
    are the factory's assignment and the move (`return hidden.to(device)`), or those two first, with the move rebinding
    the variable (`eps = eps.cuda()`, `eps = Variable(eps.cuda())` or `images, eps = images.cuda(), eps.cuda()`,
    perhaps under an `if`), and then only reads of what the move bound or of later bindings. A read between them, or a
    binding before the factory's (a parameter), uses the host tensor or another; so does a read after a `try` the
    move is in fails. The `else` of an `if` the move is under may use the host tensor (`eps = eps.float()`): that
    branch runs instead of the move, as the code after an `if` without `else` does when the move is skipped.
    Mentions of the function's own code before the factory's assignment (`read_in_nested`: the ids of those made in a
    function defined inside it, which may run later) leave it alone when the move rebinds the variable: they read
    earlier values (`z = torch.randn(n)`, `z = z.cuda()` for the discriminator's step, again for the generator's),
    and a loop that comes back to them finds what the move bound."""
    start = next((index for index, (_, value) in enumerate(mentions) if value is made), None)
    if start is None or any(id(name) in read_in_nested for name, _ in mentions[:start]):
        return False
    mentions = mentions[start:]
    if len(mentions) < 2:
        return False
    if len(mentions) == 2:
        return start == 0 and mentions[1][0] is receiver
    # `eps = eps.cuda()`: an assignment's targets are visited before its value.
    if mentions[1][1] is None or unwrapped(mentions[1][1]) is not move or mentions[2][0] is not receiver:
        return False
    start = max((index for index, node in enumerate(stack[:-1]) if type(node) is cst.FunctionDef), default=0)
    return not any(type(node) in (cst.Try, cst.TryStar) for node in stack[start:-1])


class _Mentions(cst.CSTVisitor):
    """Where each variable's name is written in a piece of code, in source order (read or bound; not as an attribute's
    or a keyword's name): by name, each mention, with the value assigned when it is the only target of an `=`
    statement. One walk of a scope serves every variable of it. In a function, class or lambda defined inside
    `root`, a name it binds itself is its own variable, not the one of `root` (a `z = torch.randn(...)` of a plotting
    function beside the module's training loop), and is left out."""

    def __init__(self, root: cst.CSTNode, scopes: "Scopes"):
        self.root = root
        self.scopes = scopes
        self.found: Dict[str, List[Tuple[cst.Name, Optional[cst.BaseExpression]]]] = {}
        # id of the target `Name` of each `name = value` statement visited -> its value
        self.assigned: Dict[int, cst.BaseExpression] = {}
        # the scopes defined inside `root` that the walk is in, innermost last
        self.nested: List[Scope] = []
        # ids of the mentions made inside them (of names they do not bind)
        self.read_in_nested: Set[int] = set()

    def visit_FunctionDef(self, node: cst.CSTNode) -> None:
        if node is not self.root:
            self.nested.append(self.scopes.scope_of(node))

    def leave_FunctionDef(self, node: cst.CSTNode) -> None:
        if node is not self.root:
            self.nested.pop()

    visit_ClassDef = visit_Lambda = visit_FunctionDef
    leave_ClassDef = leave_Lambda = leave_FunctionDef

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1:
            return
        target, value = node.targets[0].target, node.value
        if type(target) is cst.Name:
            self.assigned[id(target)] = value
        elif type(target) in (cst.Tuple, cst.List) and type(value) in (cst.Tuple, cst.List):
            # `images, z = images.cuda(), z.cuda()`: each name is bound to the element in its place.
            names, values = target.elements, value.elements
            if len(names) == len(values) and not any(type(each) is cst.StarredElement for each in names + values):
                for each, assigned in zip(names, values):
                    if type(each.value) is cst.Name:
                        self.assigned[id(each.value)] = assigned.value

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None and type(node.target) is cst.Name:
            self.assigned[id(node.target)] = node.value

    def visit_Name(self, node: cst.Name) -> None:
        name = node.value
        if not any(name in scope.variables or name in scope.imports for scope in self.nested):
            self.found.setdefault(name, []).append((node, self.assigned.get(id(node))))
            if self.nested:
                self.read_in_nested.add(id(node))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk_visitor(node.value, self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk_visitor(node.value, self)
        return False
