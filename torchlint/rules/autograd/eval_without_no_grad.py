from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import project_call_facts, uses_autograd_grad
from torchlint.analysis.file_kind import is_test_function
from torchlint.analysis.grad_mode import (
    grad_mode_of, names_an_evaluation, parameters_frozen_at, under_dynamic_grad_mode, under_grad_mode_context,
)
from torchlint.analysis.models import Models
from torchlint.analysis.syntax import called_module
from torchlint.analysis.values import Values, method_of
from torchlint.engine.callgraph import MODULE
from torchlint.engine.walk import child_nodes
from torchlint.analysis.loops import LOOPS, Loop, LoopIndex, enclosing, is_accumulating_backward, loop_nodes
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes, functions, words

# Lightning runs these hooks under no_grad/inference_mode itself.
_LIGHTNING_HOOKS = frozenset({"validation_step", "test_step", "predict_step"})
# Library functions that take gradients with `torch.autograd.grad` themselves: torchmeta's MAML update, which an
# evaluation-time adaptation loop calls on its loss (no_grad would make it raise).
_GRAD_TAKING_FUNCTIONS = frozenset({
    "torchmeta.utils.gradient_update_parameters", "torchmeta.utils.gradient_based.gradient_update_parameters",
})
# How many calls deep a loop's calls are followed for `torch.autograd.grad`, and how many callers up for a grad mode.
_DEPTH = 3
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})


@dataclass
class _Forward:
    node: cst.Call
    # What the call applies: `model` of `model(x)` and of `model.forward(x)` (`called_module`).
    model: cst.BaseExpression
    function: str
    function_name: str
    # A method of a model class: part of the model's own forward unless it calls `eval()`.
    in_model_method: bool
    seq: int
    loops: List[Loop]
    stack: Tuple[cst.CSTNode, ...]


@dataclass
class _Eval:
    seq: int
    loops: Set[int]
    # The model put in eval mode (None: not known) and the nodes around the call: what built it is asked when first
    # needed (`EvalWithoutNoGrad._models`).
    receiver: Optional[cst.BaseExpression]
    stack: Tuple[cst.CSTNode, ...]
    # Under an `if` of its function: a helper that does it (`set_mode(model, train)`) may not, for a given call.
    conditional: bool = False


@dataclass
class _Train:
    """A `.train()` call (`train(True)`): after an `eval()`, the model runs in train mode again."""
    seq: int
    receiver: cst.BaseExpression
    stack: Tuple[cst.CSTNode, ...]
    conditional: bool


