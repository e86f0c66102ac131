from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from torchlint.engine.walk import walk_visitor
from torchlint import semantics
from torchlint.engine.context import last_parts
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words
from torchlint.rules.data._dataset import construction, is_dataset_class, loader_argument

RNG_CONSTRUCTORS = frozenset({
    "numpy.random.default_rng", "numpy.random.RandomState", "numpy.random.Generator",
    "random.Random", "torch.Generator",
})
GET_WORKER_INFO = frozenset({"torch.utils.data.get_worker_info", "torch.utils.data._utils.worker.get_worker_info"})
RESEEDING_METHODS = frozenset({"seed", "manual_seed"})


class RngObjectInDataset(Rule):
    """
    ## What it does
    Flags the creation of an RNG object (`np.random.default_rng(...)`,
    `np.random.RandomState(...)`, `random.Random(...)`, `torch.Generator()`) stored on
    `self` in a `Dataset`'s `__init__` and used by `__getitem__` (or a method it
    calls), in a file that builds a DataLoader whose `num_workers` is not a literal `0`.

    Not flagged: the global `np.random`, `random` and `torch` generators, and RNG
    objects re-seeded where the workers run: in a `worker_init_fn` or a function
    that calls `get_worker_info()` and touches the attribute, or by an assignment or
    `seed`/`manual_seed` call in `__getitem__` or a method it calls.

    ## Why is this bad?
    Each worker process receives its own copy of the dataset, RNG state included,
    so every worker draws the same numbers, and again every epoch: on torch 2.13,
    4 workers drawing 16 values from a `default_rng(0)` attribute produced 4 unique
    values of 16, identical in the next epoch. Random augmentation is silently
    repeated. The global generators do not have this problem: torch seeds them
    per worker (16 unique of 16). A `torch.Generator` attribute also crashes the
    workers under the `spawn` and `forkserver` start methods.

    ## Fix safety
    No fix: draw from the global generators, or re-seed the object per worker (for
    example from `torch.utils.data.get_worker_info().seed` in a `worker_init_fn`).
    """

    code = "TL305"
    name = "rng-object-in-dataset"
    uses_callgraph = True
    # Nothing is reported unless the file builds a DataLoader with workers: the rarest of the names the rule needs.
    triggers = words("DataLoader")
    call_parts = last_parts(semantics.DATALOADER | GET_WORKER_INFO)
    message = (
        "RNG object created in `Dataset.__init__`: every DataLoader worker gets an identical copy and repeats the same "
        "stream every epoch (observed with 4 workers: 4 unique values of 16){extra}; draw from the global "
        "`np.random`/`random`/`torch` generators (torch seeds them per worker) or re-seed it in a `worker_init_fn`"
    )
    example = """
    import numpy as np
    from torch.utils.data import DataLoader, Dataset

    class NoisyDataset(Dataset):
        def __init__(self, images):
            self.images = images
            self.rng = np.random.default_rng(0)  # expect: TL305:20

        def __len__(self):
            return len(self.images)

        def __getitem__(self, index):
            return self.images[index] + self.rng.normal(size=self.images[index].shape)

    loader = DataLoader(NoisyDataset(images), batch_size=32, num_workers=4)
    """
    use_instead = """
    import numpy as np
    from torch.utils.data import DataLoader, Dataset

    class NoisyDataset(Dataset):
        def __init__(self, images):
            self.images = images

        def __len__(self):
            return len(self.images)

        def __getitem__(self, index):
            return self.images[index] + np.random.normal(size=self.images[index].shape)

    loader = DataLoader(NoisyDataset(images), batch_size=32, num_workers=4)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.dataset_classes: Dict[str, cst.ClassDef] = {}
        self.loader_with_workers = False
        # Code that runs in the workers and can re-seed an attribute there, with the dataset class it
        # applies to (None: unknown, so any): functions calling `get_worker_info()`, and `worker_init_fn`
        # arguments (resolved in `finish`, when every function of the module is known).
        self.worker_functions: List[Tuple[cst.CSTNode, Optional[str]]] = []
        self.worker_init_fns: List[Tuple[cst.BaseExpression, Optional[str]]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if is_dataset_class(node, self.ctx, self.dataset_classes, self.ctx.stack[:-1]):
            self.dataset_classes[node.name.value] = node

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if semantics.is_dataloader_call(node, ctx):
            if semantics.may_start_workers(node, self.ctx):
                self.loader_with_workers = True
                init = loader_argument(node, "worker_init_fn")
                if init is not None:
                    self.worker_init_fns.append((init.value, self._dataset_class_of(node)))
        elif ctx.qualified_name(node.func) in GET_WORKER_INFO:
            function = ctx.enclosing(cst.FunctionDef, cst.Lambda)
            if function is not None:
                owner = ctx.enclosing(cst.ClassDef)
                self.worker_functions.append((function, owner.name.value if owner is not None else None))

    def _dataset_class_of(self, loader: cst.Call) -> Optional[str]:
        dataset = loader_argument(loader, "dataset")
        built = construction(dataset.value, self.ctx) if dataset is not None else None
        return built.func.value if built is not None and isinstance(built.func, cst.Name) else None

    def _function_of(self, expr: cst.BaseExpression) -> Optional[cst.CSTNode]:
        """The lambda, or the module-level `def`, that a `worker_init_fn` argument names."""
        if isinstance(expr, cst.Lambda):
            return expr
        if isinstance(expr, cst.Name):
            for statement in self.ctx.module.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value == expr.value:
                    return statement
        return None

    def finish(self) -> None:
        if not self.loader_with_workers:
            return
        init_functions = [(self._function_of(expr), owner) for expr, owner in self.worker_init_fns]
        # A `worker_init_fn` serves the datasets of its loaders, even when it is the one calling get_worker_info().
        serves = {id(function): owner for function, owner in init_functions if function is not None}
        reseeded_in_workers: Dict[Optional[str], Set[str]] = {}
        for function, owner in self.worker_functions + init_functions:
            if function is not None:
                owner = owner or serves.get(id(function))
                reseeded_in_workers.setdefault(owner, set()).update(_attribute_names(function))
        for class_name, class_node in self.dataset_classes.items():
            methods = {item.name.value: item for item in class_node.body.body if isinstance(item, cst.FunctionDef)}
            if "__init__" not in methods or "__getitem__" not in methods:
                continue
            used: Set[str] = set()
            reseeded: Set[str] = set()
            for function in self._item_methods(class_name, methods):
                uses = _SelfAttributes(_self_name(function))
                walk_visitor(function, uses)
                used |= uses.read
                reseeded |= uses.reseeded
            reseeded |= reseeded_in_workers.get(None, set()) | reseeded_in_workers.get(class_name, set())
            for attribute, creation in _rngs_stored(methods["__init__"], self.ctx):
                if attribute in used and attribute not in reseeded:
                    torch_generator = self.ctx.qualified_name(creation.func) == "torch.Generator"
                    extra = "; a `torch.Generator` attribute also crashes spawn and forkserver workers" if torch_generator else ""
                    self.report(creation, self.message.format(extra=extra))

    def _item_methods(self, class_name: str, methods: Dict[str, cst.FunctionDef]) -> Iterator[cst.FunctionDef]:
        """`__getitem__` and the methods of its class it calls through `self.`, however deep."""
        pending = ["__getitem__"]
        seen = set()
        while pending:
            name = pending.pop()
            if name in seen or name not in methods:
                continue
            seen.add(name)
            yield methods[name]
            function = self.ctx.callgraph.functions.get(f"{class_name}.{name}")
            for site in function.calls if function is not None else ():
                owner, _, method = site.callee.partition(".")
                if owner == class_name:
                    pending.append(method)


def _self_name(function: cst.CSTNode) -> Optional[str]:
    if isinstance(function, cst.FunctionDef) and function.params.params:
        return function.params.params[0].name.value
    return None


def _rngs_stored(init: cst.FunctionDef, ctx) -> List[Tuple[str, cst.Call]]:
    """(attribute, RNG constructor call) for each `self.attr = <RNG>` in `__init__`."""
    stores = _SelfStores(_self_name(init))
    walk_visitor(init.body, stores)
    found = []
    for attribute, value in stores.values:
        creation = value
        # torch.Generator().manual_seed(0) returns the generator it seeds
        if isinstance(creation, cst.Call) and semantics.method_name(creation) in RESEEDING_METHODS:
            creation = semantics.receiver(creation)
        if isinstance(creation, cst.Call) and ctx.qualified_name(creation.func, _stack_in(init, ctx)) in RNG_CONSTRUCTORS:
            found.append((attribute, creation))
    return found


def _stack_in(function: cst.FunctionDef, ctx) -> Tuple[cst.CSTNode, ...]:
    # Names in the method resolve through the module's imports (and the method's own bindings).
    return (ctx.module, function, function.body)


def _attribute_names(function: cst.CSTNode) -> Set[str]:
    names = _AttributeNames()
    walk_visitor(function, names)
    return names.names


class _AttributeNames(cst.CSTVisitor):
    def __init__(self):
        self.names: Set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.names.add(node.attr.value)


class _SelfStores(cst.CSTVisitor):
    """`self.attr = value` statements of one method body, not of nested functions."""

    def __init__(self, self_name: Optional[str]):
        self.self_name = self_name
        self.values: List[Tuple[str, cst.BaseExpression]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            attribute = _self_attribute(target.target, self.self_name)
            if attribute is not None:
                self.values.append((attribute, node.value))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


class _SelfAttributes(cst.CSTVisitor):
    """Which `self.` attributes a method reads, and which it re-seeds (assigns, or calls `seed`/`manual_seed` on)."""

    def __init__(self, self_name: Optional[str]):
        self.self_name = self_name
        self.read: Set[str] = set()
        self.reseeded: Set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        attribute = _self_attribute(node, self.self_name)
        if attribute is not None:
            self.read.add(attribute)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            attribute = _self_attribute(target.target, self.self_name)
            if attribute is not None:
                self.reseeded.add(attribute)

    def visit_Call(self, node: cst.Call) -> None:
        if semantics.method_name(node) in RESEEDING_METHODS:
            attribute = _self_attribute(semantics.receiver(node), self.self_name)
            if attribute is not None:
                self.reseeded.add(attribute)


def _self_attribute(node: Optional[cst.CSTNode], self_name: Optional[str]) -> Optional[str]:
    if (
        self_name is not None
        and isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == self_name
    ):
        return node.attr.value
    return None
