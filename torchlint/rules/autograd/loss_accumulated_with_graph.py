from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.flow import innermost_scope
from torchlint.analysis.grad_mode import evaluates, grad_disabled_by_a_caller, under_dynamic_grad_mode
from torchlint.analysis.loops import iteration, iterations_around, loop_nodes
from torchlint.analysis.losses import LOSS_FUNCTIONS, arithmetic_operands, is_loss_call, is_loss_origin, is_loss_value
from torchlint.analysis.syntax import argument_for, method_name, names_in
from torchlint.analysis.values import Values, method_of, path_to
from torchlint.analysis.facts import holds_no_graph, is_backward_call
from torchlint.engine.scopes import dotted_name
from torchlint.engine.walk import OwnScopeVisitor, walk, walk_visitor
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import fragments, words

# Calls whose result no longer holds the graph: `loss.item()`, `float(loss)`, `loss.detach()`.
_DETACHING_METHODS = frozenset({"item", "detach", "tolist", "numpy"})
_DETACHING_BUILTINS = frozenset({"float", "int"})
# What a list of losses is asked that is no use of its elements as tensors.
_LIST_METHODS = frozenset({"append", "extend", "insert", "clear", "copy", "pop", "remove", "index", "count", "reverse", "sort"})
# torch functions that take Python numbers as well as tensors.
_NUMBER_TAKING = frozenset({"torch.tensor", "torch.as_tensor"})


@dataclass
class _Accumulation:
    statement: cst.CSTNode
    operand: cst.BaseExpression
    accumulator: str
    scope: int
    function: str
    loop: int
    # True: the operand is a loss computation; None: a variable that is a loss only if `.backward()` is called on it.
    is_loss: Optional[bool]
    # The function (or module) whose code uses the accumulator, and the scopes around it, outermost first.
    scope_node: cst.CSTNode
    scope_chain: Tuple[cst.CSTNode, ...]


