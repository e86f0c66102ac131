"""`python -m torchlint` and the `torchlint` command (`run`): Ctrl-C while the command's modules are still loading
ends with exit 130 and no traceback, as it does once `cli.main` runs."""

import sys


def run() -> int:
    try:
        from torchlint.cli import main
    except KeyboardInterrupt:
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(run())
