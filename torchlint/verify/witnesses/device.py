"""Device and dtype witnesses (TL2xx).

Moves cost nothing on a CPU-only machine (`.to("cpu")` returns the tensor itself),
so the move-and-cast witnesses (TL202, TL206) measure host allocations there and
report "skipped (needs a GPU)"; on a GPU they measure allocations, bytes and time
per host-to-device copy for both orders.
"""

from __future__ import annotations

import libcst as cst

from torchlint import semantics
from torchlint.analysis.conversions import TORCH_FROM_ARRAY
from torchlint.analysis.devices import moves_a_storage
from torchlint.rules.device.float64_from_numpy import DEFAULT_FLOAT64, RANDOM_FLOAT64
from torchlint.verify.site import is_device_name
from torchlint.verify.witness import FROM_FINDING, Code, witness

_CASTS = {"float": "torch.float32", "double": "torch.float64", "half": "torch.float16", "bfloat16": "torch.bfloat16",
          "long": "torch.int64", "int": "torch.int32"}


@witness(
    "TL201",
    """
    import torch

    device = torch.device("cpu")  # the device the `.to(device)` calls follow, e.g. a CPU fallback
    x = torch.ones(2)
    moved = x.to(device)
    error = raised(lambda: x.cuda())
    # A CPU build refuses CUDA by name (a generator: its CUDA library); `.cuda(index)` fails earlier, on the missing
    # accelerator.
    if error is not None and ("CUDA" in str(error) or "accelerator" in str(error)):
        confirmed(f"x.to(device) ran on {moved.device}; x.cuda() ignores `device`: " + describe(error))
    if error is None and x.cuda().device != moved.device:
        confirmed(f"x.to(device) gave {moved.device}, x.cuda() gave {x.cuda().device}: the two styles disagree")
    not_reproduced(f"x.to(device) and x.cuda() both gave {moved.device}")
    """,
)
def mixed_device_styles(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL202",
    """
    import torch

    shown = $shown
    source = torch.randint(0, 255, (1000, 1000), dtype=torch.uint8)
    if DEVICE != "cuda":
        count, size = host_allocations(lambda: $chain_on_host)
        skipped("needs a GPU: on the host the move is a no-op", f"`{shown}` with the move made to cpu: {count} allocation(s), {size} B")
    merged = lambda: source.to("cuda", $dtype)
    for warmup in range(2):
        $chain, merged()
    chain = cuda_allocations(lambda: $chain) + host_allocations(lambda: $chain)
    single = cuda_allocations(merged) + host_allocations(merged)
    figures = (
        f"`{shown}`: {chain[0]} GPU allocation(s), {chain[1]} B, {chain[3]} host allocation(s), {chain[4]} B, {chain[2]:.3f} ms; "
        f"merged .to('cuda', $dtype): {single[0]}, {single[1]} B, {single[3]}, {single[4]} B, {single[2]:.3f} ms (uint8 source, 1e6 elements)"
    )
    if any(chain[index] > single[index] for index in (0, 1, 3, 4)):
        confirmed(figures)
    not_reproduced(figures + ": the chain allocates no more than the merged call")
    """,
    chain=Code('source.float().to("cuda")'),
    chain_on_host=Code('source.float().to("cpu")'),
    shown='source.float().to("cuda")',
    dtype=Code("torch.float32"),
)
def chained_conversion(site, entry):
    node = site.node
    steps = []
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        steps.append(node)
        node = node.func.value
    dtype, chain = None, "source"
    for call in reversed(steps[:2]):
        method = call.func.attr.value
        if method in _CASTS:
            dtype = _CASTS[method]
            chain += f".{method}()"
        elif method in ("cuda", "to") and not _dtype_argument(site, call):
            chain += '.to("cuda")'
        elif method == "to" and _dtype_argument(site, call):
            dtype = _dtype_argument(site, call)
            chain += f".to({dtype})"
        else:
            return entry.canonical(f"`.{method}()` in the chain is not a plain move or cast", site.device)
    if dtype is None:
        return entry.canonical("a repeated move: the canonical cast-then-move chain is measured instead", site.device)
    host = chain.replace('"cuda"', '"cpu"')
    return entry.witness(FROM_FINDING, "", site.device, chain=Code(chain), chain_on_host=Code(host), shown=chain, dtype=Code(dtype))


