from torchlint.rules.api._table import ApiEntry, ApiTableRule


class PrivateApi(ApiTableRule):
    """
    ## What it does
    Flags each import and each use of a non-public torch name that has a public equivalent,
    from the API table (`torchlint/data/api.toml`):
    `torch.utils.data._utils.collate.default_collate` (public:
    `torch.utils.data.default_collate`), `torch.optim.lr_scheduler._LRScheduler` (public:
    `LRScheduler`), `torch.distributed._tensor` (public: `torch.distributed.tensor`), ...
    Reported only when the oldest supported torch (`torch-version`) has the public name.
    Compatibility code for older torch is not reported: `try: from ... import LRScheduler`
    / `except ImportError: from ... import _LRScheduler as LRScheduler`, the same choice
    made by a torch version test (`if torch.__version__ >= "2.0": ... else: ...`) or a
    `hasattr(...)` test, and the uses of a name imported that way.

    ## Why is this bad?
    Private names carry no compatibility promise: they move or vanish in any release
    without a deprecation period, while the public name stays.

    ## Fix safety
    Safe where the public name is the same object (the tests check `is`, or that the
    private class adds nothing to its public base); no fix for module entries such as
    `torch.distributed._tensor`.

    ## Options
    `torch-version`: the oldest torch the code must run on.
    """

    code = "TL605"
    name = "private-api"
    about_the_source = True
    kind = "private"
    fix_safety = "safe"
    message = "a private torch name with a public equivalent: use the public name"
    example = """
    from torch.utils.data._utils.collate import default_collate  # expect: TL605:45

    batch = default_collate(samples)  # expect: TL605:9
    """
    use_instead = """
    from torch.utils.data import default_collate

    batch = default_collate(samples)
    """

    def applies(self, entry: ApiEntry) -> bool:
        return entry.kind == self.kind and self.ctx.config.torch_version >= entry.replacement_since

    def describe(self, entry: ApiEntry, qualified: str) -> str:
        return (
            f"`{qualified}` is private: it may change or disappear in any torch release without a "
            f"deprecation; use the public {entry.instead}"
        )
