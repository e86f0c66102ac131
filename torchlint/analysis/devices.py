"""Devices as code names them: device strings (`"cuda:1"`), `torch.device(...)`, names that say device, the
device `.cuda(index)` moves to, and the branches taken only when the program asks for CUDA.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.values import Values
from torchlint.engine.walk import walk_visitor

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

DEVICE_STRING = re.compile(r"(cpu|cuda|mps|xpu|xla|meta|hpu|npu|ipu|privateuseone)(:\d+)?")
CUDA_STRING = re.compile(r"cuda(:\d+)?")
_DEVICE_PREFIX = re.compile(r"(cpu|cuda|mps|xpu|npu|hpu)(:|$)")


def names_device(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """A device string, `torch.device(...)`, `t.get_device()`, an f-string like `f"cuda:{rank}"`, or a name that says
    device."""
    if isinstance(expr, cst.SimpleString):
        value = semantics.literal(expr)
        return isinstance(value, str) and bool(DEVICE_STRING.fullmatch(value))
    if isinstance(expr, cst.FormattedString):
        first = expr.parts[0] if expr.parts else None
        return isinstance(first, cst.FormattedStringText) and bool(_DEVICE_PREFIX.match(first.value))
    if isinstance(expr, cst.Call):
        # `t.get_device()`: the index of the GPU `t` is on, which `.to(...)` takes as that GPU.
        return ctx.qualified_name(expr.func, stack) == "torch.device" or semantics.method_name(expr) == "get_device"
    if isinstance(expr, cst.IfExp):  # "cuda" if use_cuda else "cpu"
        return names_device(expr.body, ctx, stack) or names_device(expr.orelse, ctx, stack)
    name = semantics.terminal_name(expr)
    if not name:
        return False
    lowered = name.lower()
    if lowered == ctx.config.device_name.lower() or "device" in lowered or lowered == "dev":
        return True
    # A variable named otherwise (`v23 = torch.device(...)`) holds a device when every value it may hold is one.
    origins = Values.of(ctx).origins(expr, stack) if type(expr) is cst.Name else ()
    return bool(origins) and all(
        type(origin.node) in (cst.SimpleString, cst.FormattedString, cst.Call) and not origin.applied
        and names_device(origin.node, origin.place.context, origin.place.stack) for origin in origins
    )


def cuda_device_code(argument: Optional[cst.BaseExpression], ctx: "FileContext") -> str:
    """The device `.cuda(argument)` moves to, as code for `.to(...)`/`device=`: `"cuda"`, `"cuda:1"`, or the expression."""
    value = semantics.literal(argument, default=argument)
    if argument is None or value is None:
        return '"cuda"'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'"cuda:{value}"'
    if isinstance(value, str) and CUDA_STRING.fullmatch(value):
        return f'"{value}"'
    return ctx.code(argument)


def in_a_cuda_branch(stack: Sequence[cst.CSTNode], availability: bool = True, ctx: Optional["FileContext"] = None) -> bool:
    """The innermost point of `stack` is in a branch taken only when the program asks for CUDA (`if args.cuda:`,
    `if device.type == "cuda":`, `x.cuda() if use_gpu else x`): without a GPU it does not run. With
    `availability`, a test of whether CUDA is there counts too (`if torch.cuda.is_available():`); without, only a
    test of what the program chose does (CUDA may be there while the program chose the CPU). With `ctx`, a flag the
    test reads is followed to the condition it was set from (`TEST_MODE = True if opt.test_mode == "GPU" else False`,
    then `if TEST_MODE:`)."""
    for index, (parent, child) in enumerate(zip(stack, stack[1:])):
        if (type(parent) is cst.If or type(parent) is cst.IfExp) and child is not parent.test:
            asks = _asks_for_cuda(parent.test, availability)
            if asks is None and ctx is not None:
                asks = _flag_asks_for_cuda(parent.test, availability, ctx, stack[:index + 1])
            if asks is not None and asks == (child is parent.body):
                return True
    return _after_a_cuda_assert(stack, availability)


def _after_a_cuda_assert(stack: Sequence[cst.CSTNode], availability: bool) -> bool:
    """The innermost point of `stack` comes after an `assert` of its function that holds only when CUDA is wanted
    (`assert grad_output.is_cuda`, also as a side of `and`), earlier in its block or in a block around it: without a
    GPU the assert stops the code first (round 48: an autograd Function's `backward` in yolo2's ROI pooling)."""
    for parent, child in zip(reversed(stack[:-1]), reversed(stack)):
        if type(parent) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
        if (type(parent) is cst.IndentedBlock or type(parent) is cst.Module) and id(child) in _MEMO.after_assert(
            stack[0], parent, availability,
        ):
            return True
    return False


class _AfterAssertMemo:
    """For each block of the file being linted, the ids of its statements after its first CUDA-only assert: asked at
    every candidate of a block, which a scan from the block's start each time would make quadratic in its length (a
    file of 5,000 `.cuda()` lines). Kept for one file at a time, the module at the root of the stacks asked about: at
    most that file's tree is held here, and no id can name a node of another file."""

    def __init__(self):
        self.module: Optional[cst.CSTNode] = None
        self.answers: Dict[Tuple[int, bool], FrozenSet[int]] = {}

    def after_assert(self, module: cst.CSTNode, block: cst.CSTNode, availability: bool) -> FrozenSet[int]:
        if module is not self.module:
            self.module, self.answers = module, {}
        key = (id(block), availability)
        found = self.answers.get(key)
        if found is None:
            found = self.answers[key] = _statements_after_cuda_assert(block, availability)
        return found