class LossAccumulatedWithGraph(Rule):
    """
    ## What it does
    Flags, inside a loop, `acc += loss`, `acc = acc + loss` and `xs.append(loss)` (or
    `xs += [loss]`, or a tuple holding it: `log.append((step, loss))`) where
    `loss` is a tensor from a loss computation (a call of an `nn.*Loss` instance or a
    criterion variable, `F.cross_entropy`, `F.*_loss`, or a variable `.backward()` is
    called on), a loss a function of the file, or a method called through an instance
    of a class of the file, returns with gradients on (`cost = model.train_model(x, y)`
    where `train_model` returns `self.cost`, its criterion's result), or arithmetic of
    one (`xs.append(loss / n)`, `acc += -loss * 2`: the
    result carries the loss's graph), or passes it to a method of a class of the file that
    adds that parameter into the instance (`losses.update(total_loss, n)` where the file's
    `AverageMeter.update` does `self.sum += val * n`: the meter keeps every step's graph),
    rather than `loss.item()`, `loss.detach()`,
    `float(loss)` or `loss.tolist()` (also divided: `loss.item() / n`). A method that makes a
    number of its parameter (`self.sum += float(val)`, `val.item()`, `val = float(val)`) or
    only keeps the latest one (`self.val = val`) accumulates nothing.

    It does not flag accumulation into a loss that is then backpropagated (summing
    several losses and calling `.backward()` on the sum, returning the sum (also
    stored in a dict the function returns: `G_losses["feat"] = feat_loss; return
    G_losses`, for the caller to backpropagate), or
    backpropagating each collected loss in a later loop: `for loss in losses:
    loss.backward()`, `accelerator.backward(losses[i])`), an accumulator reset in the
    same loop, accumulation with gradients disabled, nor a variable named like the
    backpropagated loss that holds a number (`loss = mini_batch(...)`, a helper of the
    file returning `np.mean` of `.item()` values, a method returning `self.cost.item()`
    or `cost.detach()`), nor a loss computed from detached
    tensors only (`criterion(pred.detach().cpu(), y.detach().cpu())`: no graph), or from
    tensors that never required grad (a test's `F.log_softmax(torch.randn(5, 5), dim=1)`,
    `Variable(torch.randn(n))`, `torch.LongTensor([random.randint(0, 4) for _ in range(5)])`,
    followed through names, class attributes set in `setUpClass` or the class body, loops over
    literal lists and list comprehensions: torch 2.13 gives such a loss `grad_fn=None`). A loss of a model's output,
    of a parameter, or of anything whose origin is not shown is still reported.

    ## Why is this bad?
    The accumulator becomes a tensor that requires grad and references every
    iteration's loss, so no iteration's graph can be freed. Observed on torch 2.13
    (`torchlint rule TL103 --verify`): training a two-layer MLP with SGD, the graph
    reachable from `running_loss` grows by 7 nodes per iteration (11 nodes after the
    first iteration, 39 after the fifth); in an evaluation loop without `no_grad`
    every batch's activations stay alive as well. `float(running_loss)` afterwards
    warns about converting a tensor that requires grad.

    ## Fix safety
    Unsafe. The fix is chosen from how the accumulator is used afterwards in the same
    function: where it is used as a tensor (`running_loss.item()`, `losses[-1].cpu()`,
    `torch.stack(losses)`, returned to a caller, or an attribute such as
    `self.total` that other methods read), the fix accumulates `loss.detach()`, which
    keeps it a tensor; otherwise `loss.item()`, which makes it a Python float (printed
    as a number, holding no device memory). `.item()` waits for the device on every
    iteration and raises for a loss that is not a scalar (`reduction="none"`);
    `.detach()` keeps a tensor on the loss's device.
    """

    code = "TL103"
    name = "loss-accumulated-with-graph"
    preview = (
        "In preview after held-out rounds 47-49 (docs/precision.md): its last ten findings read at first sight, pooled "
        "back to round 29, were 7 true. The false ones were sums reset in the loop around the accumulating one: "
        "AttnGAN's total over a step's discriminators (round 46) and a MAML inner loss stepped whole by a "
        "differentiable optimizer, `inner_optimizer.step(loss_inner)` (round 49), and a round 35 shape fixed then; "
        "the rule leaves preview again when two rounds in a row read it at least 9 in 10 true."
    )
    uses_callgraph = True
    # Only an accumulation in a loop is reported, of a loss: a torch loss (`nn.*Loss`, `F.*_loss` or one of the
    # functional losses named otherwise), a name like one (`my_criterion`, `loss_fn`, in any case), or a value
    # `.backward()` is called on.
    triggers = words("for", "while") & (words("backward", *LOSS_FUNCTIONS) | fragments("loss", "criterion"))
    # Every call: a method of the file's classes may accumulate what it is given (`losses.update(loss, n)`).
    call_parts = None
    fix_safety = "unsafe"
    message = (
        "accumulating the loss tensor keeps every iteration's autograd graph reachable from the accumulator (in a "
        "training loop it grows by 7 nodes per iteration, and without backward each batch's activations stay alive); "
        "accumulate `loss.item()` or `loss.detach()` instead"
    )
    example = """
    running_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss  # expect: TL103:5
    """
    use_instead = """
    running_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # (scope id, variable) -> its latest value so far, and the stack at that assignment (where the grad mode it was
        # computed in is asked, when an accumulation adds the variable).
        self.latest: Dict[Tuple[int, str], Tuple[cst.BaseExpression, Tuple[cst.CSTNode, ...]]] = {}
        # Every assignment to a variable: (scope id, variable), value, the stack at it. What the values read and which
        # assignments start a variable afresh (`reads`, `resets`) is worked out in `finish`, for the scopes that
        # accumulate: most files accumulate nothing, and the others in a few functions.
        self.assignments: List[Tuple[Tuple[int, str], cst.BaseExpression, Tuple[cst.CSTNode, ...]]] = []
        # (scope id, accumulator) -> for each assignment that starts it afresh, the loops around it.
        self.resets: Dict[Tuple[int, str], List[Set[int]]] = {}
        # scope id -> variables read by a backward call's tensor.
        self.backpropagated: Dict[int, Set[str]] = {}
        # id of a method of the file's classes -> the parameters it adds into its instance (`_accumulated_parameters`)
        self.accumulating: Dict[int, FrozenSet[str]] = {}
        # scope id -> variables read by a return value.
        self.returned: Dict[int, Set[str]] = {}
        # scope id -> variables `.backward()` is called on.
        self.backward_receivers: Dict[int, Set[str]] = {}
        # (scope id, variable) -> variables its assigned values read.
        self.reads: Dict[Tuple[int, str], Set[str]] = {}
        self.accumulations: List[_Accumulation] = []
        # id(target) of `x = next(batches)` taking the items of a `while` (`loops.iteration`) -> what it iterates: a
        # loop target, as in `for x in items`, not an assignment reading `batches`.
        self.items: Dict[int, cst.BaseExpression] = {}

    # ------------------------------------------------------------ bookkeeping

    def _scope(self) -> int:
        # The visited node (an assignment, call, loop or return) is no scope itself: its scope is the innermost one the
        # walker keeps (`innermost_scope` of the stack, without going up it).
        return id(self.ctx.scope_nodes[-1])

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if id(target.target) in self.items:
                self._loop_target(target.target)
            else:
                self._assigned(target.target, node.value)

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(node.target, node.value)

    def _assigned(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        name = dotted_name(target)
        if name is None:
            self._stored(target, value)
            return
        key = (self._scope(), name)
        stack = tuple(self.ctx.stack)
        self.latest[key] = (value, stack)
        self.assignments.append((key, value, stack))

    def _stored(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`losses["feat"] = feat_loss`: the container holds the value, so what the container reaches (returned to a
        caller that backpropagates it, `return losses`) the value reaches too. The container keeps its other items:
        this is no fresh start of it (`resets`)."""
        if type(target) is not cst.Subscript:
            return
        container = dotted_name(target.value)
        if container is not None:
            self.reads.setdefault((self._scope(), container), set()).update(names_in(value))

    def _note_assignments(self, scopes: Set[int]) -> None:
        """`reads` and `resets` of the variables of `scopes`, from their assignments."""
        for key, value, stack in self.assignments:
            if key[0] in scopes:
                reads = set(names_in(value))
                self.reads.setdefault(key, set()).update(reads)
                if key[1] not in reads:  # `acc = acc + loss` accumulates; anything else starts afresh
                    self.resets.setdefault(key, []).append({id(loop) for loop in loop_nodes(stack)})

    def visit_For(self, node: cst.For) -> None:
        self._loop_target(node.target)

    def visit_While(self, node: cst.While) -> None:
        looped = iteration(self.ctx, node, self.ctx.stack)
        if looped is not None:
            self.items[id(looped.target)] = looped.iterable

    def _loop_target(self, target: cst.BaseExpression) -> None:
        for name in names_in(target):
            self.latest.pop((self._scope(), name), None)

    def visit_Return(self, node: cst.Return) -> None:
        self.returned.setdefault(self._scope(), set()).update(names_in(node.value))

    # ------------------------------------------------------------ accumulations

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        accumulator = dotted_name(node.target)
        if accumulator is not None:
            self.reads.setdefault((self._scope(), accumulator), set()).update(names_in(node.value))
            if isinstance(node.operator, cst.AddAssign):
                self._accumulation(node, accumulator, _appended(node.value))
                if type(node.value) is cst.Call and self._is_loss(node.value):
                    # `total = 0` then `total += F.mse_loss(...)`: from here on the variable holds a loss tensor.
                    self.latest[(self._scope(), accumulator)] = (node.value, tuple(self.ctx.stack))

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or type(value) is not cst.BinaryOperation or type(value.operator) is not cst.Add:
            return
        accumulator = dotted_name(node.targets[0].target)
        if accumulator is None:
            return
        if dotted_name(value.left) == accumulator:
            self._accumulation(node, accumulator, _appended(value.right))
        elif dotted_name(value.right) == accumulator:
            self._accumulation(node, accumulator, _appended(value.left))

    def visit_Call(self, node: cst.Call) -> None:
        if is_backward_call(node, self.ctx):
            first = semantics.positional(node, 0)
            argument = first.value if first is not None else None
            tensor = semantics.receiver(node) if semantics.method_name(node) == "backward" else None
            if tensor is None:
                tensor = argument
            backpropagated = self.backpropagated.setdefault(self._scope(), set())
            # The argument too: `accelerator.backward(loss)` (accelerate, fabric), `torch.autograd.backward(loss)`.
            for reached in (tensor, argument):
                backpropagated.update(names_in(reached))
                backpropagated.update(self._iterated_for(reached))
            receiver = dotted_name(tensor) if tensor is not None else None
            if receiver:
                self.backward_receivers.setdefault(self._scope(), set()).add(receiver)
            return
        if semantics.method_name(node) == "append" and len(node.args) == 1 and not node.args[0].keyword:
            accumulator = dotted_name(semantics.receiver(node))
            if accumulator is not None:
                self.reads.setdefault((self._scope(), accumulator), set()).update(names_in(node.args[0].value))
                for operand in _tuple_items(node.args[0].value):
                    self._accumulation(node, accumulator, operand)
            return
        self._passed_to_an_accumulating_method(node)

    def _passed_to_an_accumulating_method(self, call: cst.Call) -> None:
        """`losses.update(total_loss, n)` where `losses` is an instance of a class of the file whose `update` adds its
        parameter into the instance (`self.sum += val * n`, `_accumulated_parameters`): the instance accumulates
        the argument, as `acc += loss` would."""
        if type(call.func) is not cst.Attribute or not call.args or any(arg.star for arg in call.args):
            return
        if not loop_nodes(self.ctx.stack):
            return
        accumulator = dotted_name(call.func.value)
        if accumulator is None:
            return
        called = Values.of(self.ctx).called_method(call, self.ctx.stack)
        method = method_of(called[0], called[1]) if called is not None else None
        if method is None or method.decorators:
            return
        accumulated = self.accumulating.get(id(method))
        if accumulated is None:  # a loop updates several meters of one class: its method is read once
            accumulated = self.accumulating[id(method)] = _accumulated_parameters(method)
        if not accumulated:
            return
        for name in sorted(accumulated):
            given = argument_for(call, method, name, method=True)
            if given is not None:
                self.reads.setdefault((self._scope(), accumulator), set()).update(names_in(given))
                self._accumulation(call, accumulator, given)

    def _iterated_for(self, tensor: Optional[cst.BaseExpression]) -> Set[str]:
        """`for loss in losses: loss.backward()` (or `loss = next(batches)` after `batches = iter(losses)`): the
        collections whose elements the backward call reaches."""
        found: Set[str] = set()
        roots = {name.partition(".")[0] for name in names_in(tensor)}
        for looped in iterations_around(self.ctx, self.ctx.stack):
            if roots.intersection(names_in(looped.target)):
                found.update(names_in(looped.iterable))
        return found

    def _accumulation(self, statement: cst.CSTNode, accumulator: str, operand: cst.BaseExpression) -> None:
        loops = loop_nodes(self.ctx.stack)
        if not loops or semantics.grad_enabled_at(self.ctx.stack, self.ctx) is False:
            return
        if under_dynamic_grad_mode(self.ctx.stack, self.ctx):
            return
        is_loss = self._is_loss(operand)
        if is_loss is False:
            return
        function = self.ctx.callgraph.current(self.ctx.stack).key
        scope_node = innermost_scope(self.ctx.stack)
        self.accumulations.append(
            _Accumulation(
                statement, operand, accumulator, id(scope_node), function, id(loops[0]), is_loss, scope_node,
                tuple(self.ctx.scope_nodes),
            )
        )

    def _is_loss(self, operand: cst.BaseExpression) -> Optional[bool]:
        operands = arithmetic_operands(operand)
        if operands != [operand]:  # `loss / n`: a loss if one operand is (the graph goes into the result)
            found = [self._is_loss(each) for each in operands]
            return True if True in found else None if None in found else False
        if is_loss_call(operand, self.ctx):
            return not (_of_detached_inputs(operand) or holds_no_graph(operand, self.ctx))
        if type(operand) is cst.Call:  # `total += trainer.step(x, y)`
            return True if _returns_a_loss(operand, self.ctx, self.ctx.stack) else None
        name = dotted_name(operand)
        if name is None:
            return False
        latest = self.latest.get((self._scope(), name))
        if latest is None:
            return None
        value, stack = latest
        if _detached(value) or semantics.grad_enabled_at(stack, self.ctx) is False:
            return False
        if is_loss_value(value, self.ctx):
            return not (type(value) is cst.Call and _of_detached_inputs(value) or holds_no_graph(value, self.ctx, stack))
        # A helper of the file that returns a number (`np.mean` of `.item()` values: numpy's functions make no
        # graph), followed by the value model.
        if type(operand) is cst.Name and self._only_numbers(operand):
            return False
        # A function or method of the file that returns a loss (`cost = model.train_model(x, y)`).
        return True if type(value) is cst.Call and _returns_a_loss(value, self.ctx, stack) else None

    def _only_numbers(self, name: cst.Name) -> bool:
        origins = Values.of(self.ctx).origins(name)
        return bool(origins) and all(
            not origin.opaque and not origin.applied and self._number(origin.node, origin.place)
            for origin in origins
        )

    def _number(self, node: cst.CSTNode, place) -> bool:
        """A literal, a number made from a tensor (`.item()`, `float(...)`), a numpy call, or such a number
        combined with a literal or a variable (`float(total) / count`)."""
        if type(node) in (cst.Integer, cst.Float) or _detached(node):
            return True
        if type(node) is cst.Call:
            return (place.context.qualified_name(node.func, place.stack) or "").startswith("numpy.")
        if type(node) is cst.BinaryOperation:
            sides = (node.left, node.right)
            made = [type(side) is cst.Call and self._number(side, place) for side in sides]
            return any(made) and all(
                made_here or type(side) in (cst.Integer, cst.Float, cst.Name) for side, made_here in zip(sides, made)
            )
        return False

    # ------------------------------------------------------------ decision

    def finish(self) -> None:
        self._note_assignments({accumulation.scope for accumulation in self.accumulations})
        reported: Set[int] = set()  # one report per statement, for the first loss of a tuple appended
        for accumulation in self.accumulations:
            if id(accumulation.statement) in reported:
                continue
            scope = accumulation.scope
            if accumulation.is_loss is None:
                receivers = self.backward_receivers.get(scope, ())
                if not any(dotted_name(operand) in receivers for operand in arithmetic_operands(accumulation.operand)):
                    continue
            if accumulation.accumulator in self._backpropagated(scope, accumulation.function):
                continue
            resets = self.resets.get((scope, accumulation.accumulator), ())
            if any(accumulation.loop in loops for loops in resets):
                continue
            if grad_disabled_by_a_caller(accumulation.function, self.ctx) is not None:
                continue
            method = ".detach()" if self._used_as_tensor(accumulation) else ".item()"
            operand = self.ctx.code(accumulation.operand)
            if arithmetic_operands(accumulation.operand) != [accumulation.operand] and not accumulation.operand.lpar:
                operand = f"({operand})"  # `(loss / n).item()`, not `loss / n.item()`
            detached = operand + method
            fix = Fix.unsafe(f"accumulate `{detached}`", self.ctx.replace(accumulation.operand, detached))
            reported.add(id(accumulation.statement))
            self.report(accumulation.statement, fix=fix)

    def _used_as_tensor(self, accumulation: _Accumulation) -> bool:
        """Whether the accumulator (or, for a list, its elements) is used where a Python float would not do."""
        if "." in accumulation.accumulator:  # `self.total`: read by code this function does not show
            return True
        uses = _TensorUses(self.ctx, accumulation.scope_chain, self.items)
        scope = accumulation.scope_node
        walk_visitor(scope.body if isinstance(scope, cst.FunctionDef) else scope, uses)
        return uses.reaches(accumulation.accumulator)

    def _backpropagated(self, scope: int, function: str) -> Set[str]:
        """Variables whose values flow into a backward call in this scope or, in a function that neither runs
        backward nor evaluates (`compute_loss`), into its return value, for the caller to backpropagate."""
        found = set(self.backpropagated.get(scope, ()))
        if scope not in self.backpropagated and not evaluates(function, self.ctx):
            found.update(self.returned.get(scope, ()))
        pending = list(found)
        while pending:
            for name in self.reads.get((scope, pending.pop()), ()):
                if name not in found:
                    found.add(name)
                    pending.append(name)
        return found


