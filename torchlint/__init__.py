"""torchlint: find silent PyTorch bugs before training, fix the safe ones, prove the rest."""

__version__ = "0.1.0"
