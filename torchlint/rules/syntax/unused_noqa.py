from torchlint.engine.noqa import UNUSED_NOQA
from torchlint.rules.base import Rule
from torchlint.rules.triggers import fragments


class UnusedNoqa(Rule):
    """
    ## What it does
    Reports a torchlint code in a `# noqa: ...` comment that suppresses nothing: the
    rule ran on the file and reported nothing on that line (ruff's RUF100). A code that
    names no torchlint rule (`# noqa: TL1O1`) is reported too.

    It leaves alone the codes of other tools (`E501`, `F401`), the codes of rules not
    selected for the file (`--select`, `per-file-ignores`: torchlint cannot know that
    they are unused), a bare `# noqa`, the file-level `# torchlint: noqa` comments, and
    a comment that lists `TL001` itself. `--ignore-noqa` turns it off.

    ## Why is this bad?
    A stale suppression hides the next real finding on that line: the code was fixed,
    or the rule improved, and the comment stays to silence whatever comes later.

    ## Fix safety
    Safe: the fix takes the unused codes out of the comment, and the whole comment
    when no code is left; only a comment changes.
    """

    code, name = UNUSED_NOQA
    about_the_source = True
    message = "unused `noqa` code: it suppresses nothing on this line; remove it"
    fix_safety = "safe"
    # The engine finds the unused codes after every rule ran (engine/noqa.py): the rule only marks the file as one
    # to parse. Every file it reports in holds a `noqa`, in any case.
    triggers = fragments("noqa")
    example = """
    import torch

    x = torch.zeros(3)  # noqa: TL303  # expect: TL001:21
    """
    use_instead = """
    import torch

    x = torch.zeros(3)
    """
