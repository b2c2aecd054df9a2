"""Run kazoo's own test suite (``kazoo.tests``, unmodified) against a zabd cluster.

See ``plugin.py`` for the command line, ``zabd_cluster.py`` for the cluster adapter.
"""
