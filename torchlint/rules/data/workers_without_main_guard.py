import os
from functools import cached_property
from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis import syntax
from torchlint.analysis.file_kind import FileKind, is_main_guard
from torchlint.analysis.summaries import imported_function_showing
from torchlint.analysis.values import Values
from torchlint.engine.callgraph import MODULE
from torchlint.analysis.facts import MULTIPROCESSING_SPAWN, project_import_names, worker_loader_given_to_iteration
from torchlint.rules.base import Rule
from torchlint.rules.triggers import project_imports, words

STARTS_WORKERS = "starts-workers"
ITERATING = "iterating a DataLoader with workers"
_NOT_RUN_ON_IMPORT = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


class WorkersWithoutMainGuard(Rule):
    """
    ## What it does
    Flags a module-level statement (outside any function or class and outside
    `if __name__ == "__main__":`) that starts worker processes: it iterates a
    DataLoader whose `num_workers` is not a literal `0` (`for batch in loader`,
    `next(iter(loader))`, `list(loader)`, a comprehension over the loader, also
    through `tqdm(loader)`, `enumerate`, `zip`, `itertools`, accelerate's `prepare`
    and a dict of loaders: `for phase, loader in loaders.items()`; the loader may be
    what a function or a method of a project file returns: `dataset =
    data_loader.load_data()` after `data_loader = CreateDataLoader(opt)`, whose class,
    of another file, keeps the DataLoader its `initialize` built), calls
    `torch.multiprocessing.spawn(...)` or `Process(...).start()`, or calls a function
    that does one of these, however many calls deep: a function of the same module
    (also a method through an instance of a class of the module: `trainer.fit()`),
    or one imported from another file of the project (`from data import
    train_epoch`), read from disk as the value model finds it; also a call of a
    function another project file defines that iterates the parameter the call gives
    a DataLoader with workers (`fit(model, dataloader=loader)` after `from lib.train
    import fit`, where `fit` runs `for batch in dataloader`, also through `enumerate`
    or `tqdm`, in its own body). A call of an imported
    function is reported only in a file that may run as a script: one with a
    `__main__` guard, or outside a package (no `__init__.py` beside it), and not a
    test.

    Not flagged: code under the `__main__` guard, DataLoaders with `num_workers=0`
    or none, and notebooks (also a `.py` notebook in percent format, with `# %%` cell
    markers; given up: such a file run as a script with `python` is not checked). A Jupyter kernel never re-imports the notebook, so the
    workers cannot re-run its cells and a guard would change nothing there (what
    does fail in a notebook under spawn is a worker that needs a class or function
    the notebook defines: TL304). A notebook cell that writes a script
    (`%%writefile train.py`) is linted as that script, and TL302 reports there.

    ## Why is this bad?
    Under the `spawn` and `forkserver` start methods (the default on Windows and
    macOS, and on Linux from Python 3.14) every worker process imports the script
    again. Unguarded, the import tries to start workers of its own and the worker
    dies with `RuntimeError: An attempt has been made to start a new process before
    the current process has finished its bootstrapping phase`; the parent then
    fails with `DataLoader worker (pid ...) exited unexpectedly`. The same script
    works under `fork`, so it breaks only on another machine or Python version.

    ## Fix safety
    No fix: which statements belong under the guard (and whether to wrap them in a
    `main()` function) is a refactoring for you to make.
    """

    code = "TL302"
    name = "workers-without-main-guard"
    uses_callgraph = True
    # Workers start only from a DataLoader, `spawn`/`start_processes` or a `Process`: names written however imported,
    # here or in the project file that defines the function called here.
    triggers = words("DataLoader", "spawn", "start_processes", "Process") | project_imports()
    message = (
        "{what} at module level without `if __name__ == \"__main__\":`: under the spawn and forkserver start methods "
        "(Windows, macOS, and Linux from Python 3.14) every worker re-imports this script and dies with `An attempt "
        "has been made to start a new process before the current process has finished its bootstrapping phase`; "
        "move it under the `__main__` guard"
    )
    example = """
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=64, num_workers=4)

    def train():
        for batch in loader:
            train_step(batch)

    train()  # expect: TL302:1
    """
    use_instead = """
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=64, num_workers=4)

    def train():
        for batch in loader:
            train_step(batch)

    if __name__ == "__main__":
        train()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # id(top-level statement) -> (statement, what starts the workers there)
        self.statements: Dict[int, tuple] = {}
        # Module-level calls of a method of this file's classes through an instance: (call-graph key, stack).
        self.method_calls: List[Tuple[str, Tuple[cst.CSTNode, ...]]] = []

    # The engine's recognizers note a "starts-workers" fact on the node before rules visit it (a loop's is judged when
    # asked: only here, for a loop that runs on import); the rule only adds where that node sits, which the call graph
    # does not keep for facts.
    def visit_For(self, node: cst.For) -> None:
        if _import_time_statement(self.ctx.stack) is not None and self._starts_workers(node):
            self._note(self.ctx.stack, ITERATING)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        if _import_time_statement(self.ctx.stack) is not None and self._starts_workers(node):
            self._note(self.ctx.stack, ITERATING)

    def visit_Call(self, node: cst.Call) -> None:
        if self._starts_workers(node):
            spawns = semantics.method_name(node) == "start" or self.ctx.qualified_name(node.func) in MULTIPROCESSING_SPAWN
            self._note(self.ctx.stack, "starting worker processes" if spawns else ITERATING)
        elif len(self.ctx.scope_nodes) == 1 and type(node.func) in (cst.Name, cst.Attribute) and self._may_run_as_script:
            self._imported_call(node)
            method = Values.of(self.ctx).called_method(node, self.ctx.stack) if type(node.func) is cst.Attribute else None
            if method is not None:  # `trainer.fit()` on a `Trainer(...)` of this file
                self.method_calls.append((f"{method[0].name.value}.{method[1]}", tuple(self.ctx.stack)))

    @cached_property
    def _may_run_as_script(self) -> bool:
        """Not a module of a package that is imported, not run: torchmetrics' `if _SKIP_SLOW_DOCTEST:` block calling a
        helper that starts a process is the package's import-time behaviour, and a `__main__` guard no fix for it."""
        kind = self.ctx.file_kind
        in_package = os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(self.ctx.filename)), "__init__.py"))
        return kind is FileKind.SCRIPT or (kind is not FileKind.TEST and not in_package)

    def _imported_call(self, call: cst.Call) -> None:
        """A module-level call of a function another project file defines, which starts workers there."""
        if syntax.head_name(call.func) not in project_import_names(self.ctx):
            return
        found = imported_function_showing(self.ctx, call.func, self.ctx.stack, STARTS_WORKERS)
        if found is not None:
            origin, name = found
            where = os.path.basename(origin.place.context.filename)
            self._note(self.ctx.stack, f"calling `{name}()`, which starts worker processes in {where},")
            return
        given = worker_loader_given_to_iteration(call, self.ctx)
        if given is not None:
            _, name, where = given
            self._note(
                self.ctx.stack,
                f"calling `{name}()` of {os.path.basename(where)}, which iterates the DataLoader with workers given to it,",
            )

    def _starts_workers(self, node: cst.CSTNode) -> bool:
        module = self.ctx.callgraph.functions[MODULE]
        if type(node) is cst.Call:  # noted during the walk, just before this visit: the last noted, if at all
            facts = module.facts.get(STARTS_WORKERS)
            return bool(facts) and facts[-1] is node
        return module.shows(STARTS_WORKERS, node)

    def _note(self, stack: Sequence[cst.CSTNode], what: str) -> None:
        statement = _import_time_statement(stack)
        if statement is not None:
            self.statements.setdefault(id(statement), (statement, what))

    def finish(self) -> None:
        if self.ctx.file_kind is FileKind.NOTEBOOK:
            return
        graph = self.ctx.callgraph
        depth = len(graph.functions)
        for callee, stack in [(site.callee, site.stack) for site in graph.functions[MODULE].calls] + self.method_calls:
            if graph.facts_of(callee, STARTS_WORKERS, depth):
                self._note(stack, f"calling `{callee}()`, which starts worker processes,")
        for statement, what in self.statements.values():
            self.report(statement, self.message.format(what=what[0].upper() + what[1:]))


def _import_time_statement(stack: Sequence[cst.CSTNode]) -> Optional[cst.CSTNode]:
    """The top-level statement holding the innermost node of `stack`, if that node runs when the module is imported."""
    if len(stack) < 2:
        return None
    for index, node in enumerate(stack[:-1]):
        if isinstance(node, _NOT_RUN_ON_IMPORT):
            return None
        if isinstance(node, cst.If) and stack[index + 1] is node.body and is_main_guard(node.test):
            return None
    return stack[1]

