from torchlint.rules.base import Rule


class ParseError(Rule):
    """
    ## What it does
    Reports a file that torchlint cannot read as Python: a syntax error, bytes that
    are not valid text in the file's declared encoding, a NUL byte, an unreadable
    file or folder (the folder's files go unchecked), or code nested too deeply to analyse.

    ## Why is this bad?
    A linter that silently skips a file gives a clean report for code it never
    checked. The finding names the row and column where reading stopped; the other
    files of the run are still checked.

    ## Fix safety
    No fix: correct the file by hand.
    """

    code = "TL000"
    name = "parse-error"
    message = "the file cannot be parsed"
    example = """
    def train(:  # expect: TL000:11
        pass
    """
