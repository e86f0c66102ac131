from torchlint.rules.base import Rule


class ParseError(Rule):
    """
    ## What it does
    Reports a file that torchlint cannot read as Python: a syntax error, bytes that
    are not valid text in the file's declared encoding, a NUL byte, an unreadable
    file or folder (the folder's files go unchecked), or code nested too deeply to analyse.

    Also a file torchlint does not lint, with the reason: one larger than the per-file
    size budget (`max-file-bytes`, 20 MB by default: the file is not read), one whose
    lint takes longer than the per-file time budget (`max-file-seconds`, 60 s by
    default: the lint is stopped), or an expression nested deeper than its parser
    takes (2,100 levels; Python itself stops at about 3,000).

    ## Why is this bad?
    A linter that silently skips a file gives a clean report for code it never
    checked. The finding names the row and column where reading stopped; the other
    files of the run are still checked.

    ## Fix safety
    No fix: correct the file by hand.
    """

    code = "TL000"
    name = "parse-error"
    about_the_source = True
    message = "the file cannot be parsed"
    example = """
    def train(:  # expect: TL000:11
        pass
    """
