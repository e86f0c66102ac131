from typing import Dict, Optional, Sequence, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.modules import PARAMETER, ModuleClass, ModuleClasses, decorator_name, is_self_attribute
from torchlint.engine.walk import walk, walk_visitor
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.model._shared import IN_MODULE_CLASS
from torchlint.rules.triggers import functions

# A call shape: how many positional arguments, and which keywords.
_Call = Tuple[int, Tuple[str, ...]]
# The nn.Module methods whose overrides torch itself, or code using the model as a Module, calls: the calls made,
# and who makes them.
_MODULE_API: Dict[str, Tuple[Tuple[_Call, ...], str]] = {
    "train": (((1, ()),), "`model.eval()` calls `self.train(False)` (and a parent's `train(mode)` calls `child.train(mode)`)"),
    "eval": (((0, ()),), "code that evaluates the model calls `model.eval()`"),
    "parameters": (((0, ()),), "optimizers are built from `model.parameters()`"),
    "named_parameters": (((0, ()), (0, ("recurse",))), "`parameters()` calls `self.named_parameters(recurse=...)`"),
    "state_dict": (((0, ()),), "checkpoints are saved from `model.state_dict()`"),
    "to": (((1, ()),), "`model.to(device)` moves a Module"),
    "cuda": (((0, ()),), "`model.cuda()` moves a Module"),
    "zero_grad": (((0, ()),), "training code calls `model.zero_grad()`"),
    "modules": (((0, ()),), "code that walks the model calls `model.modules()`"),
    "children": (((0, ()),), "`train()` and `eval()` call `self.children()`"),
    "apply": (((1, ()),), "a parent's `apply(fn)` calls `child.apply(fn)`"),
}
_INIT = "__init__"
_FORWARD = "forward"
_NOT_TYPOS = frozenset({"forwards"})


