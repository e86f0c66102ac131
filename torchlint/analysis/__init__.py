"""What the code means, between the engine (which parses and walks) and the rules (which judge).

`flow.py` follows names through a scope in source order, `values.py` builds on it the
origins of any value (literals, models, loaders, what a function or a `forward`
returns), `file_kind.py` says what kind of file is linted. What torch code means has a
module named for each question: `conversions.py`, `dtypes.py`, `devices.py`, `steps.py`,
`losses.py`, `models.py`, `grad_mode.py`, `training.py`, `modules.py`. Rules query these;
they do not keep trackers of their own. Nothing here imports `torchlint.rules`.
"""
