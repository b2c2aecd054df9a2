"""zabd: a ZAB replica server with a pure protocol core."""

from zabd import compiled as _compiled

__version__ = "0.1.0"

# before anything imports the core: the mypyc-built modules, or their sources (zabd.compiled)
_compiled.select()
