"""What the code means, between the engine (which parses and walks) and the rules (which judge).

`flow.py` follows names through a scope in source order, `values.py` builds on it the
origins of any value (literals, models, loaders, what a function or a `forward`
returns), `file_kind.py` says what kind of file is linted. Rules query these; they do
not keep trackers of their own.
"""
