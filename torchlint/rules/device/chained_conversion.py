from typing import List, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.conversions import CONVERSION_METHODS, Conversion, TORCH_FROM_ARRAY, conversion, peel_moves, stays_on_its_device
from torchlint.analysis.dtypes import applied_dtype, dtype_origins, joined_tensors, made_dtype
from torchlint.analysis.modules import builds_module
from torchlint.analysis.syntax import call_argument
from torchlint.analysis.values import Values
from torchlint.finding import Edit, Fix
from torchlint.rules.base import Rule
from torchlint.rules.device._chains import tail_edit, to_call
from torchlint.rules.triggers import attributes


class ChainedConversion(Rule):
    """
    ## What it does
    Flags a dtype cast chained before a device move (`x.float().cuda()`,
    `x.half().to(device)`), a move chained before a cast to a dtype of fewer than 32
    bits (`x.cuda().half()`, `x.to(device).bfloat16()`, `mask.to(device).bool()`), and a
    move chained on a move (`x.cuda().cuda()`, `x.to(d).to(d)`). A run of moves chained
    on one another is one finding, at its last move.

    ## Why is this bad?
    Move-then-cast to a narrower dtype copies the tensor to the device at its source
    width, then the cast allocates a second device tensor: two device buffers where one
    would do, and more bytes copied than one `.to(device, dtype)`, which converts first.
    Cast-then-move is two calls for what `.to(device, dtype)` does in one, with the
    same work (a blocking copy converts on the host first either way). A second move
    is a no-op when the first already reached that device (`.to()` returns the same
    tensor) and a second copy when it names another one.

    Not flagged: `.cpu().numpy()`, `.detach().cpu()`, `.to(memory_format=...)`, and
    two casts in a row: `.half().float()` rounds through float16, which one cast
    would not, so it is not the same as a single conversion. Nor a cast chained with a
    move to the CPU (`x.cpu().float()`, `x.byte().cpu()`, `x.half().to(device)` where
    `device` only ever holds `torch.device("cpu")`), nor with a move passing
    `non_blocking=True`: torch's CUDA copy converts on the CPU when it blocks and on the
    GPU when it does not, so for those one `.to(device, dtype)` does the same work as
    the two calls (a copy to the host in the source dtype, then a conversion there; a
    staging buffer on the GPU), or more (`x.byte().cpu()` converts on the GPU and copies
    a quarter of the bytes).

    Nor a cast to the dtype the source shows the tensor has already: float32 of what a
    factory made in float32 (`torch.zeros(n).float().to(device)`,
    `torch.randn(n).type(torch.FloatTensor).cuda()`, and the legacy constructors, which
    convert their data: `torch.Tensor(data).float().to(device)`, unless the source shows
    `data` is a tensor (which `torch.Tensor` returns in its own dtype), and
    `torch.FloatTensor(data)`; not in a file that changes the default dtype), the type a legacy typed constructor made
    (`torch.LongTensor(ids).long()`), int64 of `torch.randint`/`torch.randperm`, of `torch.arange`
    whose bounds the source shows are ints (`torch.arange(0, x.shape[0]).long().cuda()`) and of `torch.tensor` of a
    literal of ints, of a tensor just cast to it (the second `.long()` of `x.long().long().to(device)`), or of a numpy array of
    indices or default integers (`torch.from_numpy(np.argmax(p, 1)).long().to(device)`:
    `np.argmax`, `np.argsort`, `np.random.randint` and the like give int64 on Linux,
    numpy 2.4) or of float32 (`torch.from_numpy(a.astype(np.float32)).float()`, also
    `np.float32(a)` and `np.zeros(n, dtype=np.float32)`-style constructors), the dtype a factory was given (`dtype=torch.int64`), directly or through
    a name: the cast returns the tensor it is given, and the move is the whole
    conversion. The dtype is followed through reshapes, views, copies and indexing,
    which keep it (`label = torch.arange(10).expand(10, 10).contiguous().view(-1)`,
    then `label.long().cuda()`), but not through `x.view(dtype)`, which reinterprets;
    and through `torch.cat`/`torch.stack` (and `concat`, `vstack`, ...) of tensors that all
    have it: the items of a literal list, or of a list a function builds by `append` alone
    (`images.append(torch.Tensor(x)[None])` in a loop, then `torch.cat(images).float()`).
    What that gives up: a list built otherwise (extended, appended to in another function,
    filled from a replay buffer: `np.vstack([e.action for e in experiences])` of int64
    actions) is of a dtype not known, and its cast is reported. The same holds for the
    batches of a DataLoader (`for lr, hr in loader: hr.float().cuda()`) whose dataset, a
    class of the file or of a project file it imports, returns from `__getitem__` a tuple
    whose part is of a dtype the source shows: float32 of torchvision's `ToTensor()`
    applied to its image, directly or as the last transform of a `Compose([...])`
    (`Normalize` after it keeps the dtype); the default collate stacks the items, which
    keeps their dtype (a loader given a `collate_fn` is not read). What that gives up:
    `ToTensor()` keeps the dtype of an array that is not uint8 and of a 16- or 32-bit
    PIL image (`mode "I"`), which the source seldom shows; read as float32, a cast of
    such an image is not reported.

    Nor a move chained before a cast to 32 or 64 bits (`x.cuda().float()`,
    `y.to(device).long()`, `.double()`, `.int()`), or to a dtype held in a variable
    (`x.to(device).to(dtype)`: its width is not in the source). Read on public training code, that
    cast was most often a no-op: the data was float32 or the labels int64 already, so
    `.float()` returned the tensor it was given and no second buffer was made (14 such
    chains in three rounds of unseen repositories, 6 of the 8 findings of the last). Where it is not (uint8 images
    made float32), converting on the device after the copy moves a quarter of the bytes
    one `.to(device, torch.float32)` would, so merging is no clear gain either. What that
    gives up: a float64 array moved and then made float32 (`torch.from_numpy(a).cuda().float()`),
    which would copy half the bytes merged, is not reported; TL204 reports the float64
    source itself.

    Nor a move to the device the tensor lives on already (`x.to(x.device).half()`,
    `t.to(device).half()` after `t = torch.zeros(n, device=device)`): `.to()` returns
    the tensor as it is, so only the cast converts.

    Nor a module chained the same way (`model.cuda().bfloat16()`,
    `nn.Linear(4, 2).half().to(device)`), where the value is built as one (a torch layer,
    a Module class of the project, a model builder): a module converts its parameters in
    place, once, at setup. Given up for that precision: a module the rule cannot tell
    from a tensor (built in another file, or passed in) is reported.

    ## Fix safety
    Cast-then-move (`x.float().cuda()` -> `x.to("cuda", torch.float32)`) is safe: the
    result is unchanged, and so is the data movement of a blocking copy. Move-then-cast (`x.cuda().half()`,
    `mask.to(device).bool()`) is unsafe: the values are identical, but the merged call
    converts on the host before copying, which moves more bytes when the source is
    narrower still (uint8 images to float16: twice the transfer). Keyword
    arguments such as `non_blocking=` are kept. A repeated move is fixed (safely)
    only when it is written the same way as the move before it: it is dropped, so
    `x.to(d).to(d).to(d)` becomes `x.to(d)` in one fix, and `x.cuda().cuda().cpu()`
    becomes `x.cuda().cpu()`, still reported.
    """

    code = "TL202"
    name = "chained-conversion"
    preview = (
        "Held-out rounds 15-17 (20 repositories read at first sight, docs/precision.md): 6 of 16 findings true (38%); most false ones were casts that are no-ops on data already of that dtype, which the source does not show."
    )
    # Every finding holds a call that only moves: `.cuda()`, `.cpu()` or `.to(...)` (`.type(torch.cuda.X)` also
    # casts, so it is never that call).
    triggers = attributes("cuda", "cpu", "to")
    call_parts = CONVERSION_METHODS
    fix_safety = "safe or unsafe"
    message = "a device move and a dtype cast chained on one value: write one `.to(device, dtype)`"
    example = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = images.half().to(device)  # expect: TL202:10
    masks = masks.to(device).bool()  # expect: TL202:9
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = images.to(device, torch.float16)
    masks = masks.to(device, torch.bool)
    """

    def visit_Call(self, node: cst.Call) -> None:
        outer = conversion(node, self.ctx)
        if outer is None or not isinstance(node.func.value, cst.Call):
            return
        inner = conversion(node.func.value, self.ctx)
        # A call that both moves and casts is already the merged form.
        if inner is None or inner.moves == inner.casts or outer.moves == outer.casts:
            return
        if any(read.moves and stays_on_its_device(read, self.ctx) for read in (inner, outer)):
            return  # `x.to(x.device).half()`: the move returns the tensor as it is, so only the cast converts
        if inner.moves and outer.moves:
            # A run of moves is one finding, at its last move, whose fix drops every repeat at once.
            if not self._moved_again(node):
                self._repeated_moves(self._move_run(node))
        elif inner.casts != outer.casts:
            self._move_and_cast(inner, outer)

    def _moved_again(self, call: cst.Call) -> bool:
        """Is `call` the receiver of another move (`call.cuda()`), which then reports the run?"""
        stack = self.ctx.stack
        if len(stack) < 3:
            return False
        attribute, outer = stack[-2], stack[-3]
        chained = isinstance(attribute, cst.Attribute) and attribute.value is call
        return chained and isinstance(outer, cst.Call) and outer.func is attribute and self._only_moves(outer)

    def _move_run(self, last: cst.Call) -> List[cst.Call]:
        """The moves chained directly on one another that end in `last`, innermost first."""
        run = [last]
        while isinstance(run[-1].func.value, cst.Call) and self._only_moves(run[-1].func.value):
            run.append(run[-1].func.value)
        return run[::-1]

    def _only_moves(self, call: cst.Call) -> bool:
        read = conversion(call, self.ctx)
        return read is not None and read.moves and not read.casts

    def _repeated_moves(self, run: List[cst.Call]) -> None:
        if len(run) == 2:
            message = (
                f"`.{_label(run[0])}` then `.{_label(run[1])}`: the second move returns the same tensor when the first "
                "already reached that device, or copies it again when it names another one; keep one move"
            )
        else:
            message = (
                f"`.{_label(run[0])}` then {len(run) - 1} more moves: each returns the same tensor when the one before "
                "already reached that device, or copies it again when it names another one; keep one move"
            )
        tails = [_tail(self.ctx, call) for call in run]
        # Only a move written exactly like the one before it is dropped: it returns the tensor it is given.
        kept = [tail for index, tail in enumerate(tails) if index == 0 or tail != tails[index - 1]]
        fix = None
        if len(kept) < len(tails):
            description = "Drop the repeated move" if len(tails) - len(kept) == 1 else "Drop the repeated moves"
            fix = Fix.safe(description, self._tail_edit(run, ".".join(kept)))
        self.report(run[-1], message, fix)

    def _tail_edit(self, run: List[cst.Call], content: str) -> Edit:
        if any(call.lpar for call in run[1:-1]):
            # `(x.cuda().cuda()).cuda()`: the tail would cross a parenthesis inside the run; rewrite the whole chain.
            return self.ctx.replace(run[-1], f"{self.ctx.code(run[0].func.value)}.{content}")
        return tail_edit(self.ctx, run[0], run[-1], content)

    def _move_and_cast(self, inner: Conversion, outer: Conversion) -> None:
        cast_first = inner.casts
        move = outer if cast_first else inner
        if _to_host(self.ctx, move) or _may_not_block(move):
            # One `.to(device, dtype)` converts on the CPU when blocking and on the GPU when not (torch's CUDA copy):
            # the same work as the two calls, or more, for a copy to the host or one that does not block.
            return
        if cast_first and self._dtype_already(inner):
            return  # `torch.zeros(n).float().to(device)`: the cast returns the tensor it is given
        if self._module(move):
            return  # `model.cuda().half()`: a module converted once, at setup
        if not cast_first and outer.dtype not in _NARROW_DTYPES:
            # `.cuda().float()`, `.to(device).long()`: most often the data has that dtype already (a no-op), or is
            # narrower (uint8 images), where converting after the copy moves fewer bytes than one `.to(device, dtype)`.
            return
        if cast_first:
            message = (
                f"`.{_label(inner.call)}` then `.{_label(outer.call)}`: two conversion calls where one `.to(device, dtype)` "
                "does the same conversion and copy (a blocking copy converts on the host first either way)"
            )
        else:
            message = (
                f"`.{_label(inner.call)}` then `.{_label(outer.call)}`: the tensor is copied to the device in its source "
                "dtype, then converted there into a second device tensor; one `.to(device, dtype)` converts first (on the "
                "host, for a blocking copy) and copies the narrower tensor into one device buffer"
            )
        self.report(outer.call, message, self._merge(inner, outer, safe=cast_first))

    def _dtype_already(self, cast: Conversion) -> bool:
        """Every value reaching `cast` has its dtype already, as the source shows: a factory that makes float32 by
        default (`torch.zeros(n)`, `torch.rand(n)`, without `dtype=`; in a file that does not change the default), one
        that makes int64 (`torch.randint`, `torch.randperm`), a factory given that `dtype=`, or a conversion of a
        numpy array that is int64 (`torch.from_numpy(np.argmax(scores, 1))`), also reshaped, viewed, copied or indexed
        since (`dtype_origins`: `torch.arange(10).expand(10, 10).contiguous().view(-1)`), or a join of tensors that all
        have it (`joined_tensors`: `torch.cat(images)`)."""
        if cast.dtype is None or cast.dtype == "float32" and "set_default_" in self.ctx.text:
            return False
        receiver = semantics.receiver(cast.call)
        origins = dtype_origins(receiver, self.ctx) if receiver is not None else []
        return bool(origins) and all(
            applied_dtype(origin) == cast.dtype if origin.applied else
            type(origin.node) is cst.Call and origin.place.context is self.ctx
            and cast.dtype in (_made_as(self.ctx, origin.node, origin.place.stack), _cast_by(self.ctx, origin.node, origin.place.stack))
            for origin in origins
        )

    def _module(self, move: Conversion) -> bool:
        """The chain converts a module (`model.cuda().half()`, `nn.Linear(4, 2).half().to(device)`): every value its
        receiver may hold is built as one. Modules convert their parameters in place, once, at setup."""
        receiver = peel_moves(semantics.receiver(move.call), self.ctx)
        while type(receiver) is cst.Call and conversion(receiver, self.ctx) is not None:
            receiver = peel_moves(receiver.func.value, self.ctx)
        if type(receiver) is cst.Call:
            return builds_module(self.ctx, receiver, self.ctx.stack)
        origins = Values.of(self.ctx).origins(receiver)
        return bool(origins) and all(
            type(origin.node) is cst.Call and not origin.applied and not origin.opaque
            and builds_module(origin.place.context, origin.node, origin.place.stack)
            for origin in origins
        )

    def _merge(self, inner: Conversion, outer: Conversion, safe: bool) -> Optional[Fix]:
        move, cast = (outer, inner) if safe else (inner, outer)
        keywords = cast.keywords + move.keywords
        names = [text.split("=", 1)[0] for text in keywords]
        dtype = cast.dtype_code(self.ctx)
        if not (move.complete and cast.complete) or dtype is None or len(set(names)) < len(names):
            return None
        content = to_call(move.device, dtype, *keywords)
        edit = tail_edit(self.ctx, inner.call, outer.call, content)
        description = f"Merge into `.{content}`"
        return Fix.safe(description, edit) if safe else Fix.unsafe(description, edit)


# numpy producers of int64 arrays: indices (`intp`, 64 bits on a 64-bit platform) and numpy's default integer,
# int64 on Linux and macOS (and, since numpy 2, on Windows too): observed with numpy 2.4 on Linux.
_NUMPY_INT64 = frozenset(
    f"numpy.{name}" for name in (
        "argmax", "argmin", "argsort", "argpartition", "searchsorted", "digitize", "bincount", "flatnonzero",
        "random.randint",
    )
)
# numpy producers that sample `range(n)` given a number `n` (int64), but elements of an array given one.
_NUMPY_SAMPLERS = frozenset({"numpy.random.permutation", "numpy.random.choice"})

# Casts to fewer than 32 bits a value: after a move, the usual source (float32 data, int64 indices) is wider.
_NARROW_DTYPES = frozenset({"float16", "bfloat16", "int16", "int8", "uint8", "bool"})


def _made_as(ctx, call: cst.Call, stack) -> Optional[str]:
    """The dtype `call` makes, when the source shows it: a torch factory (`made_dtype`: its `dtype=`, its default,
    a legacy constructor's type), or a conversion of a numpy array (`torch.from_numpy`, `torch.tensor`,
    `torch.as_tensor`) whose dtype the source shows (`_numpy_dtype`: int64 indices, float32 of `.astype(np.float32)`)."""
    made = made_dtype(call, ctx, stack)
    if made is not None or semantics.keyword(call, "dtype") is not None:
        return made
    joined = joined_tensors(call, ctx, stack)
    if joined is not None:
        # `torch.cat(images)` of tensors that are all float32: float32.
        made = {_dtype_of_value(ctx, tensor, at) for tensor, at in joined}
        return made.pop() if len(made) == 1 else None
    name = ctx.qualified_name(call.func, stack)
    if name in TORCH_FROM_ARRAY:
        array = call_argument(call, 0, "data" if name != "torch.from_numpy" else "ndarray")
        origins = Values.of(ctx).origins(array, stack) if array is not None else []
        made = {
            _numpy_dtype(origin.node, origin.place.context, origin.place.stack)
            if type(origin.node) is cst.Call and not origin.applied and not origin.opaque else None
            for origin in origins
        }
        # torch keeps the array's dtype: int64 indices, or float32 the source made (`a.astype(np.float32)`).
        return made.pop() if len(made) == 1 else None
    return None


# numpy's names of float32, as a dtype argument (`np.float32`, `np.single`, `"float32"`, `"f4"`).
_NUMPY_FLOAT32 = frozenset({"numpy.float32", "numpy.single"})
_FLOAT32_STRINGS = frozenset({"float32", "f4", "<f4", "single"})
# numpy constructors whose result has the dtype they are given.
_NUMPY_CONSTRUCTORS = frozenset(
    f"numpy.{name}" for name in (
        "array", "asarray", "ascontiguousarray", "zeros", "ones", "empty", "full", "eye", "identity", "arange",
    )
)


def _numpy_dtype(call: cst.Call, ctx, stack) -> Optional[str]:
    """The dtype of the numpy array `call` makes, when the source shows it: int64 (`_numpy_int64`), or float32 of
    `a.astype(np.float32)`, `np.float32(a)` and a numpy constructor given `dtype=np.float32`."""
    if _numpy_int64(call, ctx, stack):
        return "int64"
    if type(call.func) is cst.Attribute and call.func.attr.value == "astype" and ctx.qualified_name(call.func, stack) is None:
        given = call_argument(call, 0, "dtype")
        return "float32" if given is not None and _names_numpy_float32(given, ctx, stack) else None
    name = ctx.qualified_name(call.func, stack)
    if name in _NUMPY_FLOAT32:
        return "float32"
    given = semantics.keyword(call, "dtype")
    if name in _NUMPY_CONSTRUCTORS and given is not None and _names_numpy_float32(given.value, ctx, stack):
        return "float32"
    return None


def _names_numpy_float32(expr: cst.BaseExpression, ctx, stack) -> bool:
    written = semantics.literal(expr, None)
    return ctx.qualified_name(expr, stack) in _NUMPY_FLOAT32 or isinstance(written, str) and written in _FLOAT32_STRINGS


def _dtype_of_value(ctx, expr: cst.BaseExpression, stack) -> Optional[str]:
    """The one dtype every value of the tensor `expr` has, as `_made_as` or a cast shows it (`dtype_origins`)."""
    made = {
        _made_as(ctx, origin.node, origin.place.stack) or _cast_by(ctx, origin.node, origin.place.stack)
        if type(origin.node) is cst.Call and not origin.applied and origin.place.context is ctx else None
        for origin in dtype_origins(expr, ctx, stack)
    }
    return made.pop() if len(made) == 1 else None


def _cast_by(ctx, call: cst.Call, stack) -> Optional[str]:
    """The dtype `call` casts to when it is a cast (`x.long()` of `x.long().long()`: the second cast is a no-op)."""
    read = conversion(call, ctx, stack)
    return read.dtype if read is not None and read.casts else None


def _numpy_int64(call: cst.Call, ctx, stack) -> bool:
    """`call` makes an int64 numpy array: `np.argmax(...)`, `np.random.randint(...)` without `dtype=`,
    `np.random.choice(len(p), ...)` of a number (a literal or `len(...)`)."""
    if semantics.keyword(call, "dtype") is not None:
        return False
    name = ctx.qualified_name(call.func, stack)
    if name in _NUMPY_INT64:
        return True
    first = call_argument(call, 0, "a" if name == "numpy.random.choice" else "x")
    return name in _NUMPY_SAMPLERS and first is not None and (
        type(first) is cst.Integer or type(first) is cst.Call and type(first.func) is cst.Name and first.func.value == "len"
    )


def _to_host(ctx, move: Conversion) -> bool:
    """`.cpu()`, `.to("cpu")`, `.to(torch.device("cpu"))`, or `.to(device)` where every value `device` may hold is
    one of those (`device = torch.device("cpu")`, the only assignment of a notebook)."""
    node = move.device_node
    if type(node) in (cst.Name, cst.Attribute):
        origins = Values.of(ctx).origins(node)
        return bool(origins) and all(
            not origin.opaque and origin.node is not node and _names_host(origin.node) for origin in origins
        )
    return _names_host(node) if type(node) is cst.Call else move.to_host


def _names_host(node: cst.CSTNode) -> bool:
    if type(node) is cst.Call:
        return bool(node.args) and semantics.literal(node.args[0].value, None) == "cpu"
    return semantics.literal(node, None) == "cpu"


def _may_not_block(move: Conversion) -> bool:
    """The move passes `non_blocking=` anything but False."""
    flag = semantics.keyword(move.call, "non_blocking")
    if flag is None and move.call.func.attr.value == "cuda":
        flag = semantics.positional(move.call, 1)  # cuda(device=None, non_blocking=False)
    return flag is not None and semantics.literal(flag.value, None) is not False


def _label(call: cst.Call) -> str:
    return f"{call.func.attr.value}(...)" if call.args else f"{call.func.attr.value}()"


def _tail(ctx, call: cst.Call) -> str:
    """`to(device)` for `x.to(device)`: the method and its arguments as written."""
    return f"{call.func.attr.value}({''.join(ctx.code(arg) for arg in call.args)})"
