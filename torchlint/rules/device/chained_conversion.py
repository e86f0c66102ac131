from typing import Optional

import libcst as cst

from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.device import _shared


class ChainedConversion(Rule):
    """
    ## What it does
    Flags a device move and a dtype cast chained on one value, in either order
    (`x.float().cuda()`, `x.half().to(device)`, `x.cuda().float()`, `y.to(device).long()`,
    `x.cpu().double()`), and a move chained on a move (`x.cuda().cuda()`, `x.to(d).to(d)`).

    ## Why is this bad?
    Move-then-cast copies the tensor to the device in its source dtype, then the
    cast allocates a second device tensor: two device buffers where one would do.
    Cast-then-move is two calls for what `.to(device, dtype)` does in one, with the
    same work (a blocking copy converts on the host first either way). A second move
    is a no-op when the first already reached that device (`.to()` returns the same
    tensor) and a second copy when it names another one.

    Not flagged: `.cpu().numpy()`, `.detach().cpu()`, `.to(memory_format=...)`, and
    two casts in a row: `.half().float()` rounds through float16, which one cast
    would not, so it is not the same as a single conversion.

    ## Fix safety
    Cast-then-move (`x.float().cuda()` -> `x.to("cuda", torch.float32)`) is safe: the
    result is unchanged, and so is the data movement of a blocking copy. Move-then-cast (`x.cuda().float()`,
    `y.to(device).long()`) is unsafe: the values are identical, but the merged call
    converts on the host before copying, which moves more bytes when the source is
    narrower than the target (uint8 images to float32: 4x the transfer). Keyword
    arguments such as `non_blocking=` are kept. A repeated move is fixed (safely)
    only when both moves are written the same way: the second one is dropped.
    """

    code = "TL202"
    name = "chained-conversion"
    fix_safety = "safe or unsafe"
    message = "a device move and a dtype cast chained on one value: write one `.to(device, dtype)`"
    example = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = images.half().to(device)  # expect: TL202:10
    labels = labels.to(device).long()  # expect: TL202:10
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = images.to(device, torch.float16)
    labels = labels.to(device, torch.int64)
    """

    def visit_Call(self, node: cst.Call) -> None:
        outer = _shared.conversion(node, self.ctx)
        if outer is None or not isinstance(node.func.value, cst.Call):
            return
        inner = _shared.conversion(node.func.value, self.ctx)
        # A call that both moves and casts is already the merged form.
        if inner is None or inner.moves == inner.casts or outer.moves == outer.casts:
            return
        if inner.moves and outer.moves:
            self._repeated_move(inner, outer)
        elif inner.casts != outer.casts:
            self._move_and_cast(inner, outer)

    def _repeated_move(self, inner: _shared.Conversion, outer: _shared.Conversion) -> None:
        message = (
            f"`.{_label(inner)}` then `.{_label(outer)}`: the second move returns the same tensor when the first "
            "already reached that device, or copies it again when it names another one; keep one move"
        )
        fix = None
        tail = _tail(self.ctx, outer.call)
        if _tail(self.ctx, inner.call) == tail:
            fix = Fix.safe("Drop the repeated move", _shared.tail_edit(self.ctx, inner.call, outer.call, tail))
        self.report(outer.call, message, fix)

    def _move_and_cast(self, inner: _shared.Conversion, outer: _shared.Conversion) -> None:
        cast_first = inner.casts
        if cast_first:
            message = (
                f"`.{_label(inner)}` then `.{_label(outer)}`: two conversion calls where one `.to(device, dtype)` "
                "does the same conversion and copy (a blocking copy converts on the host first either way)"
            )
        else:
            message = (
                f"`.{_label(inner)}` then `.{_label(outer)}`: the tensor is copied to the device in its source dtype, "
                "then converted there into a second device tensor; write one `.to(device, dtype)`"
            )
        self.report(outer.call, message, self._merge(inner, outer, safe=cast_first))

    def _merge(self, inner: _shared.Conversion, outer: _shared.Conversion, safe: bool) -> Optional[Fix]:
        move, cast = (outer, inner) if safe else (inner, outer)
        keywords = cast.keywords + move.keywords
        names = [text.split("=", 1)[0] for text in keywords]
        dtype = cast.dtype_code(self.ctx)
        if not (move.complete and cast.complete) or dtype is None or len(set(names)) < len(names):
            return None
        content = _shared.to_call(move.device, dtype, *keywords)
        edit = _shared.tail_edit(self.ctx, inner.call, outer.call, content)
        description = f"Merge into `.{content}`"
        return Fix.safe(description, edit) if safe else Fix.unsafe(description, edit)


def _label(read: _shared.Conversion) -> str:
    return f"{read.call.func.attr.value}(...)" if read.call.args else f"{read.call.func.attr.value}()"


def _tail(ctx, call: cst.Call) -> str:
    """`to(device)` for `x.to(device)`: the method and its arguments as written."""
    return f"{call.func.attr.value}({''.join(ctx.code(arg) for arg in call.args)})"
