import os
from typing import Iterator, Optional

import libcst as cst

from torchlint.engine.walk import walk_visitor
from torchlint import semantics
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.values import Values
from torchlint.engine.context import last_parts
from torchlint.engine.scopes import Scope
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words
from torchlint.rules.data._dataset import construction, loader_argument

PARTIAL = frozenset({"functools.partial"})
NOTEBOOK_MESSAGE = (
    "{what} cannot be unpickled in DataLoader workers: under the spawn and forkserver start methods (Jupyter on "
    "macOS and Windows, and on Linux from Python 3.14) a worker looks `{name}` up in its own `__main__`, which never "
    "ran the notebook's cells, and dies with `AttributeError: Can't get attribute '{name}' on <module '__main__' "
    "(built-in)>`; move the definition into a .py module and import it"
)


class UnpicklableWorkerCallable(Rule):
    """
    ## What it does
    Flags a `lambda`, or a function or class defined inside another function, that
    reaches DataLoader worker processes: passed as `collate_fn` or `worker_init_fn`
    to a DataLoader whose `num_workers` is not known to be `0` (a literal, a name
    always bound to one, or in a notebook a helper's parameter that defaults to 0 and
    that no call of the helper sets otherwise; a helper's `**kwargs` forwarded to the
    loader counts as nothing where every call of the helper is known and none fills
    it), given as a transform
    (any keyword argument whose name contains `transform`, including lambdas nested
    in a `Compose([...])`) to the dataset such a loader reads, or stored on `self` by
    that dataset's class, bare or held by what it stores (`self.transform =
    Compose([lambda x: ..., ...])`, an element of a list or dict, an argument of a
    class built): the class defined in the same file, or in a project file the
    loader's file imports (`from MiniImagenet import MiniImagenet`; reported at the
    loader's dataset argument, naming the attribute and the file). A lambda that only
    serves a function's call (`sorted(files, key=lambda f: ...)`) is not stored. A
    lambda bound to a module-level name is flagged too: pickle looks it up as
    `<lambda>` and fails the same way.

    In a notebook, a function or class the notebook itself defines (a module-level
    `def` or `class` in any cell) is flagged too, in the same places, and so is a
    dataset whose class the notebook defines.

    Module-level functions, `functools.partial` of them, bound methods and
    instances of module-level classes pickle fine and are not flagged, nor, in a
    notebook, functions and classes imported from modules. Samplers are not
    flagged: they run in the main process and are never sent to workers.

    ## Why is this bad?
    Under the `spawn` and `forkserver` start methods (the default on Windows and
    macOS, and on Linux from Python 3.14) the dataset, `collate_fn` and
    `worker_init_fn` are pickled to every worker. Pickle stores functions by
    qualified name, which a lambda or a local function does not have, so starting
    the workers fails with `PicklingError: Can't pickle <function <lambda> ...>` or
    `AttributeError: Can't pickle local object '...<locals>.<lambda>'`. Under `fork`
    the same code works, so it breaks only on another machine or Python version.

    A notebook's own definitions pickle by name, as `__main__.<name>`, but a worker
    never runs the notebook's cells, so its `__main__` lacks them: under the same
    start methods (Jupyter on macOS and Windows, and on Linux from Python 3.14) the
    worker dies with
    `AttributeError: Can't get attribute '<name>' on <module '__main__' (built-in)>`.

    ## Fix safety
    No fix: the callable has to become a module-level function (with
    `functools.partial` for its parameters), or in a notebook move into a `.py`
    module the notebook imports, which is a refactoring.
    """

    code = "TL304"
    name = "unpicklable-worker-callable"
    # Every report concerns an argument of a DataLoader call (or of the dataset it is given).
    triggers = words("DataLoader")
    call_parts = last_parts(semantics.DATALOADER)
    message = (
        "{what} cannot be pickled to DataLoader workers: under the spawn and forkserver start methods (Windows, macOS, "
        "and Linux from Python 3.14) starting the workers fails with `Can't pickle`; define it as a module-level "
        "function (use `functools.partial` for its parameters)"
    )
    example = """
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, num_workers=4, collate_fn=lambda batch: batch)  # expect: TL304:71
    """
    use_instead = """
    from torch.utils.data import DataLoader

    def keep_as_list(batch):
        return batch

    loader = DataLoader(dataset, batch_size=32, num_workers=4, collate_fn=keep_as_list)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.reported = set()

    def visit_Call(self, node: cst.Call) -> None:
        if not semantics.is_dataloader_call(node, self.ctx) or not semantics.may_start_workers(node, self.ctx):
            return
        for parameter in ("collate_fn", "worker_init_fn"):
            arg = loader_argument(node, parameter)
            if arg is not None:
                self._check(arg.value, f"`{parameter}`")
        dataset = loader_argument(node, "dataset")
        built = construction(dataset.value, self.ctx) if dataset is not None else None
        if built is None:
            return
        # A class the notebook defines; a function it defines returns an instance of something else (`random_split`).
        if isinstance(built.func, cst.Name) and isinstance(self._notebook_definition(built.func), cst.ClassDef):
            name = built.func.value
            self._report(dataset.value, f"the dataset (an instance of `{name}`, a class defined in this notebook)", name)
        for arg in built.args:
            if arg.keyword is not None and "transform" in arg.keyword.value:
                self._check_transform(arg.value, f"the dataset's `{arg.keyword.value}`")
        self._check_dataset_class(built, dataset.value)

    def _check_transform(self, expr: cst.BaseExpression, role: str) -> None:
        for part in _callables_in(expr):
            self._check(part, role)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            # `transform = Compose([...])` built elsewhere: its names belong to another scope, its lambdas do not.
            built = construction(expr, self.ctx)
            for part in _callables_in(built) if built is not None else ():
                if isinstance(part, cst.Lambda):
                    self._check(part, role)

    def _check(self, expr: cst.BaseExpression, role: str) -> None:
        """Report `expr` when it is (or wraps, through `functools.partial`) a lambda, a local function or class, or
        in a notebook a function or class the notebook defines."""
        ctx = self.ctx
        if isinstance(expr, cst.Call):
            if ctx.qualified_name(expr.func) in PARTIAL and expr.args:
                self._check(expr.args[0].value, role)
            elif isinstance(expr.func, cst.Name) and self._local_definition(expr.func):
                self._report(expr, f"{role} (an instance of `{expr.func.value}`, a class defined inside a function)")
            elif isinstance(expr.func, cst.Name) and isinstance(self._notebook_definition(expr.func), cst.ClassDef):
                name = expr.func.value
                self._report(expr, f"{role} (an instance of `{name}`, a class defined in this notebook)", name)
        elif isinstance(expr, cst.Lambda):
            self._report(expr, f"{role} (a lambda)")
        elif isinstance(expr, cst.Name):
            definition = self._local_definition(expr)
            in_notebook = self._notebook_definition(expr) if definition is None else None
            if definition is not None:
                self._report(expr, f"{role} (`{expr.value}`, a {_kind(definition)} defined inside a function)")
            elif in_notebook is not None:
                self._report(expr, f"{role} (`{expr.value}`, a {_kind(in_notebook)} defined in this notebook)", expr.value)
            else:
                values = ctx.assigned_values(expr)
                if values and isinstance(values[-1], cst.Lambda):
                    self._report(expr, f"{role} (`{expr.value}`, a lambda)")

    def _local_definition(self, name: cst.Name) -> Optional[cst.CSTNode]:
        """The `def`/`class` statement binding `name`, when it sits in a function body."""
        scope: Optional[Scope] = self.ctx.scopes.binding_scope(name.value, self.ctx.stack)
        if scope is None or not isinstance(scope.node, cst.FunctionDef):
            return None
        finder = _Definition(name.value)
        walk_visitor(scope.node.body, finder)
        return finder.found

    def _notebook_definition(self, name: cst.Name) -> Optional[cst.CSTNode]:
        """In a notebook, the module-level `def`/`class` statement binding `name` (not an import)."""
        ctx = self.ctx
        if ctx.file_kind is not FileKind.NOTEBOOK:
            return None
        scope = ctx.scopes.binding_scope(name.value, ctx.stack)
        if scope is None or not isinstance(scope.node, cst.Module) or name.value in scope.imports:
            return None
        for statement in _statements(scope.node):
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == name.value:
                return statement
        return None

    def _check_dataset_class(self, built: cst.Call, dataset: cst.BaseExpression) -> None:
        """Lambdas the dataset's class (of this file, or of a project file it imports) stores on `self`, bare or held
        by what it stores (`self.transform = Compose([lambda x: ..., ...])`), travel to the workers with the dataset.
        One in this file is reported where it is written; one in another file at the loader's `dataset`, naming it."""
        if not isinstance(built.func, (cst.Name, cst.Attribute)):
            return
        for origin in Values.of(self.ctx).origins(built.func):
            if not isinstance(origin.node, cst.ClassDef):
                continue
            there = origin.place.context
            elsewhere = []
            for attribute, values in there.scopes.scope_of(origin.node).attributes.items():
                held = [found for value in values for found in _held_lambdas(value)]
                if there is self.ctx:
                    for found in held:
                        self._report(found, f"the dataset's `self.{attribute}` (a lambda)")
                elif held:
                    elsewhere.append(attribute)
            if elsewhere and there is not self.ctx:
                stored = ", ".join(f"`self.{attribute}`" for attribute in elsewhere)
                where = os.path.basename(there.filename)
                self._report(dataset, f"the dataset's {stored} (a lambda, stored by `{origin.node.name.value}` in {where})")

    def _report(self, node: cst.CSTNode, what: str, notebook_name: Optional[str] = None) -> None:
        """`notebook_name`: the notebook's own definition that `what` needs, which a worker cannot find."""
        if id(node) not in self.reported:
            self.reported.add(id(node))
            what = what[0].upper() + what[1:]
            if notebook_name is None:
                self.report(node, self.message.format(what=what))
            else:
                self.report(node, NOTEBOOK_MESSAGE.format(what=what, name=notebook_name))


