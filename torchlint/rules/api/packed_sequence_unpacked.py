from typing import Optional

import libcst as cst

from torchlint.analysis.values import Values
from torchlint.finding import Fix
from torchlint.fixes.rewrites import code_in_place
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

PACKING = frozenset({
    "torch.nn.utils.rnn.pack_padded_sequence", "torch.nn.utils.rnn.pack_sequence",
})
# PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices) since torch 1.1; (data, batch_sizes) before.
_FIELDS = 4


class PackedSequenceUnpacked(Rule):
    """
    ## What it does
    Flags the result of `pack_padded_sequence(...)` or `pack_sequence(...)` unpacked into
    other than four names: `data, batch_sizes = pack_padded_sequence(x, lengths)`, directly
    or through a variable that holds only such results.

    Not flagged: unpacking `pad_packed_sequence(...)`, which returns two values; unpacking
    into four names or with a starred name; attribute access (`packed.data`); a packed
    sequence passed on to an RNN.

    ## Why is this bad?
    Before torch 1.1 a `PackedSequence` was a named tuple of two fields, `data` and
    `batch_sizes`, and old code unpacked it. It has four now (`sorted_indices` and
    `unsorted_indices` were added), so on torch 2.13 the assignment raises `ValueError: too
    many values to unpack (expected 2)`.

    ## Fix safety
    Safe, for two names: `data, sizes = packed` -> `data, sizes = packed.data,
    packed.batch_sizes`; `data, sizes = pack_padded_sequence(...)` -> `data, sizes =
    pack_padded_sequence(...)[:2]` (the first two fields, `data` and `batch_sizes`, without
    evaluating the call twice). Each binds the values the old two-field tuple gave (the test
    suite runs them against an emulation of it, and again without it on torch 2.13). No fix
    for other counts.
    """

    code = "TL614"
    name = "packed-sequence-unpacked"
    about_the_source = True
    # The unpacked value is a packing call, whose name's last part is written in the file.
    triggers = words("pack_padded_sequence", "pack_sequence")
    fix_safety = "safe"
    message = (
        "a `PackedSequence` has 4 fields (data, batch_sizes, sorted_indices, unsorted_indices) since torch 1.1: "
        "unpacking it into {count} raises `ValueError: too many values to unpack`; use `.data` and `.batch_sizes`"
    )
    example = """
    from torch.nn.utils.rnn import pack_padded_sequence

    data, batch_sizes = pack_padded_sequence(embedded, lengths)  # expect: TL614:1
    """
    use_instead = """
    from torch.nn.utils.rnn import pack_padded_sequence

    packed = pack_padded_sequence(embedded, lengths)
    data, batch_sizes = packed.data, packed.batch_sizes
    """

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or type(node.targets[0].target) not in (cst.Tuple, cst.List):
            return
        target = node.targets[0].target
        if any(isinstance(element, cst.StarredElement) for element in target.elements) or len(target.elements) == _FIELDS:
            return
        if not self._is_packed(node.value):
            return
        count = len(target.elements)
        self.report(node, self.message.format(count=f"{count} name" + ("s" if count != 1 else "")), self._fix(node, target))

    def _is_packed(self, value: cst.BaseExpression) -> bool:
        if type(value) is cst.Call:
            return self.ctx.qualified_name_in(value.func, PACKING)
        if type(value) is not cst.Name or not self.ctx.may_name(PACKING):
            return False
        origins = Values.of(self.ctx).origins(value)
        return bool(origins) and all(
            type(origin.node) is cst.Call and not origin.applied
            and self.ctx.qualified_name_in(origin.node.func, PACKING, origin.place.stack)
            for origin in origins
        )

    def _fix(self, node: cst.Assign, target: cst.BaseExpression) -> Optional[Fix]:
        if len(target.elements) != 2:
            return None
        value = code_in_place(self.ctx, node.value, self.ctx.stack)
        if type(node.value) is cst.Name:
            replacement = f"{self.ctx.code(target)} = {value}.data, {value}.batch_sizes"
        else:
            replacement = f"{self.ctx.code(target)} = {value}[:2]"
        return Fix.safe("Read the fields by name", self.ctx.replace(node, replacement))
