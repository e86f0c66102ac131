from typing import Optional, Sequence

import libcst as cst

from torchlint import semantics
from torchlint.analysis.grad_mode import called_only_without_grad, under_dynamic_grad_mode
from torchlint.analysis.values import Values, constant_of
from torchlint.engine.context import last_parts
from torchlint.finding import Edit, Fix, Location
from torchlint.fixes.rewrites import code_in_place
from torchlint.rules.api._names import import_edit, spell
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

VARIABLE = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})
# Calls that need the graph: wrapping them in `no_grad` would break training, not restore the old evaluation.
# Before 0.4 `volatile=True` was how evaluation skipped autograd, and `torch.no_grad()` did not exist.
NO_GRAD_SINCE = (0, 4)
_NEEDS_GRAPH = frozenset({"backward", "step", "zero_grad", "grad"})


class VolatileVariable(Rule):
    """
    ## What it does
    Flags `Variable(x, volatile=True)` (also with a computed `volatile=`), from
    `torch.autograd`.

    Not flagged: `Variable(x)` alone (TL602 reports it as deprecated) and `volatile=False`,
    which asked for nothing (torch 2.13 does not warn), also where it is a helper's parameter
    that every call of the helper leaves or passes False (`get_batch(source, i)` for
    `def get_batch(source, i, evaluation=False)`, in the file or other project files); code for torch below 0.4 (`torch-version`, or the project's
    own torch requirement), where `volatile=True` still worked and `torch.no_grad()` did
    not exist.

    ## Why is this bad?
    Before torch 0.4, a volatile input made everything computed from it skip autograd: the
    way evaluation ran without a graph. Since 0.4 the keyword does nothing but warn
    (torch 2.13: `UserWarning: volatile was removed and now has no effect. Use with
    torch.no_grad() instead.`), so the evaluation it meant to lighten runs with autograd on:
    the model's output requires grad, and every layer keeps its activations for a backward
    that never comes.

    ## Fix safety
    Unsafe: drops `volatile=True` and puts the rest of the block, from that statement to the
    end of the loop or function body, under `with torch.no_grad():`, which restores what the
    old code did but changes what torch 2.13 computes (outputs no longer require grad). Only
    offered inside a function or loop, for a literal `volatile=True`, when that part of the
    block calls no `backward`, `step`, `zero_grad` or `autograd.grad` and defines no
    function or generator: there the whole rest of the block is evaluation, the same scope
    the volatile input reached. Where the call already runs under `no_grad`, the fix only
    drops the keyword, and is safe (it has no effect). That includes a helper's computed
    `volatile=flag` whose every call passing the flag anything but False is made under
    `no_grad` (an evaluation calling `get_batch(..., evaluation=True)` inside
    `with torch.no_grad():`): the finding then says to drop the keyword.
    """

    code = "TL612"
    name = "volatile-variable"
    about_the_source = True
    # The flagged call passes the keyword `volatile`.
    triggers = words("volatile")
    call_parts = last_parts(VARIABLE)
    fix_safety = "safe or unsafe"
    message = (
        "`volatile=` has had no effect since torch 0.4 (torch warns `volatile was removed and now has no "
        "effect`): what is computed from this input runs with autograd on (a model applied to it builds the graph "
        "and keeps its activations); use `with torch.no_grad():`"
    )
    under_no_grad_message = (
        "`volatile=` has had no effect since torch 0.4 (it only warns); this code already runs under `no_grad`: "
        "drop the keyword"
    )
    example = """
    from torch.autograd import Variable  # expect: TL602:28

    def evaluate(model, loader):
        for images, labels in loader:
            images = Variable(images, volatile=True)  # expect: TL602:18, TL612:35
            outputs = model(images)
    """
    use_instead = """
    import torch

    def evaluate(model, loader):
        for images, labels in loader:
            with torch.no_grad():
                outputs = model(images)
    """

    def visit_Call(self, node: cst.Call) -> None:
        volatile = semantics.keyword(node, "volatile")
        if volatile is None or self.ctx.config.torch_version < NO_GRAD_SINCE:
            return
        if not self.ctx.qualified_name_in(node.func, VARIABLE):
            return
        values = Values.of(self.ctx)
        if values.constant(volatile.value) is False:
            return  # `volatile=False`, also through a helper's parameter every call leaves False: nothing warns
        without = _without_keyword(node, volatile)
        if semantics.grad_enabled_at(self.ctx.stack, self.ctx) is False or self._true_only_under_no_grad(volatile.value):
            edit = self.ctx.replace(node, code_in_place(self.ctx, without, self.ctx.stack))
            self.report(node, self.under_no_grad_message, Fix.safe("Drop `volatile=`", edit))
            return
        fix = self._wrap_in_no_grad(node, without) if semantics.literal(volatile.value) is True else None
        self.report(volatile, fix=fix)

    def _true_only_under_no_grad(self, flag: cst.BaseExpression) -> bool:
        """`volatile=flag` for a parameter of the function around the call, where nothing in the function sets the
        grad mode, and every call of the function that may pass the flag anything but False is made with gradients
        disabled (an evaluation calling `get_batch(..., evaluation=True)` under `no_grad`)."""
        stack = self.ctx.stack
        if type(flag) is not cst.Name or semantics.grad_enabled_at(stack, self.ctx) is not None:
            return False
        if under_dynamic_grad_mode(stack, self.ctx):
            return False
        calls = Values.of(self.ctx).arguments(flag, stack)
        if calls is None:
            return False
        return called_only_without_grad([call for call in calls if constant_of(call.origins) is not False])

    def _wrap_in_no_grad(self, call: cst.Call, without: cst.Call) -> Optional[Fix]:
        stack = self.ctx.stack
        index = _statement_index(stack)
        if index is None or type(stack[index - 1]) is not cst.IndentedBlock:
            return None
        statement, block = stack[index], stack[index - 1]
        if not isinstance(stack[index - 2], (cst.For, cst.While, cst.FunctionDef)):
            return None  # the rest of an `if` arm or a `with` body may not be the scope the input reached
        region = list(block.body[block.body.index(statement):])
        if any(_needs_graph(other) for other in region):
            return None
        no_grad = spell(self.ctx, "torch.no_grad", stack)
        extra = None
        if no_grad is None:
            extra = import_edit(self.ctx, "torch.no_grad", stack)
            if extra is None:
                return None
            no_grad = "torch.no_grad"
        region[0] = statement.deep_replace(call, without).with_changes(leading_lines=())
        wrapped = cst.With(items=[cst.WithItem(cst.parse_expression(f"{no_grad}()"))], body=cst.IndentedBlock(body=region))
        outer = stack[:index]
        indent = "".join(self.ctx.module.default_indent if node.indent is None else node.indent for node in outer if type(node) is cst.IndentedBlock)
        text = code_in_place(self.ctx, wrapped, outer)
        text = text[len(indent):] if text.startswith(indent) else text
        start, _ = self.ctx.location(statement)
        _, end = self.ctx.location(region[-1] if len(region) > 1 else statement)
        end_row = end.row
        line_end = Location(end_row, len(self.ctx.text.splitlines()[end_row - 1]) + 1)
        edits = [Edit(text.rstrip("\r\n"), start, line_end)]
        if extra is not None:
            edits.append(extra)
        return Fix.unsafe("Run the rest of the block under `torch.no_grad()`", *edits)


def _without_keyword(call: cst.Call, dropped: cst.Arg) -> cst.Call:
    args = [arg for arg in call.args if arg is not dropped]
    if args and call.args[-1] is dropped:
        args[-1] = args[-1].with_changes(comma=dropped.comma)
    return call.with_changes(args=args)


def _statement_index(stack: Sequence[cst.CSTNode]) -> Optional[int]:
    """Where the simple statement holding the visited node is on `stack`; None inside a lambda or comprehension
    header of another statement kind, or when the call is part of a compound statement's header."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) is cst.SimpleStatementLine:
            return index
        if isinstance(node, (cst.BaseCompoundStatement, cst.Lambda)):
            return None
    return None


class _GraphUse(cst.CSTVisitor):
    def __init__(self):
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if semantics.terminal_name(node.func) in _NEEDS_GRAPH:
            self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.found = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.found = True

    def visit_Yield(self, node: cst.Yield) -> None:
        self.found = True


def _needs_graph(statement: cst.CSTNode) -> bool:
    visitor = _GraphUse()
    statement.visit(visitor)
    return visitor.found