def _returns_a_loss(call: cst.Call, ctx, stack) -> bool:
    """`call` runs a function or method of the file (`Values.returned`) that may return a loss holding its graph: a
    returned value one of whose origins is a loss (`return self.cost` after `self.cost = self.criterion(out, y)`),
    returned with gradients on and not known to hold no graph. A number or a detached copy (`return cost.item()`) is
    no loss."""
    for value, place in Values.of(ctx).returned(call, stack):
        there = place.context
        if semantics.grad_enabled_at(path_to(place.statement, place.scopes), there) is False:
            continue
        if any(is_loss_origin(origin) for origin in Values.of(there).origins(value, place.stack)):
            if not holds_no_graph(value, there, place.stack):
                return True
    return False


def _accumulated_parameters(method: cst.FunctionDef) -> FrozenSet[str]:
    """The parameters a method adds into its instance's state as they are (a meter's `update(self, val, n=1)` doing
    `self.sum += val * n`, `self.sum = self.sum + val`, `self.history.append(val)`): a tensor passed for one stays
    referenced by the instance, graph and all, across calls. A parameter the method rebinds (`val = float(val)`) or
    converts where it adds it (`self.sum += float(val) * n`, `val.item()`) is not one."""
    params = method.params
    positional = list(params.posonly_params) + list(params.params)
    names = {param.name.value for param in positional[1:] + list(params.kwonly_params)}
    found: Set[str] = set()
    rebound: Set[str] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign) and type(node.target) is cst.Name:
            rebound.add(node.target.value)
        target = added = None
        if type(node) is cst.AugAssign and type(node.operator) is cst.AddAssign:
            target, added = node.target, node.value
        elif type(node) is cst.Assign and len(node.targets) == 1 and type(node.value) is cst.BinaryOperation and (
            type(node.value.operator) is cst.Add
        ):
            target = node.targets[0].target
            left, right = node.value.left, node.value.right
            added = right if dotted_name(left) == dotted_name(target) else left if dotted_name(right) == dotted_name(target) else None
        elif type(node) is cst.Call and method_name(node) == "append" and len(node.args) == 1:
            target, added = node.func.value, node.args[0].value
        if added is not None and (dotted_name(target) or "").startswith("self."):
            found.update(name for name in _bare_names(added) if name in names)
        return True

    walk(method.body, on_visit, lambda node: None)
    return frozenset(found - rebound)