def _kind(definition: cst.CSTNode) -> str:
    return "class" if isinstance(definition, cst.ClassDef) else "function"


def _callables_in(expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """`expr` and the arguments and elements nested in it (`Compose([ToTensor(), Lambda(lambda x: x)])`), not lambda bodies."""
    yield expr
    if isinstance(expr, cst.Call):
        for arg in expr.args:
            yield from _callables_in(arg.value)
    elif isinstance(expr, (cst.List, cst.Tuple)):
        for element in expr.elements:
            yield from _callables_in(element.value)


def _held_lambdas(value: cst.BaseExpression) -> Iterator[cst.Lambda]:
    """The lambdas a stored value holds: itself, the elements of a list, tuple, set or dict, and the arguments of a
    class built (`Compose([lambda x: ..., Resize(n)])`, `transforms.Lambda(lambda x: ...)`: its instance keeps them);
    not those of a function's call (`sorted(files, key=lambda f: ...)` returns a list without it)."""
    if isinstance(value, cst.Lambda):
        yield value
    elif isinstance(value, (cst.List, cst.Tuple, cst.Set)):
        for element in value.elements:
            yield from _held_lambdas(element.value)
    elif isinstance(value, cst.Dict):
        for element in value.elements:
            if isinstance(element, cst.DictElement):
                yield from _held_lambdas(element.value)
    elif isinstance(value, cst.Call) and (semantics.terminal_name(value.func) or "")[:1].isupper():
        for arg in value.args:
            yield from _held_lambdas(arg.value)


def _statements(scope_node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The statements directly in a module or function body."""
    body = scope_node.body if isinstance(scope_node, cst.Module) else getattr(scope_node.body, "body", ())
    return iter(body)


class _Definition(cst.CSTVisitor):
    """The `def name`/`class name` statement of one function body (in its blocks, not in nested scopes)."""

    def __init__(self, name: str):
        self.name = name
        self.found: Optional[cst.CSTNode] = None

    def _definition(self, node) -> bool:
        if node.name.value == self.name and self.found is None:
            self.found = node
        return False

    visit_FunctionDef = visit_ClassDef = _definition

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False
