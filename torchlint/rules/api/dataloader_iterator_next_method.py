from typing import List, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.values import Origin, Values, iterated_items
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes, words


class DataLoaderIteratorNextMethod(Rule):
    """
    ## What it does
    Flags `.next()` called on an iterator of a `torch.utils.data.DataLoader`:
    `iter(loader).next()`, `loader.__iter__().next()` (the method `iter()` calls), and
    `it.next()` after `it = iter(loader)`, where `loader` is
    followed through the file's assignments to a `DataLoader(...)` call (also
    `loaders["train"]`, a loader a function of the file returns, or a parameter of a
    function whose every call is seen and passes one: `train(labeled_loader, ...)`, the
    script's only call of its `train`, as the value model binds parameters).

    Not flagged: `next(it)`; `.next()` on anything not shown to be a DataLoader's iterator:
    progress bars (`bar.next()`), MXNet or other libraries' iterators, an iterator of a
    loader passed in as a parameter of a function that may be called from where the file
    does not show (a library's function, one nothing calls). Given up for that precision:
    such a loader, whose iterator's `.next()` fails just the same.

    ## Why is this bad?
    Before torch 1.13 the DataLoader's iterators kept `next` as a Python 2 alias of
    `__next__`, and tutorials of that time wrote `images, labels = dataiter.next()`. The
    alias is gone: on torch 2.13 the call raises `AttributeError:
    '_SingleProcessDataLoaderIter' object has no attribute 'next'`
    (`'_MultiProcessingDataLoaderIter'` for a loader with workers: the message names the
    class the loader's `num_workers` gives, or both when the file does not show it).

    ## Fix safety
    Safe: `next(it)` calls the same `__next__` the alias named (`next(iter(loader))` for
    `iter(loader).next()`). Not offered where the name `next` is bound to something else.
    """

    code = "TL610"
    name = "dataloader-iterator-next-method"
    about_the_source = True
    # The flagged call is `<receiver>.next()`, and the receiver leads to a DataLoader the file names.
    triggers = attributes("next") & words("DataLoader")
    call_parts = frozenset({"next"})
    fix_safety = "safe"
    message = (
        "DataLoader iterators have no `.next()` method since torch 1.13: the call raises `AttributeError: "
        "'{iterator}' object has no attribute 'next'`{or_with_workers}; use `next(it)`"
    )
    # The iterator's class, which the error names, depends on the loader's workers (`_message`).
    single_process = "_SingleProcessDataLoaderIter"
    multi_process = "_MultiProcessingDataLoaderIter"
    example = """
    import torch

    trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=True)
    dataiter = iter(trainloader)
    images, labels = dataiter.next()  # expect: TL610:18
    """
    use_instead = """
    import torch

    trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=True)
    dataiter = iter(trainloader)
    images, labels = next(dataiter)
    """

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is not cst.Attribute or func.attr.value != "next" or node.args:
            return
        if not self.ctx.may_name(semantics.DATALOADER):
            return
        loaders = self._iterated_dataloaders(func.value)
        if loaders:
            self.report(node, self._message(loaders), self._fix(node, func.value))

    def _iterated_dataloaders(self, receiver: cst.BaseExpression) -> List[Origin]:
        """The `DataLoader(...)` calls whose iterator `receiver` may be."""
        values = Values.of(self.ctx)
        found = []
        for origin in values.origins(receiver):
            iterated = None if origin.applied or origin.opaque else iterated_items(origin.node, origin.place.context, origin.place.scopes)
            if iterated is not None:
                found += [
                    loader for loader in values.origins(iterated, origin.place.stack)
                    if semantics.is_dataloader_call(loader.node, self.ctx, loader.place.stack)
                ]
        return found

    def _message(self, loaders: List[Origin]) -> str:
        workers = set()
        for loader in loaders:
            count = semantics.workers_of(loader.node, self.ctx, loader.place.stack)
            workers.add(False if count is None else count > 0 if isinstance(count, int) else None)
        if workers == {True}:
            return self.message.format(iterator=self.multi_process, or_with_workers="")
        unknown = "" if workers == {False} else f" (`{self.multi_process}` with workers)"
        return self.message.format(iterator=self.single_process, or_with_workers=unknown)

    def _fix(self, call: cst.Call, receiver: cst.BaseExpression) -> Optional[Fix]:
        if self.ctx.scopes.binding_scope("next", self.ctx.scope_nodes) is not None:
            return None
        return Fix.safe("Call `next(...)` on the iterator", self.ctx.replace(call, f"next({self.ctx.code(receiver)})"))