_MEMO = _AfterAssertMemo()


def _statements_after_cuda_assert(block: cst.CSTNode, availability: bool) -> FrozenSet[int]:
    after: List[int] = []
    asserted = False
    for statement in block.body:
        if asserted:
            after.append(id(statement))
        elif type(statement) is cst.SimpleStatementLine and any(
            type(small) is cst.Assert and _holds_only_with_cuda(small.test, availability) for small in statement.body
        ):
            asserted = True
    return frozenset(after)


def _holds_only_with_cuda(test: cst.BaseExpression, availability: bool) -> bool:
    """`test` holds only when CUDA is wanted: a test `_asks_for_cuda` says so, or an `and` with such a side."""
    if type(test) is cst.BooleanOperation:
        # Either side of an `or` may be what holds.
        return type(test.operator) is cst.And and (
            _holds_only_with_cuda(test.left, availability) or _holds_only_with_cuda(test.right, availability)
        )
    return _asks_for_cuda(test, availability) is True


def _flag_asks_for_cuda(test: cst.BaseExpression, availability: bool, ctx: "FileContext", stack) -> Optional[bool]:
    """`_asks_for_cuda` of the conditions every value of the flag `test` (or `not flag`) was set from: `flag = C`,
    `flag = True if C else False` (or `False if C else True`, which holds when C does not); None unless they all agree."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _flag_asks_for_cuda(test.expression, availability, ctx, stack)
        return None if inner is None else not inner
    if type(test) is not cst.Name:
        return None
    found = set()
    # The values as assigned: the value model would follow `True if C else False` into its arms.
    for condition in Values.of(ctx).assigned_here(test, stack) or [None]:
        holds = True
        if condition is None or type(condition) is cst.Name:
            return None
        if type(condition) is cst.IfExp:
            chosen = (semantics.literal(condition.body, None), semantics.literal(condition.orelse, None))
            if chosen not in ((True, False), (False, True)):
                return None
            condition, holds = condition.test, chosen == (True, False)
        asks = _asks_for_cuda(condition, availability)
        found.add(None if asks is None else asks == holds)
    return found.pop() if len(found) == 1 else None


def _asks_for_cuda(test: cst.BaseExpression, availability: bool = True) -> Optional[bool]:
    """True for a condition that holds when CUDA is wanted (`args.cuda`, `backend == "cuda"`, `mode == "GPU"`), False
    for one that holds when it is not (`not use_gpu`, `device.type != "cuda"`), None when it says nothing about CUDA.
    Without `availability`, calls (`torch.cuda.is_available()`, `torch.cuda.device_count() > 1`) say nothing."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _asks_for_cuda(test.expression, availability)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        sides = {_asks_for_cuda(test.left, availability), _asks_for_cuda(test.right, availability)} - {None}
        return True if True in sides else (False if sides else None)
    if not availability and (
        type(test) is cst.Call
        or type(test) is cst.Comparison and (type(test.left) is cst.Call or any(type(target.comparator) is cst.Call for target in test.comparisons))
    ):
        return None
    if type(test) in (cst.Name, cst.Attribute) and _OPTS_OUT_OF_CUDA.match(semantics.terminal_name(test) or ""):
        return False  # `opt.no_cuda`, `args.disable_gpu`, `args.cpu`: set when CUDA is not wanted
    finder = _CudaMention()
    walk_visitor(test, finder)
    if not finder.found:
        return None
    negated = (cst.NotEqual, cst.IsNot, cst.NotIn)
    return not (isinstance(test, cst.Comparison) and any(isinstance(target.operator, negated) for target in test.comparisons))


