from torchlint.rules.api._table import ApiEntry, ApiTableRule, show_version


class RemovedApi(ApiTableRule):
    """
    ## What it does
    Flags each import and each use of a torch API that torch has removed: `torch.solve`,
    `torch.symeig`, `torch.lstsq`, `torch.matrix_rank`, `torch.eig`, `torch._six`, Lua
    torch's `torch.legacy` and `torch.utils.serialization.load_lua`, the C extensions'
    `torch.utils.ffi`, and the other `removed` entries of the API table (`torchlint/data/api.toml`). Names are
    resolved through the file's imports, so `from torch import solve` and `import torch as T`
    are followed and a local variable called `solve` is not.

    Compatibility code for older torch is not reported: either arm of an `if` or conditional
    expression that tests the torch version (`torch.__version__`, `Version(...)`,
    `pytorch_after(...)`, ..., also through names the module binds to one:
    `TORCH_MAJOR = int(torch.__version__.split(".")[0])`, then `if TORCH_MAJOR >= 2:`) or a feature (`hasattr(...)`), and the body of an
    `except ImportError`/`ModuleNotFoundError`/`AttributeError` handler. There the removed
    API is reached only on a torch that still has it. Nor is an import of a removed name
    in a `try` whose handler catches its failure and binds a replacement
    (`try: from torch._six import inf` / `except ImportError: from torch import inf`, or a
    bare `except:`), nor the uses of the name it binds: on a current torch the handler's
    value is the one used. A removed function called in such a `try` is still reported.

    ## Why is this bad?
    The code fails as soon as it runs on a current torch. torch 2.13 keeps stubs for the
    linear-algebra functions that raise `RuntimeError: This function was deprecated since
    version 1.9 and is now removed`, `import torch._six` (or `torch.legacy`, gone since
    torch 1.0) raises `ModuleNotFoundError`, and `load_lua` (gone since torch 1.0) an
    `ImportError`; each message says how the use fails.

    ## Fix safety
    No fix: every replacement differs in its arguments or results (`torch.linalg.solve`
    takes its arguments in the reverse order and returns only the solution). The message
    says what to write.
    """

    code = "TL601"
    name = "removed-api"
    preview = (
        "In preview after held-out rounds 48-52 (docs/precision.md): its last 11 findings read at first sight, pooled "
        "back to round 48, were 9 true. The false ones were SlowFast's import of `torch._six` in the arm of a version "
        "test written through module-level names (`TORCH_MAJOR = int(torch.__version__.split(\".\")[0])`, then "
        "`if TORCH_MAJOR >= 1 and TORCH_MINOR >= 8:`), read as a version test now (round 52, a trap fixture). The "
        "rule leaves preview again when two rounds in a row read it at least 9 in 10 true."
    )
    about_the_source = True
    kind = "removed"
    import_fails = True
    message = "this torch API was removed: the code fails when it reaches it; use the replacement the message names"
    example = """
    import torch

    x = torch.solve(b, A).solution  # expect: TL601:5
    """
    use_instead = """
    import torch

    x = torch.linalg.solve(A, b)
    """

    def describe(self, entry: ApiEntry, qualified: str) -> str:
        # A name under a removed module (`torch._six.container_abcs`): the table knows when the module went, not
        # each of its names, some of which went earlier.
        removed = f"`{qualified}`" if qualified == entry.name else f"`{entry.name}`, which `{qualified}` is part of,"
        return (
            f"{removed} was removed in torch {show_version(entry.removed_in)}: the code fails when it reaches it "
            f"({entry.observed}); use {entry.instead}"
        )