class ModuleApiShadowed(Rule):
    """
    ## What it does
    Flags, on an `nn.Module` subclass (of torch, Lightning, or a Module class of the file
    or of a project file):

    - a method named `train`, `eval`, `parameters`, `named_parameters`, `state_dict`,
      `to`, `cuda`, `zero_grad`, `modules`, `children` or `apply` whose signature cannot
      take the calls torch and Module code make: `def train(self, loader, epochs)`
      (`model.eval()` calls `self.train(False)`), `def named_parameters(self)`
      (`parameters()` passes `recurse=`), `def apply(self)` (a parent passes `fn`). For
      `train`, the argument that receives the mode must look like one: named `mode`,
      defaulting to `True`/`False`, or annotated `bool`;
    - a misspelt `__init__` (`__int__` that takes arguments or sets attributes, `_init_`,
      `___init___`, `__init`, `__inti__`) in a class without a real one, and a misspelt
      `forward` (`foward`, `forwad`, `farward`: one letter off) in a class that neither
      defines nor inherits one;
    - an `__init__` that assigns layers or parameters to `self` without calling
      `super().__init__()` (or `nn.Module.__init__(self)`, or a base's `__init__`).

    The finding points at the method's name.

    Not flagged: overrides that keep the signature (`def train(self, mode=True):
    super().train(mode); ...`, `def state_dict(self, *args, **kwargs)`), also a `def
    train(self, mode: bool)` without a default (torchmetrics' LPIPS wrapper: torch always
    passes the mode); a `train(self)` next to an `eval(self)` of the class's own
    (accelerate's `MegatronEngine`: its `eval()` does not call `train(False)`); classes that are
    not Modules; abstract helpers (decorated `@abstractmethod`, or whose body only
    raises `NotImplementedError`) and properties; `_init` or `init` helpers (a private
    method, not a misspelt dunder); `_forward` helpers, and any misspelt forward in a
    class that inherits a `forward` from a torch layer or a project class.

    ## Why is this bad?
    `nn.Module` calls these methods itself. On torch 2.13 a `def train(self,
    loader=None, epochs=1)` on a model is called by `m.eval()` with `loader=False`: the
    user's training loop runs (or fails) and `m.training`, with the dropout layers'
    `training`, stays True. A misspelt `forward` leaves the class with torch's, which
    raises `NotImplementedError: Module [Typo] is missing the required "forward"
    function` at the first call; a misspelt `__init__` never runs, so the model builds
    with no parameters and fails later with `AttributeError` at the first forward.
    Without `super().__init__()`, assigning the first layer raises `AttributeError:
    cannot assign module before Module.__init__() call`; with a misspelt call instead
    (`super()._init_()`), that call raises first: `AttributeError: 'super' object has no
    attribute '_init_'` (both observed on torch 2.13), and the message quotes it.

    ## Fix safety
    Unsafe, for misspelt names only: renames the method to `__init__` or `forward`,
    which makes code run that did not run before. Signatures and missing `super()`
    calls are left to you: rename the training method (`fit`), or give the override
    the Module signature. An override that calls `super().train()` (or the method it
    shadows) extends the Module's and must keep its name: the message then asks only
    for the signature (`def train(self, mode=True): super().train(mode); ...`).
    """

    code = "TL703"
    name = "module-api-shadowed"
    # Reported at a method a class of the file defines: its name is an API name or a near miss of one.
    triggers = IN_MODULE_CLASS & functions(lambda name: name in _MODULE_API or name == _INIT or typo_of(name) is not None)
    fix_safety = "unsafe"
    message = (
        "this method shadows `nn.Module`'s with an incompatible signature; rename it or keep the Module signature"
    )
    example = """
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.Linear(8, 1))

        def forward(self, x):
            return self.net(x)

        def train(self, loader, epochs=1):  # expect: TL703:9
            for _ in range(epochs):
                for x, y in loader:
                    ...
    """
    use_instead = """
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.Linear(8, 1))

        def forward(self, x):
            return self.net(x)

        def fit(self, loader, epochs=1):
            for _ in range(epochs):
                for x, y in loader:
                    ...
    """

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        module = ModuleClasses.of(self.ctx).module_class(node, self.ctx.stack[:-1])
        if module is None:
            return
        methods = {method.name.value: method for method in module.methods()}
        for name, method in methods.items():
            if _is_abstract(method):
                continue
            if name in _MODULE_API:
                self._check_signature(module, method)
            elif name == _INIT:
                self._check_super_call(module, method)
            else:
                self._check_typo(module, method, methods)

    def _check_signature(self, module: ModuleClass, method: cst.FunctionDef) -> None:
        name = method.name.value
        calls, callers = _MODULE_API[name]
        static = any(decorator_name(decorator) == "staticmethod" for decorator in method.decorators)
        for positional, keywords in calls:
            if name == "train" and _has_own_eval(module):
                continue  # its own `eval()` does not go through `train(False)`
            problem = _binding_problem(method, positional, keywords, static)
            if problem is None and name == "train" and positional == 1:
                problem = _mode_problem(method, static)
            if problem is not None:
                shown = f"{module.node.name.value}.{name}"
                advice = (
                    f"it extends `nn.Module.{name}` (it calls `super().{name}()`), so keep the Module signature and pass "
                    "its arguments on" if _extends(method, name) else
                    "rename it (`fit`, `train_model`, ...) or keep the Module signature"
                )
                self.report(method.name, (
                    f"`{shown}` shadows `nn.Module.{name}` with an incompatible signature: {callers}, and {problem}; "
                    f"{advice}"
                ))
                return

    def _check_super_call(self, module: ModuleClass, method: cst.FunctionDef) -> None:
        scan = _InitScan(method)
        walk_visitor(method.body, scan)
        if scan.calls_an_init:
            return
        stack = module.stack_of(method)
        classes = ModuleClasses.of(self.ctx)
        for value in scan.assigned:
            if type(value) is cst.Call and (
                self.ctx.qualified_name_in(value.func, PARAMETER, stack) or classes.builds_module(value, stack)
            ):
                if scan.misspelt_init is not None:
                    message = (
                        f"`{module.node.name.value}.__init__` calls `super().{scan.misspelt_init}()`, which does not "
                        f"exist: construction raises `AttributeError: 'super' object has no attribute "
                        f"'{scan.misspelt_init}'`; call `super().__init__()`"
                    )
                else:
                    message = (
                        f"`{module.node.name.value}.__init__` assigns layers without calling `super().__init__()`: "
                        "construction raises `AttributeError: cannot assign module before Module.__init__() call`; "
                        "call `super().__init__()` first"
                    )
                self.report(method.name, message)
                return

    def _check_typo(self, module: ModuleClass, method: cst.FunctionDef, methods: Dict[str, cst.FunctionDef]) -> None:
        name = method.name.value
        meant = typo_of(name)
        if meant is None or meant in methods:
            return
        if meant == _INIT and name == "__int__" and not _looks_like_an_initialiser(method):
            return  # the int() conversion protocol
        if meant == _FORWARD and module.inherits(_FORWARD) is not False:
            return
        shown = module.node.name.value
        if meant == _INIT:
            message = (
                f"`{name}` is not `__init__`: this constructor never runs, so `{shown}()` builds with none of its layers "
                "and the first forward raises `AttributeError`; name it `__init__`"
            )
        else:
            message = (
                f"`{name}` is not `forward`: the first call of the model raises `NotImplementedError: Module [{shown}] is "
                "missing the required \"forward\" function`; name it `forward`"
            )
        self.report(method.name, message, Fix.unsafe(f"Rename it to `{meant}`", self.ctx.replace(method.name, meant)))