def _dtype_argument(site, call: cst.Call):
    for arg in call.args:
        name = site.qualified_name(arg.value)
        if name in _CASTS.values() or name in semantics.FLOAT_DTYPES:
            return name
    return None


@witness(
    "TL203",
    """
    import torch

    torch.manual_seed(0)
    labels = torch.randint(0, 5, (4,))
    logits = torch.randn(4, 5)
    target = $cast
    error = raised(lambda: $loss(logits, target))
    ids = torch.arange(2**24, 2**24 + 1000)
    merged = len(set((ids.float().long()).tolist()))
    if isinstance(error, RuntimeError) and "target dtype" in str(error):
        confirmed(describe(error) + f" (target = `{$shown}`, dtype {target.dtype}); float32 also merges ids above 2**24: 1000 consecutive ids -> {merged} distinct values")
    not_reproduced(f"`{$loss_shown}(logits, {$shown})` ran ({describe(error)}); 1000 ids above 2**24 -> {merged} distinct values in float32")
    """,
    cast=Code("labels.float()"),
    shown="labels.float()",
    loss=Code("torch.nn.CrossEntropyLoss()"),
    loss_shown="torch.nn.CrossEntropyLoss()",
)
def label_cast_to_float(site, entry):
    node = site.node
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return entry.canonical("the flagged code is not a cast call", site.device)
    blocked = site.blocked_call(node)
    if blocked is not None:
        return entry.canonical(f"the cast calls `{blocked}`, which is not on the allow-list", site.device)
    cast = "labels" + site.code(node)[len(site.code(node.func.value)):]
    free = site.free_names(node) - {semantics.terminal_name(node.func.value)}
    if any(not is_device_name(name) for name in free):
        return entry.canonical(f"the cast uses {', '.join(sorted(free))}, defined elsewhere in the file", site.device)
    # The dtype error does not depend on the device: device names stand for the CPU.
    preamble = site.torch_imports() + "".join(f'{name} = "cpu"\n' for name in sorted(free))
    loss, note = _class_index_loss(site)
    return entry.witness(FROM_FINDING, note, site.device, preamble=preamble, cast=Code(cast), shown=cast, loss=Code(loss), loss_shown=loss)


def _class_index_loss(site):
    """The file's class-index loss with its literal arguments, else the canonical CrossEntropyLoss."""
    consumer = site.enclosing(site.node, cst.Call)
    candidates = ([consumer] if consumer is not None else []) + site.calls_in_file()
    for call in candidates:
        name = site.qualified_name(call.func)
        if name in semantics.CLASS_INDEX_LOSS_FUNCTIONS:
            return name, ""
        if name in semantics.CLASS_INDEX_LOSS_MODULES:
            kept, dropped = site.literal_arguments(call)
            if kept is not None:
                # A class weight of the wrong length or an ignore_index would change nothing about the dtype error.
                kept = [argument for argument in kept if not argument.startswith("weight=")]
                note = f"non-literal {', '.join(dropped)} dropped" if dropped else ""
                return f"{name}({', '.join(kept)})", note
    return "torch.nn.CrossEntropyLoss()", "the loss is the canonical CrossEntropyLoss"


