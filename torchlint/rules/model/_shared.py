"""What the model-definition rules share: the trigger of code inside an `nn.Module` class."""

from torchlint.rules.triggers import project_imports, words

# Every finding is in a class the file defines (so `class` is written), which names its torch base through
# `torch.nn` (so `nn` is written in the import or the chain) or Lightning's `LightningModule`, or derives from a class
# of a project file this one imports.
IN_MODULE_CLASS = words("class") & (words("nn", "LightningModule") | project_imports())