class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Flags a model forward call in a loop (a `for`, a `while`, or a comprehension's element:
    `[model(x) for x in batches]`) that runs after `model.eval()` (in the same
    function, in a function of the file it calls before the loop, `def set_eval(m): m.eval()`
    outside any `if`, or in a caller before its call of the function, up to three calls up:
    `model.eval()` then `main()`, which calls `train(model)` or `Trainer(model).fit()`),
    or in a function named like `evaluate` / `validate` / `test` / `predict` /
    `infer*`, when the loop never calls `.backward()` and is not under `torch.no_grad()` /
    `torch.inference_mode()`: no region, no decorator, no `torch.set_grad_enabled(False)`
    statement before it in the function (called on its own, it switches the mode for the rest
    of the function; the last such statement decides), no caller one level up in the
    module calls the function under one, and not every call of it in the module runs under one
    within three callers (`visualize`, decorated `@torch.no_grad()`, calls `load_manipulators`,
    which calls `encode_dataset`, the only caller of the function with the loop).

    A forward is a call of a model (`model(x)`, or `model.forward(x)`, which runs the same
    code without the hooks): a value built from an `nn.Module` subclass of the
    module, `nn.Sequential`, a model builder, a model picked by name from a package of
    models (`models.__dict__[args.arch]()`) or an `nn.DataParallel` wrapper, or a name
    on which `.eval()`, `.train()` or `.parameters()` is called, or another name for the
    same module (`parallel_model = model.cuda()`; a model read whole with `torch.load` is one
    by these uses). A model reaches a function through what its calls pass, also from a
    comprehension's loop variable (`[evaluate(env, net) for net in nets]`) or as a
    `copy.deepcopy` of one. A `.train()` of the model after its `eval()` (in the function,
    or in a function of the file it calls before the loop) and before the loop cancels it: the
    loop runs in train mode on purpose (Monte-Carlo dropout), and is not reported. Not flagged:
    a model whose parameters the function has all frozen before the loop, outside any branch
    (`model.requires_grad_(False)`, also in a chain of the module's methods such as
    `model.eval().requires_grad_(False).to(device)` or where it is built, `G = Net().requires_grad_(False)`,
    or `for p in model.parameters(): p.requires_grad = False`, crnn.pytorch; a `copy.deepcopy` of a
    frozen model is frozen too, StyleGAN2-ADA), when nothing after the freeze or in the loop makes anything require grad
    again (its forward records no graph: observed on torch 2.13, the output has
    `requires_grad` False; a freeze of part of it, `model.features.parameters()`, or of another
    model does not count); loops that call `.backward()` anywhere in
    their body (frozen feature extractors in training, attacks that need input
    gradients), loops whose body ends in an unconditional `break` (one batch, for a
    plot or a shape check), a loop over another model than the one put in eval mode
    (each a variable the file builds with a constructor: in a notebook, `encdec.eval()`
    cells before a demo of an untrained `decoder`), functions that use
    `torch.autograd.grad` and loops that call a function that does (their graph is needed: a
    Hessian-vector product, a MAML adaptation step at evaluation): a function of the file, nested
    ones included, within three calls, one of another project file, or torchmeta's
    `gradient_update_parameters`; code under
    `set_grad_enabled(<not a literal>)` (a region, a statement before the loop, or one in a
    branch or loop before it, whose effect is known only at runtime) or under another library's context manager named
    for evaluation or gradients (monai's `with eval_mode(model):` enters `no_grad`
    itself), pytest's `test_*` functions (in a test file or one that imports pytest: a
    notebook's `test_env(...)` is an evaluation) and Lightning's `validation_step` /
    `test_step` / `predict_step`, and a model whose class's `forward` computes what the call returns under
    `no_grad`/`inference_mode` (a decorator; or a `with` block holding the work, whole or in the branch the call
    takes by a string it passes: `model(data, mode="inference")` into `if mode == "inference": with torch.no_grad():`,
    SPADE), returning only names bound in the block. In a model's own methods (`_inference_forward` of an `nn.Module`) the
    function's name does not make an evaluation: its caller decides the grad mode; an
    `eval()` call in the method still does.

    ## Why is this bad?
    `model.eval()` switches dropout and batch norm to inference behaviour; it does not
    disable autograd. Every forward still records its graph and keeps the activations
    it needs for a backward that never comes, for as long as anything holds the outputs.
    Observed on torch 2.13: an evaluation loop that accumulates its loss tensor grew by
    255 MB per 1,000 small batches, against 5 MB under `no_grad`; a large batch holds
    32 MiB of activations with the output alive, against 0.2 MiB under `no_grad`.

    ## Fix safety
    No fix: wrap the loop in `with torch.no_grad():` (or `torch.inference_mode()`), or
    decorate the function with `@torch.no_grad()`.
    """

    code = "TL106"
    name = "eval-without-no-grad"
    preview = (
        "In preview after held-out rounds 50-52 (docs/precision.md): 22 of 25 findings true at first sight. The false "
        "ones were StyleGAN2-ADA's models frozen before they are evaluated: `sampler.eval().requires_grad_(False)` "
        "in one chain, and a `copy.deepcopy` of a model built frozen whose freeze a loop undoes and redoes around "
        "its DistributedDataParallel wrapping (round 52; trap fixtures now, each). The rule leaves preview again "
        "when two rounds in a row read it at least 9 in 10 true."
    )
    uses_callgraph = True
    # Only a model is reported (`Models.is_model`): built from a class defined here, `nn.Sequential`, a torchvision,
    # timm, hub or `from_pretrained` builder, or given `.eval()`/`.train()`/`.parameters()`; only in a loop; and only
    # after `.eval()` / `.train(False)` in the same function, or in a function named for an evaluation.
    triggers = (
        words("class", "Sequential", "torchvision", "timm", "hub", "from_pretrained", "eval", "train", "parameters")
        & words("for", "while")
        & (attributes("eval") | (attributes("train") & words("False")) | functions(names_an_evaluation))
    )
    message = (
        "model forward in an evaluation loop with gradients enabled: `eval()` does not disable autograd, so every "
        "batch records a graph and keeps its activations while outputs are held (observed: 5 small batches kept "
        "368,640 bytes, 0 under no_grad); wrap the loop in `with torch.no_grad():` or `torch.inference_mode()`"
    )
    example = """
    import torch


    def evaluate(model, loader):
        model.eval()
        correct = 0
        for x, y in loader:
            logits = model(x)  # expect: TL106:18
            correct += (logits.argmax(1) == y).sum().item()
        return correct
    """
    use_instead = """
    import torch


    @torch.no_grad()
    def evaluate(model, loader):
        model.eval()
        correct = 0
        for x, y in loader:
            logits = model(x)
            correct += (logits.argmax(1) == y).sum().item()
        return correct
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops = ctx.shared(LoopIndex)
        self.models = Models(ctx)
        self.forwards: List[_Forward] = []
        # function key -> its eval() calls so far
        self.evals: Dict[str, List[_Eval]] = {}
        # function key -> its `.train()` calls
        self.trains: Dict[str, List[_Train]] = {}
        self.lightning_hooks: Set[int] = set()
        # id of an `eval()`/`train()` call's receiver -> `_models` of it
        self.built_models: Dict[int, Optional[FrozenSet[int]]] = {}
        # id of a scope node -> `_function_of` its calls
        self.functions: Dict[int, Tuple[str, Optional[cst.FunctionDef]]] = {}
        # id of each call -> its order in the walk, to tell an `eval()` before a call of a function from one after.
        self.call_seqs: Dict[int, int] = {}
        # function key -> `_calls_into` it, asked in `finish` (when the call graph is complete) once per function
        self.calls_into: Dict[str, List[Tuple[cst.Call, Sequence[cst.CSTNode]]]] = {}
        # ids of the loops whose body calls a library function of `_GRAD_TAKING_FUNCTIONS`
        self.grad_taking_loops: Set[int] = set()
        # function key -> its calls of same-module functions: the order of each, its callee and the loops around it
        self.calls_made: Dict[str, List[Tuple[int, str, Set[int]]]] = {}

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.models.observe_class(node)
        if any((self.ctx.qualified_name(base.value) or "").endswith("LightningModule") for base in node.bases):
            for statement in node.body.body:
                if isinstance(statement, cst.FunctionDef) and statement.name.value in _LIGHTNING_HOOKS:
                    self.lightning_hooks.add(id(statement))

    def visit_Assign(self, node: cst.Assign) -> None:
        self.loops.observe(node)

    def visit_Call(self, node: cst.Call) -> None:
        event = self.loops.observe(node)
        self.call_seqs[id(node)] = event.seq
        self.models.observe_call(node)
        if "sets-eval" in event.facts:
            function = self._function_of(node)[0]
            loops = {id(loop) for loop in loop_nodes(self.ctx.stack)}
            receiver = semantics.receiver(node)
            self.evals.setdefault(function, []).append(
                _Eval(event.seq, loops, receiver, tuple(self.ctx.stack), bool(event.arms)),
            )
        elif "sets-train" in event.facts and semantics.receiver(node) is not None:
            function = self._function_of(node)[0]
            receiver = semantics.receiver(node)
            self.trains.setdefault(function, []).append(
                _Train(event.seq, receiver, tuple(self.ctx.stack), bool(event.arms)),
            )
        elif event.callee is not None:
            function = self._function_of(node)[0]
            loops = {id(loop) for loop in loop_nodes(self.ctx.stack)}
            self.calls_made.setdefault(function, []).append((event.seq, event.callee, loops))
        func_type = type(node.func)
        if (func_type is not cst.Name and func_type is not cst.Attribute) or semantics.method_name(node) in ("eval", "train"):
            return
        function, definition = self._function_of(node)
        name = definition.name.value if definition is not None else ""
        # `finish` reports a forward after an `.eval()` of its function, or of a caller before the call (seen in
        # `finish`), or in a function named for evaluation.
        loops = self.loops.enclosing() or _comprehension_loop(self.ctx.stack)
        if not loops:
            return
        if self.ctx.qualified_name_in(node.func, _GRAD_TAKING_FUNCTIONS):
            self.grad_taking_loops.update(id(loop.node) for loop in loops)
            return
        if self._grad_mode_is_set(self.ctx.stack):
            return
        if is_test_function(name, self.ctx.file_kind, self.ctx.imports_module("pytest")) or (
            definition is not None and id(definition) in self.lightning_hooks
        ):
            return
        in_model_method = definition is not None and self._is_model_method(definition)
        self.forwards.append(_Forward(node, called_module(node), function, name, in_model_method, event.seq, loops, tuple(self.ctx.stack)))

    def _function_of(self, call: cst.Call) -> Tuple[str, Optional[cst.FunctionDef]]:
        """The call-graph key and the def of the function whose code holds the visited `call`: the same for every
        call of one scope, and asked at most calls."""
        scope_nodes = self.ctx.scope_nodes
        found = self.functions.get(id(scope_nodes[-1]))
        if found is None:
            found = self.functions[id(scope_nodes[-1])] = (
                self.ctx.callgraph.current(scope_nodes, call).key, innermost_function(self.ctx.stack),
            )
        return found

    def _is_model_method(self, definition: cst.FunctionDef) -> bool:
        """`definition` (the innermost function) is defined directly in a model class."""
        outer = [node for node in self.ctx.scope_nodes if isinstance(node, (cst.FunctionDef, cst.ClassDef))]
        owner = outer[-2] if len(outer) > 1 and outer[-1] is definition else None
        return isinstance(owner, cst.ClassDef) and owner.name.value in self.models.classes

    def _grad_mode_is_set(self, stack: Sequence[cst.CSTNode]) -> bool:
        """Gradients disabled, explicitly enabled, or set from a variable or another library's context manager."""
        return (
            semantics.grad_enabled_at(stack, self.ctx) is not None
            or under_dynamic_grad_mode(stack, self.ctx)
            or under_grad_mode_context(stack, self.ctx)
        )

    def finish(self) -> None:
        for forward in self.forwards:
            comprehension = type(forward.loops[0].node) not in LOOPS
            if not comprehension and _runs_once(forward.loops[0].node):
                continue
            # Whether the forward evaluates is asked before whether it calls a model: most calls in a loop are in no
            # evaluation at all, and telling a model follows the value model, the dearer question. Not so in a
            # comprehension, whose calls are mostly of functions (`[torch.tensor(row) for row in rows]`), told at once.
            if comprehension and not self.models.is_model(forward.model, forward.stack):
                continue
            if self._left_in_train_mode(forward):
                continue
            evaluation = self._eval_before(forward)
            if evaluation is None and (forward.in_model_method or not names_an_evaluation(forward.function_name)) and (
                forward.in_model_method or not self._evaluated_by_callers(forward.function, cache(partial(self._built_by, forward.model, forward.stack)))
            ):
                continue
            if not comprehension and not self.models.is_model(forward.model, forward.stack):
                continue
            if self._returns_without_graph(forward) or parameters_frozen_at(self.ctx, forward.model, forward.stack):
                continue
            if self._backpropagates(forward, evaluation) or self._takes_gradients(forward):
                continue
            # A caller one level up that disables gradients (or sets them, deliberately) around the call, or callers
            # a few levels up under which every call of the function runs.
            if any(
                self._grad_mode_is_set(site.stack) for site in self.ctx.callgraph.call_sites(forward.function)
            ) or self._called_under_grad_mode(forward.function):
                continue
            self.report(forward.node)

    def _takes_gradients(self, forward: _Forward) -> bool:
        """The forward's function uses `torch.autograd.grad`, or one of its loops calls a function that does: of the
        file (nested ones included; `_DEPTH` calls deep), of another project file, or of a library
        (`_GRAD_TAKING_FUNCTIONS`). The loop needs its graph: a Hessian-vector product, a MAML adaptation step."""
        if uses_autograd_grad(forward.function, self.ctx):
            return True
        for loop in forward.loops:
            if id(loop.node) in self.grad_taking_loops or any(
                not is_accumulating_backward(node) for _, nodes in self.loops.sites(loop, "backward", _DEPTH) for node in nodes
            ):
                return True
            for _, calls in self.loops.sites(loop, "calls-project-function", _DEPTH):
                if any(
                    not is_accumulating_backward(node)
                    for call in calls for node in project_call_facts(call, self.ctx, "backward")
                ):
                    return True
        return False

    def _called_under_grad_mode(self, function: str, depth: int = _DEPTH) -> bool:
        """`function` is called in the file, and each of its calls runs under a grad mode (`_grad_mode_is_set`) or
        in a function of which this holds, `depth` callers up: `encode_dataset`, called only by `load_manipulators`,
        called only by `visualize`, decorated `@torch.no_grad()`."""
        if depth == 0:
            return False
        called = False
        for call, stack in self._calls_into(function):
            if self._grad_mode_is_set(stack):
                called = True
                continue
            caller = self.ctx.callgraph.current(stack, call).key
            if caller == function:  # a recursive call runs under whatever mode the outer calls set
                continue
            if caller == MODULE or not self._called_under_grad_mode(caller, depth - 1):
                return False
            called = True
        return called

    def _eval_before(self, forward: _Forward) -> Optional[_Eval]:
        """The last `eval()` of the forward's function before it, on a model that may be the one called: one put
        in eval mode cells earlier in a notebook does not make a demo of another model an evaluation."""
        before = [evaluation for evaluation in self.evals.get(forward.function, ()) if evaluation.seq < forward.seq]
        # A call before the forward of a function of the file that puts a model in eval mode, whatever it is given
        # (`def set_eval(m): m.eval()`, then `set_eval(model)` before the loop): an `eval()` at the call.
        for seq, callee, loops in self.calls_made.get(forward.function, ()):
            if seq < forward.seq and callee != forward.function:
                before += [
                    _Eval(seq, loops, evaluation.receiver, evaluation.stack)
                    for evaluation in self.evals.get(callee, ()) if not evaluation.conditional
                ]
        before.sort(key=lambda evaluation: evaluation.seq)
        if not before:
            return None
        called = self._built_by(forward.model, forward.stack)
        earlier = [
            evaluation for evaluation in before
            if called is None or _may_be(called, self._models(evaluation))
        ]
        return earlier[-1] if earlier else None

    def _left_in_train_mode(self, forward: _Forward) -> bool:
        """The last mode switch of the forward's model before it in its function, made there or in a function of the
        file it calls (a `.train()` outside any `if`), is a `.train()`: the loop runs in train mode on purpose (Monte-Carlo dropout
        after `evaluate_accuracy(net)`, a uvadlc BNN notebook), whatever `eval()` came before, there or in a caller.
        A `.train()` counts only on the forward's own model: the same expression, or one built by the same
        constructor calls."""
        # (None for the forward's own function, or the order of a call there of another function; that function)
        places: List[Tuple[Optional[int], str]] = [(None, forward.function)] + [
            (seq, callee) for seq, callee, _ in self.calls_made.get(forward.function, ())
            if seq < forward.seq and callee != forward.function
        ]
        if not any(self.trains.get(key) for _, key in places):
            return False
        called = self._built_by(forward.model, forward.stack)
        # (order in the function, order within the called function, whether it is a train)
        switches: List[Tuple[Optional[int], int, bool]] = []
        for call_seq, key in places:
            for switch in self.trains.get(key, ()):
                if switch.conditional:
                    continue  # `if args.mc_dropout: model.train()`: the loop may still run in eval mode
                if switch.receiver.deep_equals(forward.model) or (
                    called is not None and self._models(switch) is not None and not called.isdisjoint(self._models(switch))
                ):
                    switches.append(_switch_order(switch, call_seq, forward.seq) + (True,))
            for switch in self.evals.get(key, ()):
                if called is None or _may_be(called, self._models(switch)):
                    switches.append(_switch_order(switch, call_seq, forward.seq) + (False,))
        switches = [switch for switch in switches if switch[0] is not None]
        return bool(switches) and max(switches)[2]

    def _evaluated_by_callers(self, function: str, called: Callable[[], Optional[FrozenSet[int]]], depth: int = 3) -> bool:
        """A call of `function` runs after an `eval()` of a model that may be the one called (`called()`: `_built_by`
        of the forward's model, asked only once an `eval()` is found), in its caller's code (`model.eval()`, then
        `main()`, which calls `evaluate(model)` or `Trainer(model).fit()`), `depth` callers up, none of the calls under
        a grad mode."""
        if depth == 0 or not self.evals:
            return False  # what the callers are searched for is an `eval()`: a file without one needs no search
        for call, stack in self._calls_into(function):
            seq = self.call_seqs.get(id(call))
            if seq is None or self._grad_mode_is_set(stack):
                continue
            caller = self.ctx.callgraph.current(stack, call).key
            if caller == function:
                continue
            if any(
                evaluation.seq < seq and (self._models(evaluation) is None or called() is None or not called().isdisjoint(self._models(evaluation)))
                for evaluation in self.evals.get(caller, ())
            ) or self._evaluated_by_callers(caller, called, depth - 1):
                return True
        return False

    def _calls_into(self, function: str) -> List[Tuple[cst.Call, Sequence[cst.CSTNode]]]:
        """The calls of `function` (a call-graph key) in the file, each with its stack: by name, through `self`, and
        for a method of a class at the top of the module, through its instances (`trainer.fit()`)."""
        found = self.calls_into.get(function)
        if found is not None:
            return found
        found = self.calls_into[function] = [(site.node, site.stack) for site in self.ctx.callgraph.call_sites(function)]
        class_name, _, method = function.rpartition(".")
        if class_name:
            model_class = next(
                (node for node in self.ctx.module.body if type(node) is cst.ClassDef and node.name.value == class_name), None,
            )
            if model_class is not None:
                found += Values.of(self.ctx).method_calls(model_class, method)
        return found

    def _models(self, switch: Union[_Eval, _Train]) -> Optional[FrozenSet[int]]:
        """The constructor calls the model an `eval()` or `train()` switches was built by (`_built_by`), None when not
        known: asked of the value model when first needed, as most such calls are never compared with a forward's
        model. (Kept by the receiver's id: a closure kept with the switch would hold the rule in a cycle with its
        file.)"""
        if switch.receiver is None:
            return None
        key = id(switch.receiver)
        if key not in self.built_models:
            self.built_models[key] = self._built_by(switch.receiver, switch.stack)
        return self.built_models[key]

    def _built_by(self, model: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> Optional[FrozenSet[int]]:
        """The constructor calls a variable's or attribute's model comes from (`Net()` for `model = Net().to(device)`,
        also through parameters and `self.model`), None when one of its origins is anything else."""
        if type(model) not in (cst.Name, cst.Attribute):
            return None
        origins = Values.of(self.ctx).origins(model, stack)
        if not origins or any(type(origin.node) is not cst.Call or origin.applied or origin.opaque for origin in origins):
            return None
        return frozenset(id(origin.node) for origin in origins)

    def _returns_without_graph(self, forward: _Forward) -> bool:
        """Every class the called model is built from has a `forward` that computes what this call returns under
        `no_grad`/`inference_mode`: decorated with one, or the branch this call takes (`mode="inference"` against
        `if mode == "inference":`, SPADE's `Pix2PixModel`) or the whole body holds the work in such a block and returns
        only names bound inside it. The output then holds no graph, whatever the caller's grad mode."""
        origins = Values.of(self.ctx).origins(forward.model, forward.stack)
        if not origins or any(type(origin.node) is not cst.Call or origin.applied or origin.opaque for origin in origins):
            return False
        for origin in origins:
            context, stack = origin.place.context, origin.place.stack
            classes = [
                (callee.node, callee.place.context, callee.place.scopes)
                for callee in Values.of(context).origins(origin.node.func, stack) if type(callee.node) is cst.ClassDef
            ]
            if not classes:
                return False
            for class_node, class_context, class_stack in classes:
                method = method_of(class_node, "forward")
                if method is None or not _forward_returns_without_graph(
                    method, forward.node, class_context, tuple(class_stack) + (class_node, method),
                ):
                    return False
        return True

    def _backpropagates(self, forward: _Forward, evaluation: Optional[_Eval]) -> bool:
        """The forward's loop runs backward; or an outer loop does and the model is put in eval mode outside it
        (a frozen, eval-mode part of a training loop)."""
        for index, loop in enumerate(forward.loops):
            backward = any(is_accumulating_backward(node) for _, nodes in self.loops.sites(loop, "backward") for node in nodes)
            if backward and (index == 0 or evaluation is None or id(loop.node) not in evaluation.loops):
                return True
        return False


def _may_be(called: FrozenSet[int], models: Optional[FrozenSet[int]]) -> bool:
    """A model built by the constructor calls `called` may be one of `models` (None: not known, so it may)."""
    return models is None or not called.isdisjoint(models)


def _switch_order(switch, call_seq: Optional[int], forward_seq: int) -> Tuple[Optional[int], int]:
    """When a mode switch (`_Eval`, `_Train`) runs in the forward's function: at its own order if it is there, at
    the order of the call if it is in a function called there (outside any `if` of it, else never: None)."""
    if call_seq is None:
        return (switch.seq if switch.seq < forward_seq else None, 0)
    return (None if switch.conditional else call_seq, switch.seq)


def innermost_function(stack: Sequence[cst.CSTNode]) -> Optional[cst.FunctionDef]:
    for node in reversed(stack[:-1]):
        if type(node) is cst.FunctionDef:
            return node
    return None


def _comprehension_loop(stack: Sequence[cst.CSTNode]) -> List[Loop]:
    """The comprehension (`[model(x) for x in batches]`) that evaluates the innermost point of `stack` once per item,
    within its function, as a loop: in its element or conditions, not in the iterable it starts from; [] if none."""
    for index, node in enclosing(stack):
        if type(node) in _COMPREHENSIONS and (stack[index + 1] is not node.for_in or stack[index + 2] is not node.for_in.iter):
            return [Loop(node, None, tuple(stack[: index + 1]))]
    return []


def _runs_once(loop: cst.CSTNode) -> bool:
    """The body ends in an unconditional `break` (`for x in loader: ...; break`, a shape check on one batch):
    one forward keeps one batch's graph, not one per batch."""
    body = loop.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    last = body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Break)