@witness(
    "TL204",
    """
    require("numpy")
    $imports
    import torch

    shown = $shown
    tensor = $expression
    row = tensor.reshape(1, -1)
    error = raised(lambda: torch.nn.Linear(row.shape[-1], 8)(row))
    if tensor.dtype == torch.float64:
        confirmed(f"`{shown}` is {tensor.dtype}: {tensor.element_size() * tensor.nelement()} B vs {4 * tensor.nelement()} B as float32 (2x); a float32 Linear on it: " + describe(error))
    not_reproduced(f"`{shown}` is {tensor.dtype}")
    """,
    imports=Code("import numpy as np"),
    expression=Code("torch.from_numpy(np.random.rand(4, 256))"),
    shown="torch.from_numpy(np.random.rand(4, 256))",
)
def float64_from_numpy(site, entry):
    node = site.node
    name = site.qualified_name(node.func) if isinstance(node, cst.Call) else None
    if name not in TORCH_FROM_ARRAY:
        return entry.canonical("the flagged code is not a conversion call", site.device)
    blocked = site.blocked_call(node, also_allowed=_NUMPY_PRODUCERS)
    free = site.free_names(node)
    if blocked is None and not free:
        # numpy's producers only fill arrays in memory: the flagged conversion runs as written.
        imports = Code(site.imports(("numpy", "torch")))
        return entry.witness(FROM_FINDING, "", site.device, imports=imports, expression=Code(site.code(node)), shown=site.code(node))
    why = f"`{blocked}` is not on the allow-list" if blocked is not None else f"the array comes from {', '.join(sorted(free))}, defined elsewhere in the file"
    canonical = f"{name}(np.random.rand(4, 256))"
    return entry.canonical(f"{why}; {name} of a canonical np.random.rand array runs instead", site.device,
                           expression=Code(canonical), shown=canonical)


_NUMPY_PRODUCERS = frozenset({*RANDOM_FLOAT64, *DEFAULT_FLOAT64, "numpy.full", "numpy.arange", "numpy.array"})


def _hide_gpus(device: str) -> dict:
    # On a GPU machine the failure is what a machine without one sees: hide the GPUs.
    return {"CUDA_VISIBLE_DEVICES": ""} if device == "cuda" else {}


@witness(
    "TL205",
    """
    import torch

    shown = $shown
    error = raised(lambda: $use)
    # A CPU build refuses CUDA by name (a generator: its CUDA library); `.cuda(index)` fails earlier, on the missing
    # accelerator; a storage's `.cuda()` with a `TypeError` of its own (the one the message quotes for it).
    if error is not None and ("CUDA" in str(error) or "accelerator" in str(error) or $storage and type(error) is TypeError):
        confirmed(describe(error) + f" (`{shown}` on a machine without a usable GPU)")
    not_reproduced(f"`{shown}` ran without a GPU: " + describe(error))
    """,
    use=Code('torch.zeros(1, device="cuda")'),
    shown='torch.zeros(1, device="cuda")',
    storage=Code("False"),
    env=_hide_gpus,
)
def cuda_without_fallback(site, entry):
    node = site.node
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "cuda":
        kept, _ = site.literal_arguments(node)
        storage = moves_a_storage(node, site.stack(node))
        moved = "torch.zeros(1).untyped_storage()" if storage else "torch.zeros(1)"
        use = f"{moved}.cuda({', '.join(kept or [])})"
        note = "a small tensor's storage stands in for the moved one" if storage else "a small tensor stands in for the moved value"
        return entry.witness(FROM_FINDING, note, site.device, use=Code(use), shown=use, storage=Code(repr(storage)))
    if isinstance(node, (cst.SimpleString, cst.Call)) and site.blocked_call(node) is None:
        # `torch.device("cuda")` alone does not fail: the witness places a tensor there, or builds the generator it
        # is given to (which fails with an error of its own).
        call = site.enclosing(node, cst.Call)
        builds_generator = call is not None and site.qualified_name(call.func) == "torch.Generator"
        use = f"torch.Generator(device={site.code(node)})" if builds_generator else f"torch.zeros(1, device={site.code(node)})"
        return entry.witness(FROM_FINDING, "", site.device, use=Code(use), shown=use)
    return entry.canonical("the flagged device expression is not a literal", site.device)