def _extends(method: cst.FunctionDef, name: str) -> bool:
    """`method` calls `super().<name>(...)`: an override that adds to the Module's method, which renaming would drop
    from `model.train()` (DINOv2's `train()` that also puts its teacher in eval mode)."""
    found = []

    def on_visit(node: cst.CSTNode) -> bool:
        if (
            type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == name
            and type(node.func.value) is cst.Call and type(node.func.value.func) is cst.Name
            and node.func.value.func.value == "super"
        ):
            found.append(node)
        return not found

    walk(method.body, on_visit, lambda node: None)
    return bool(found)


class _InitScan(cst.CSTVisitor):
    """What an `__init__` assigns to `self`, and whether it calls an `__init__` (`super().__init__()`,
    `nn.Module.__init__(self)`, `Base.__init__(self, ...)`)."""

    def __init__(self, method: cst.FunctionDef):
        self.method = method
        self.assigned = []
        self.calls_an_init = False
        # `_init_` of `super()._init_()`: a misspelt call, which fails before anything is assigned.
        self.misspelt_init: Optional[str] = None

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(is_self_attribute(target.target, self.method) for target in node.targets):
            self.assigned.append(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is not cst.Attribute:
            return
        name = node.func.attr.value
        if name == _INIT:
            self.calls_an_init = True
        elif typo_of(name) == _INIT and type(node.func.value) is cst.Call and syntax.terminal_name(node.func.value.func) == "super":
            self.misspelt_init = name


def _binding_problem(method: cst.FunctionDef, positional: int, keywords: Sequence[str], static: bool) -> Optional[str]:
    """Why a call with `positional` arguments and `keywords` cannot bind to the method, or None when it can."""
    params = method.params
    ordered = list(params.posonly_params) + list(params.params)
    if not static:
        ordered = ordered[1:]
    has_star = isinstance(params.star_arg, cst.Param)
    shown = "a call with no argument" if positional == 0 else f"a call with {positional} argument"
    if keywords:
        shown += " and " + ", ".join(f"`{keyword}=`" for keyword in keywords)
    if positional > len(ordered) and not has_star:
        return f"{shown} raises `TypeError` here (it takes {len(ordered)})"
    for param in ordered[positional:] + list(params.kwonly_params):
        if param.default is None and param.name.value not in keywords:
            return f"{shown} raises `TypeError` here (`{param.name.value}` has no default)"
    accepted = {param.name.value for param in ordered[positional:] + list(params.kwonly_params)}
    if params.star_kwarg is None and any(keyword not in accepted for keyword in keywords):
        return f"{shown} raises `TypeError` here (no parameter `{next(k for k in keywords if k not in accepted)}`)"
    return None


def _has_own_eval(module: ModuleClass) -> bool:
    """The class defines an `eval()` callable without arguments (accelerate's `MegatronEngine`)."""
    own = module.method("eval")
    return own is not None and _binding_problem(own, 0, (), static=False) is None


def _mode_problem(method: cst.FunctionDef, static: bool) -> Optional[str]:
    """For `train`: the parameter that receives the mode (`train(False)`) does not look like a mode."""
    ordered = list(method.params.posonly_params) + list(method.params.params)
    ordered = ordered if static else ordered[1:]
    if not ordered:
        return None  # only `*args`: whatever it does with them, the mode reaches it
    first = ordered[0]
    default = syntax.literal(first.default) if first.default is not None else syntax.MISSING
    annotated_bool = first.annotation is not None and type(first.annotation.annotation) is cst.Name and first.annotation.annotation.value == "bool"
    if first.name.value == "mode" or default is True or default is False or annotated_bool:
        return None
    return (
        f"this method then runs with `{first.name.value}=False` while `training` stays True on the model and its "
        "dropout and batch-norm layers"
    )


def _is_abstract(method: cst.FunctionDef) -> bool:
    if any(decorator_name(decorator) in ("abstractmethod", "property") for decorator in method.decorators):
        return True
    body = method.body.body if type(method.body) is cst.IndentedBlock else ()
    statements = [statement for statement in body if not _is_docstring(statement)]
    if len(statements) != 1 or type(statements[0]) is not cst.SimpleStatementLine:
        return False
    small = statements[0].body[0]
    if type(small) is cst.Raise and small.exc is not None:
        raised = small.exc.func if type(small.exc) is cst.Call else small.exc
        return syntax.terminal_name(raised) == "NotImplementedError"
    return type(small) is cst.Pass or (type(small) is cst.Expr and type(small.value) is cst.Ellipsis)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 and type(statement.body[0]) is cst.Expr
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _looks_like_an_initialiser(method: cst.FunctionDef) -> bool:
    """A `__int__` that takes arguments, or sets attributes or calls an `__init__`: a constructor, not int()."""
    if len(list(method.params.posonly_params) + list(method.params.params)) > 1 or method.params.kwonly_params:
        return True
    scan = _InitScan(method)
    walk_visitor(method.body, scan)
    return scan.calls_an_init or bool(scan.assigned)


def typo_of(name: str) -> Optional[str]:
    """`__init__` or `forward` when `name` is a near miss of one (not the name itself, nor a private helper such as
    `_init` or `_forward`)."""
    stripped = name.strip("_")
    leading, trailing = len(name) - len(name.lstrip("_")), len(name) - len(name.rstrip("_"))
    if name != _INIT and (leading >= 2 or (leading and trailing)):
        if stripped == "init" or (leading >= 2 and trailing >= 2 and _one_edit_apart(stripped, "init")):
            return _INIT
    if stripped != _FORWARD and name not in _NOT_TYPOS and _one_edit_apart(stripped.lower(), _FORWARD):
        return _FORWARD
    return None


def _one_edit_apart(word: str, target: str) -> bool:
    """One insertion, deletion, substitution or swap of neighbours turns `word` into `target` (and they differ)."""
    if word == target or abs(len(word) - len(target)) > 1:
        return False
    if len(word) == len(target):
        differing = [index for index, (one, other) in enumerate(zip(word, target)) if one != other]
        if len(differing) == 1:
            return True
        first, second = (differing + [None, None])[:2]
        return (
            len(differing) == 2 and second == first + 1
            and word[first] == target[second] and word[second] == target[first]
        )
    shorter, longer = (word, target) if len(word) < len(target) else (target, word)
    return any(longer[:index] + longer[index + 1:] == shorter for index in range(len(longer)))