def _forward_returns_without_graph(method: cst.FunctionDef, call: cst.Call, ctx, stack: Tuple[cst.CSTNode, ...]) -> bool:
    """`method` (a class's `forward`) computes what `call` returns under a grad-disabling decorator or block: see
    `_returns_without_graph`. Statements before a branch on a parameter run with gradients but the output does not
    hold their graph."""
    if any(grad_mode_of(decorator.decorator, ctx, stack) is False for decorator in method.decorators):
        return True
    body = list(method.body.body) if isinstance(method.body, cst.IndentedBlock) else []
    if _block_returns_without_graph(body, ctx, stack):
        return True
    for index, statement in enumerate(body):
        if type(statement) is cst.If:
            taken = _taken_branch(statement, method, call)
            return taken is not None and _block_returns_without_graph(list(taken), ctx, stack)
        # Before the branch: plain statements only (no early `return`, no block that may leave the method).
        if type(statement) is not cst.SimpleStatementLine or any(type(small) is cst.Return for small in statement.body):
            return False
    return False


def _taken_branch(branch: cst.If, method: cst.FunctionDef, call: cst.Call) -> Optional[Sequence[cst.BaseStatement]]:
    """The body an `if mode == "inference": ... elif ...` chain runs for `call`, which passes a string literal for the
    parameter every test compares; None when a test is of another form or the call's value is not known."""
    current: Optional[cst.BaseSuite] = branch
    while type(current) is cst.If:
        test = current.test
        if not (
            type(test) is cst.Comparison and type(test.left) is cst.Name and len(test.comparisons) == 1
            and type(test.comparisons[0].operator) is cst.Equal and type(test.comparisons[0].comparator) is cst.SimpleString
        ):
            return None
        passed = _passed_string(call, method, test.left.value)
        if passed is None:
            return None
        if passed == test.comparisons[0].comparator.evaluated_value:
            return current.body.body if isinstance(current.body, cst.IndentedBlock) else None
        current = current.orelse
    if type(current) is cst.Else and isinstance(current.body, cst.IndentedBlock):
        return current.body.body
    return None