@witness(
    "TL206",
    """
    import torch

    shown = $shown
    if DEVICE != "cuda":
        count, size = host_allocations(lambda: $factory.to("cpu"))
        skipped("needs a GPU: on the host the move is a no-op", f"`{shown}` with the move made to cpu: {count} allocation(s), {size} B, no copy")
    direct = lambda: $direct
    for warmup in range(2):
        $factory.to("cuda"), direct()
    host_count, host_bytes = host_allocations(lambda: $factory.to("cuda"))
    chain = cuda_allocations(lambda: $factory.to("cuda"))
    single = cuda_allocations(direct)
    figures = f"`{shown}`: {host_count} host allocation(s) ({host_bytes} B) and a host-to-device copy, {chain[2]:.3f} ms; with device=: {single[2]:.3f} ms"
    if host_bytes > 0:
        confirmed(figures)
    not_reproduced(figures)
    """,
    factory=Code("torch.zeros(1000, 1000)"),
    direct=Code('torch.zeros(1000, 1000, device="cuda")'),
    shown="torch.zeros(1000, 1000).to(device)",
)
def factory_then_move(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL207",
    """
    import torch

    x32 = torch.randn(1000, 1000)
    x64 = x32.double()
    error = raised(lambda: torch.nn.Linear(1000, 8)(x64))
    ratio = (x64.element_size() * x64.nelement()) / (x32.element_size() * x32.nelement())
    if ratio == 2:
        confirmed(f"float64: {x64.element_size() * x64.nelement()} B vs float32 {x32.element_size() * x32.nelement()} B (2x); a float32 Linear on it: " + describe(error))
    not_reproduced(f"float64 / float32 bytes = {ratio}")
    """,
)
def explicit_float64(site, entry):
    return entry.canonical("", site.device)


# A call each discarded conversion stands for on a float32 tensor that requires grad: its own when it needs no
# argument, else one of its kind that fits (a cast stands in for a move: no GPU is needed, and `.cpu()` on the CPU
# returns the tensor itself).
_DISCARDED_STAND_INS = {
    "to": "to(torch.float64)", "cuda": "to(torch.float64)", "cpu": "to(torch.float64)", "view": "view(3, 2)",
    "reshape": "reshape(3, 2)", "unsqueeze": "unsqueeze(0)", "permute": "permute(1, 0)", "transpose": "transpose(0, 1)",
    "clamp": "clamp(0, 1)",
}
# A tensor the conversion would change: float64 for `.float()`, a size-1 dim for `.squeeze()`, a transposed view
# for `.contiguous()`.
_DISCARDED_SOURCES = {
    "float": "torch.rand(2, 3, dtype=torch.float64).requires_grad_()",
    "squeeze": "torch.rand(2, 1, 3).requires_grad_()",
    "contiguous": "torch.rand(3, 2).t().requires_grad_()",
}


@witness(
    "TL208",
    """
    import torch

    def state(tensor):
        dtype = str(tensor.dtype).replace("torch.", "")
        shape, largest = tuple(tensor.shape), float(tensor.max())
        return f"{dtype}, shape {shape}, max {largest:.3f}, contiguous {tensor.is_contiguous()}, requires_grad {tensor.requires_grad}"

    torch.manual_seed(0)
    x = $source
    before = state(x)
    x.$call
    after = state(x)
    result = state(x.$call)
    module = torch.nn.Linear(3, 2)
    module.double()
    if before == after and result != after:
        confirmed(f"after the statement `x.$call` x is unchanged ({after}); the discarded result was {result}. A module converts in place: after `m.double()` its weight is {module.weight.dtype}")
    not_reproduced(f"`x.$call`: x {before} -> {after}, the result {result}")
    """,
    call=Code("double()"),
    source=Code("(torch.rand(2, 3) * 2).requires_grad_()"),
)
def discarded_conversion(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    method = semantics.method_name(call) if call is not None else None
    if method is None:
        return entry.canonical("the flagged code is not a method call", site.device)
    source = Code(_DISCARDED_SOURCES.get(method, entry.defaults["source"]))
    stand_in = _DISCARDED_STAND_INS.get(method)
    if stand_in is None:
        return entry.witness(FROM_FINDING, "", site.device, call=Code(f"{method}()"), source=source)
    note = f"`x.{stand_in}` stands in for `{site.code(call)}`"
    return entry.witness(FROM_FINDING, note, site.device, call=Code(stand_in), source=source)