def _bare_names(expr: cst.BaseExpression) -> List[str]:
    """The names arithmetic of `expr` adds as they are: `val` in `val * n`, not in `float(val) * n` or `val.item()`."""
    if type(expr) is cst.BinaryOperation:
        return _bare_names(expr.left) + _bare_names(expr.right)
    if type(expr) is cst.UnaryOperation:
        return _bare_names(expr.expression)
    return [expr.value] if type(expr) is cst.Name else []


def _tuple_items(appended: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The items of a tuple appended (`log.append((step, loss))` keeps the loss, and its graph, in the tuple), each
    judged as if appended alone; else the value appended."""
    if type(appended) is cst.Tuple and all(type(element) is cst.Element for element in appended.elements):
        return [element.value for element in appended.elements]
    return [appended]


def _appended(operand: cst.BaseExpression) -> cst.BaseExpression:
    """The loss of `xs += [loss]` (or `xs = xs + [loss]`), which appends it as `xs.append(loss)` does; else the
    operand itself."""
    if type(operand) in (cst.List, cst.Tuple) and len(operand.elements) == 1:
        element = operand.elements[0]
        if type(element) is cst.Element:
            return element.value
    return operand


def _of_detached_inputs(call: cst.Call) -> bool:
    """A loss computed from detached tensors only (`criterion(pred.detach().cpu(), y.detach())`, `x.data`): it
    has no graph to keep."""
    return bool(call.args) and all(_detached_chain(arg.value) for arg in call.args)


def _detached_chain(expr: cst.BaseExpression) -> bool:
    """`expr` is a method chain with a detaching step (`pred.detach().cpu()`, `out.data.float()`)."""
    while True:
        if type(expr) is cst.Attribute:
            if expr.attr.value == "data":
                return True
            expr = expr.value
        elif type(expr) is cst.Call and type(expr.func) is cst.Attribute:
            if expr.func.attr.value in _DETACHING_METHODS:
                return True
            expr = expr.func.value
        else:
            return False


def _detached(value: cst.BaseExpression) -> bool:
    if not isinstance(value, cst.Call):
        return False
    if semantics.method_name(value) in _DETACHING_METHODS:
        return True
    return isinstance(value.func, cst.Name) and value.func.value in _DETACHING_BUILTINS


class _TensorUses(OwnScopeVisitor):
    """The names a scope uses as tensors: with an attribute or method (`total.item()`, `losses[-1].cpu()`), as an
    argument of a torch function (`torch.stack(losses)`), or as a returned or yielded value; and the loop variables
    over each name (`for loss in losses`), whose uses are uses of its elements."""

    def __init__(self, ctx, scope_chain: Tuple[cst.CSTNode, ...], items: Dict[int, cst.BaseExpression]):
        self.ctx = ctx
        self.scope_chain = scope_chain
        # The targets of `x = next(batches)` taking a `while`'s items, and what each iterates.
        self.items = items
        self.used: Set[str] = set()
        self.elements: Dict[str, Set[str]] = {}

    def reaches(self, name: str) -> bool:
        """Whether `name`, or a loop variable over it (over one over it, ...), is used as a tensor."""
        pending, seen = [name], set()
        while pending:
            current = pending.pop()
            if current in self.used:
                return True
            seen.add(current)
            pending.extend(self.elements.get(current, set()) - seen)
        return False

    def _use(self, expr: Optional[cst.BaseExpression]) -> None:
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        name = dotted_name(expr) if expr is not None else None
        if name is not None:
            self.used.add(name)

    def _loop(self, target: cst.BaseExpression, iterated: cst.BaseExpression) -> None:
        name = dotted_name(iterated)
        if name is not None:
            self.elements.setdefault(name, set()).update(names_in(target))

    def visit_For(self, node: cst.For) -> None:
        self._loop(node.target, node.iter)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._loop(node.target, node.iter)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if id(target.target) in self.items:
                self._loop(target.target, self.items[id(target.target)])

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value not in _LIST_METHODS:
            self._use(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualified_name(node.func, self.scope_chain)
        if qualified and qualified.startswith("torch.") and qualified not in _NUMBER_TAKING:
            for arg in node.args:
                self._use(arg.value)

    def visit_Return(self, node: cst.Return) -> None:
        self.used.update(names_in(node.value))

    def visit_Yield(self, node: cst.Yield) -> None:
        if isinstance(node.value, cst.BaseExpression):
            self.used.update(names_in(node.value))
