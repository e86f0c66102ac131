from typing import List, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import holds_tensor
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.loops import FUNCTION_BOUNDARIES, LoopIndex, loop_nodes
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes, words

# Tensor methods that copy to the host, and so wait for the device to finish what it was given.
_SYNCING_METHODS = frozenset({"item", "cpu", "numpy"})
# Builtins that read a tensor's value on the host (`float(loss)`, `print(loss)` formats the values).
_READING_BUILTINS = frozenset({"float", "print"})
_CONDITIONAL = frozenset({cst.If, cst.IfExp})


class HostSyncInStep(Rule):
    """
    ## What it does
    Flags `.item()`, `.cpu()`, `.numpy()`, `float(t)` and `print(t)` of a tensor that
    run on every iteration of the innermost training loop (a loop that runs
    backward and an optimizer step, itself or through the functions of the module
    it calls, and holds no training loop of its own). `t` is a tensor when the
    value model says so (`torch.*` results, tensors unpacked from a DataLoader), or
    when it is the loss the loop calls `.backward()` on. One finding per chain:
    `loss.detach().cpu().numpy()` is reported at `.cpu()`.

    Not flagged: calls under an `if` in the loop (`if step % 100 == 0:` logging),
    calls in functions the loop calls, in nested loops, and in loops that do not
    train (evaluation); test files.

    Not in the default selection: almost every training loop reads its loss with
    `.item()` each step, and on a CPU that costs nothing. The rule is for the
    GPU-bound loop whose throughput matters.

    ## Why is this bad?
    CUDA runs kernels asynchronously: the Python loop normally queues the next
    step while the GPU still computes this one. Reading a value on the host
    (`.item()`, a device-to-host copy, formatting a tensor for `print`) makes the
    host wait until every queued kernel has finished, once per step, so the GPU
    idles while Python prepares the next batch. What that costs depends on the
    model, the batch and the GPU; it can only be measured on one. On a CPU there is
    no queue: the witness shows only that the call runs once per step.

    ## Fix safety
    No fix: accumulate on the device (`running += loss.detach()`) and read the
    value every N steps or once per epoch.
    """

    code = "TL309"
    name = "host-sync-in-step"
    opt_in = True
    uses_callgraph = True
    # A loop is reported only when it trains, which needs `.backward()` written in the file; the flagged call is
    # one of the methods or builtins.
    triggers = words("backward") & (attributes(*_SYNCING_METHODS) | words(*_READING_BUILTINS))
    message = (
        "`{call}` runs every training step and makes the host wait for the device to finish all queued work (on a "
        "GPU, a synchronisation per step); accumulate on the device (`total += loss.detach()`) and read it every "
        "N steps"
    )
    example = """
    for images, labels in loader:
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()  # expect: TL309:21
    """
    use_instead = """
    for step, (images, labels) in enumerate(loader):
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
        if step % 100 == 0:
            print(f"loss {running_loss.item() / (step + 1):.4f}")
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops = ctx.shared(LoopIndex)
        # Calls that may read a tensor on the host, with the stack at them and the value read (None: a method).
        self.reads: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...], List[cst.BaseExpression]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.loops.observe(node)
        if self.ctx.file_kind is FileKind.TEST:
            return
        method = semantics.method_name(node)
        if method in _SYNCING_METHODS:
            if not semantics.positional(node, 0) and not _after_a_sync(semantics.receiver(node)):
                self.reads.append((node, tuple(self.ctx.stack), []))
        elif type(node.func) is cst.Name and node.func.value in _READING_BUILTINS:
            if self.ctx.scopes.binding_scope(node.func.value, self.ctx.scope_nodes) is None:
                values = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
                values += [part.expression for value in values if type(value) is cst.FormattedString for part in value.parts if type(part) is cst.FormattedStringExpression]
                if values and (node.func.value == "print" or len(values) == 1):
                    self.reads.append((node, tuple(self.ctx.stack), values))

    def visit_Assign(self, node: cst.Assign) -> None:
        self.loops.observe(node)

    def finish(self) -> None:
        children = self.loops.children()
        training: dict = {}
        reported: Set[int] = set()
        for call, stack, values in self.reads:
            loops = loop_nodes(stack)
            if not loops or _conditional_in(stack, loops[0]):
                continue
            loop = self.loops.loops.get(id(loops[0]))
            if loop is None:
                continue
            if id(loop.node) not in training:
                training[id(loop.node)] = self.loops.trains(loop) and not any(
                    self.loops.trains(child) for child in children.get(id(loop.node), ())
                )
            if not training[id(loop.node)] or id(call) in reported:
                continue
            if values and not any(self._tensor(value, stack, loop) for value in values):
                continue
            reported.add(id(call))
            self.report(call, self.message.format(call=self.ctx.code(call)))

    def _tensor(self, value: cst.BaseExpression, stack, loop) -> bool:
        if type(value) is cst.Name and value.value in _backward_receivers(loop):
            return True
        return type(value) in (cst.Name, cst.Attribute, cst.Subscript) and holds_tensor(value, self.ctx, stack)


def _after_a_sync(receiver) -> bool:
    """A chain that reaches the host earlier (`x.cpu().numpy()`): reported once, at its first sync."""
    while type(receiver) is cst.Call:
        if semantics.method_name(receiver) in _SYNCING_METHODS:
            return True
        receiver = semantics.receiver(receiver)
    return False


def _conditional_in(stack, loop: cst.CSTNode) -> bool:
    """Between the loop and the innermost point of `stack` there is an `if`: the call runs on some steps only."""
    inside = False
    for node in stack:
        if node is loop:
            inside = True
        elif inside and type(node) in _CONDITIONAL:
            return True
        elif inside and type(node) in FUNCTION_BOUNDARIES:
            return False
    return False


def _backward_receivers(loop) -> Set[str]:
    """The names the loop calls `.backward()` on: its losses."""
    return {
        event.node.func.value.value for event in loop.events
        if "backward" in event.facts and type(event.node) is cst.Call and semantics.method_name(event.node) == "backward"
        and type(event.node.func.value) is cst.Name
    }
