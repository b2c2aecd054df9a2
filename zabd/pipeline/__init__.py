"""Spark (PySpark) sweeps of simulated scenarios and audits of replicas' logs.

PySpark is an optional extra (``pip install 'zabd[pipeline]'``): modules here
import pyspark only inside the functions that need it, and nothing outside
this package imports it at all, so the server installs and runs without it.
"""
