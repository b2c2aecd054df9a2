#!/usr/bin/env bash
# Installs zabd with its test and pipeline extras, and a headless Java runtime
# for Spark when none is present. Idempotent: quick when all is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
# Spark needs Java; the nemesis and the partition tests need iptables
# (real packet drops between network namespaces); ZooKeeper's own client and
# server are the reference the ZooKeeper-port tests compare with.
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
# ZooKeeper 3.8 (zkCli.sh, zookeeper.jar): the tests compare zkCli against zabd and ZooKeeper
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
if [ ${#need[@]} -gt 0 ]; then
    echo "install: apt-get install ${need[*]}" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test,pipeline]'
# The core and the simulator compiled with mypyc (scripts/build_compiled.py) when a C
# compiler is here, else the pure-Python modules run; `zabd --version` says which.
# Built again only when a source changed since the last build.
if command -v cc >/dev/null 2>&1; then
    if ! ZABD_PURE= python3 -c "import sys, zabd.compiled as c; sys.exit(0 if c.in_use() else 1)"; then
        python3 scripts/build_compiled.py || echo "install: the compiled core did not build; the pure-Python one runs" >&2
    fi
fi
# bytecode for every module now, once: where PYTHONDONTWRITEBYTECODE is set, each command
# would otherwise compile every module it imports, every time
python3 -m compileall -q zabd >/dev/null || true
echo "install: $(zabd --version)" >&2
# kazoo 2.11's own test suite (tests/server/test_kazoo_suite.py) needs pins that would
# downgrade this environment (pyOpenSSL<24.3, cryptography<44): a venv of its own that
# sees the packages installed above
if [ ! -x .kazoo-venv/bin/python ]; then
    python3 -m venv --system-site-packages .kazoo-venv
fi
.kazoo-venv/bin/python -m pip install -q --disable-pip-version-check "kazoo==2.11.0" pytest-timeout objgraph pyjks \
    "pyOpenSSL<24.3" "cryptography<44" gevent eventlet pure_sasl
