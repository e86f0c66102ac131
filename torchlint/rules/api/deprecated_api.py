from typing import Sequence

import libcst as cst

from torchlint.rules.api._table import ApiEntry, ApiTableRule, show_version


class DeprecatedApi(ApiTableRule):
    """
    ## What it does
    Flags each import and each use (call or attribute access) of a deprecated torch API
    listed in the API table (`torchlint/data/api.toml`): `torch.cuda.amp.autocast(...)`,
    `torch.cuda.amp.GradScaler(...)`, `torch.range`, `torch.chain_matmul`, `torch.cholesky`,
    `torch.qr`, `torch.norm`, `torch.ger`, `torch.testing.assert_allclose`,
    `torch.nn.utils.weight_norm`, `torch.backends.cuda.sdp_kernel`, `functorch.*`,
    `torch.autograd.Variable`, ... Names are resolved through the file's imports:
    `import torch.cuda.amp as amp` then `amp.autocast()`, and `from torch.cuda.amp import
    autocast`, are both found; a local variable named `autocast` is not.

    An API is reported only when the oldest torch the project supports (`torch-version`)
    already has its replacement, so the suggested code runs everywhere the project does.
    Compatibility code for older torch is not reported: either arm of an `if` or conditional
    expression that tests the torch version (`torch.__version__`, `Version(...)`,
    `pytorch_after(...)`, `is_torch_greater_or_equal_than_2_0`, ..., also through names the module binds to
    one, `TORCH_MAJOR = int(torch.__version__.split(".")[0])`) or a feature
    (`hasattr(...)`), the body of an `except ImportError`/`ModuleNotFoundError`/`AttributeError`
    handler, the uses of a name imported there, and `x = old` replaced just below by
    `if hasattr(...): x = new`.

    ## Why is this bad?
    Deprecated APIs warn at run time (torch 2.13: `FutureWarning: torch.cuda.amp.autocast(args...)
    is deprecated. Please use torch.amp.autocast('cuda', args...) instead.`, once per call
    site) or are documented as deprecated, and are removed in a later release, when the code
    stops working. `torch.autograd.Variable` is the exception, and its message says so: torch
    2.13 does not warn and its docstring says nothing; only the autograd docs page calls the
    Variable API deprecated, and `Variable(x)` returns a detached alias of `x`.

    ## Fix safety
    Safe where the replacement is the same function under another name (`torch.ger` ->
    `torch.outer`, `functorch.vmap` -> `torch.func.vmap`, `torch.nn.init.normal` ->
    `torch.nn.init.normal_`) or the same class given its device
    (`torch.cuda.amp.autocast(enabled=x)` -> `torch.amp.autocast("cuda", enabled=x)`; only for
    calls that pass keyword arguments, since the positional parameters differ). The test
    suite runs both forms of each on CPU. The file's own alias of torch is kept; when the file
    imports no name that reaches the replacement, the fix adds `import torch`.

    Unsafe for `Variable(x)` -> `x`: `Variable(x)` returns a detached alias, so the two differ
    when `x` requires grad. No fix where the replacement takes other arguments
    (`torch.range`, `torch.norm`, `torch.cholesky`, ...).

    ## Options
    `torch-version`: the oldest torch the code must run on. With `torch-version = "2.1"`,
    `torch.cuda.amp.GradScaler` is not reported (`torch.amp.GradScaler` appeared in 2.3).
    """

    code = "TL602"
    name = "deprecated-api"
    about_the_source = True
    kind = "deprecated"
    fix_safety = "safe or unsafe"
    message = "this torch API is deprecated and will be removed; use the replacement the message names"
    # Checked on torch 2.13: `isinstance(t, Variable)` holds for every tensor (a `Parameter`, an int64 tensor) and for
    # nothing else.
    # Checked on torch 2.13: `Variable(x, requires_grad=True)` is a leaf that requires grad, as
    # `x.detach().requires_grad_(True)` is; `x` itself may not require grad.
    requires_grad_message = (
        "`torch.autograd.Variable` is deprecated since torch 0.4: `Variable(x, requires_grad=...)` gives a detached "
        "alias of `x` with that flag; write `x.detach().requires_grad_(...)` (or `x.requires_grad_(...)` where `x` "
        "is a leaf the code does not use otherwise)"
    )
    type_check_message = (
        "`Variable` in a type check: since torch 0.4 every tensor is an instance of it, so the check only asks whether "
        "the value is a tensor; write `torch.Tensor`"
    )
    example = """
    import torch

    with torch.cuda.amp.autocast(dtype=torch.bfloat16):  # expect: TL602:6
        loss = model(x)
    pairs = torch.ger(a, b)  # expect: TL602:9
    """
    use_instead = """
    import torch

    with torch.amp.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    pairs = torch.outer(a, b)
    """

    def applies(self, entry: ApiEntry) -> bool:
        return entry.kind == self.kind and self.ctx.config.torch_version >= entry.replacement_since

    def describe_use(self, entry: ApiEntry, qualified: str, stack: Sequence[cst.CSTNode]) -> str:
        if qualified == "torch.autograd.Variable" and _type_checked_by(stack):
            # `isinstance(x, Variable)`: no tensor to unwrap; the check no longer tells anything apart.
            return self.type_check_message
        if qualified == "torch.autograd.Variable" and _passes_requires_grad(stack):
            # `Variable(x, requires_grad=True)`: the tensor itself would lose the flag the code asks for.
            return self.requires_grad_message
        return self.describe(entry, qualified)

    def describe(self, entry: ApiEntry, qualified: str) -> str:
        since = show_version(entry.deprecated_in)
        if entry.observed is not None:
            return f"`{qualified}` is deprecated since torch {since} ({entry.observed}); use {entry.instead}"
        return (
            f"`{qualified}` is deprecated since torch {since} and will be removed "
            f"(until then it warns or is documented as deprecated); use {entry.instead}"
        )


def _type_checked_by(stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost node of `stack` is the class argument of `isinstance(...)` or `issubclass(...)`, alone or in a
    tuple of classes."""
    node = stack[-1]
    index = len(stack) - 2
    if index >= 1 and type(stack[index]) is cst.Element and type(stack[index - 1]) is cst.Tuple:
        node, index = stack[index - 1], index - 2
    if index < 1 or type(stack[index]) is not cst.Arg or stack[index].value is not node:
        return False
    call = stack[index - 1]
    return (
        type(call) is cst.Call and type(call.func) is cst.Name and call.func.value in ("isinstance", "issubclass")
        and len(call.args) == 2 and call.args[1] is stack[index]
    )


def _passes_requires_grad(stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost node of `stack` is called with a `requires_grad=` argument (`Variable(x, requires_grad=True)`)."""
    if len(stack) < 2 or type(stack[-2]) is not cst.Call or stack[-2].func is not stack[-1]:
        return False
    return any(arg.keyword is not None and arg.keyword.value == "requires_grad" for arg in stack[-2].args)
