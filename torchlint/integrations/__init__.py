"""Entry points that other tools load (flake8); each is a thin shell over the engine."""