class _CudaMention(cst.CSTVisitor):
    """A name, a key or a string of a condition that speaks of CUDA: `use_cuda`, `opt["data.cuda"]`, `"cuda"`."""

    def __init__(self):
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or _names_cuda(node.value)

    def visit_SubscriptElement(self, node: cst.SubscriptElement) -> None:
        # An option read by key, as `vars(args)` holds it: `opt["data.cuda"]` for `--data.cuda`, the last dotted part
        # naming the option as a plain name would (`args.cuda`).
        key = semantics.literal(node.slice.value, None) if type(node.slice) is cst.Index else None
        self.found = self.found or isinstance(key, str) and _names_cuda(key.rpartition(".")[2])

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        # `"GPU"`: a choice of `--mode` among "GPU" and "CPU".
        value = semantics.literal(node, None)
        self.found = self.found or is_cuda_string(node) or isinstance(value, str) and value.lower() == "gpu"


# A flag named for turning CUDA off (`--no_cuda`, `--disable-gpu`, `--without_cuda`) or for choosing the CPU (`--cpu`,
# `--use_cpu`, `--cpu_only`): `if not args.cpu:` is the CUDA arm of a CPU fallback (round 47: ERFNet's eval scripts).
_OPTS_OUT_OF_CUDA = re.compile(r"(?i)(no|disable|disabled|without|skip)_?(cuda|gpus?)$|((use|force|only|run_on|on)_?)?cpu(_?only)?$")


def _names_cuda(name: str) -> bool:
    lowered = name.lower()
    return "cuda" in lowered or "gpu" in lowered


def is_cuda_string(expr: cst.BaseExpression) -> bool:
    """`"cuda"` or `"cuda:N"` written as a string."""
    value = semantics.literal(expr, None) if type(expr) in (cst.SimpleString, cst.ConcatenatedString) else None
    return isinstance(value, str) and bool(CUDA_STRING.fullmatch(value))


def moves_a_storage(call: cst.Call, stack: Sequence[cst.CSTNode]) -> bool:
    """`storage.cuda()` in `torch.load(..., map_location=lambda storage, location: storage.cuda())`: torch calls the
    function with each storage of the checkpoint, and a storage's `.cuda()` fails otherwise than a tensor's on a CPU
    build (observed on torch 2.13: `TypeError`, not `AssertionError`). `stack`: the nodes from the module down to `call`.
    (TL205 quotes that error; its witness moves a storage.)"""
    receiver = semantics.receiver(call)
    for depth in range(len(stack) - 2, 0, -1):
        node = stack[depth]
        if type(node) is cst.Lambda:
            parent = stack[depth - 1]
            params = node.params.params
            return (
                type(parent) is cst.Arg and parent.keyword is not None and parent.keyword.value == "map_location"
                and type(receiver) is cst.Name and bool(params) and params[0].name.value == receiver.value
            )
    return False