def _passed_string(call: cst.Call, method: cst.FunctionDef, name: str) -> Optional[str]:
    """The string literal `call` passes for the parameter `name` of `method` (after `self`), by keyword or position."""
    argument = semantics.keyword(call, name)
    if argument is None:
        positional = [param.name.value for param in method.params.params][1:]
        if name in positional:
            argument = semantics.positional(call, positional.index(name))
    if argument is None or type(argument.value) is not cst.SimpleString:
        return None
    return argument.value.evaluated_value


def _block_returns_without_graph(body: Sequence[cst.BaseStatement], ctx, stack) -> bool:
    """`body` ends by returning, and each statement is a `with` block that disables gradients or a `return` of
    nothing, of names bound in such a block, or a tuple of them (a `raise` too)."""
    bound: Set[str] = set()
    for statement in body:
        if type(statement) is cst.With:
            if not any(grad_mode_of(item.item, ctx, stack) is False for item in statement.items):
                return False
            bound |= _names_bound(statement)
        elif type(statement) is cst.SimpleStatementLine and len(statement.body) == 1 and type(statement.body[0]) in (cst.Return, cst.Raise):
            small = statement.body[0]
            if type(small) is cst.Return:
                values = small.value.elements if type(small.value) is cst.Tuple else [small.value] if small.value is not None else []
                names = [value.value if isinstance(value, cst.Element) else value for value in values]
                if not bound or any(type(name) is not cst.Name or name.value not in bound for name in names):
                    return False
            return True
        else:
            return False
    return False


def _names_bound(block: cst.CSTNode) -> Set[str]:
    """The names an assignment inside `block` binds (`fake = ...`, `fake, _ = ...`)."""
    bound: Set[str] = set()
    for assign in _assignments(block):
        for target in assign.targets:
            unpacked = target.target.elements if type(target.target) in (cst.Tuple, cst.List) else []
            for name in [target.target] + [element.value for element in unpacked]:
                if type(name) is cst.Name:
                    bound.add(name.value)
    return bound


def _assignments(node: cst.CSTNode) -> List[cst.Assign]:
    found = [node] if type(node) is cst.Assign else []
    # `child_nodes`, not libcst's `children`, which visits the node (rebuilding it) to collect them.
    for child in child_nodes(node):
        found += _assignments(child)
    return found
