"""zabd: a ZAB replica server with a pure protocol core."""

__version__ = "0.1.0"
