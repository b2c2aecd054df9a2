#!/usr/bin/env bash
# Installs zabd with its test and pipeline extras into .venv, and a headless Java
# runtime for Spark when none is present. Idempotent: quick when all is in place.
#
# The interpreter: $ZABD_PYTHON if set, else the distribution's /usr/bin/python3
# when it is 3.11 or newer, else the first python3 on the PATH. The distribution's
# comes first because a server's time is mostly the interpreter's own C code
# (allocation, dicts, tuples), and how CPython was built shows: a write's
# prepare and apply took 14 % fewer instructions on Debian's statically linked
# python3.11 than on a pyenv 3.11 built from source without
# --enable-optimizations (docs/journal/zookeeper-speed.md, "Which CPython runs the servers").
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
# Curator 5.x and javac: tests/server/test_zk_config_clients.py compiles small Java programs
# (ZooKeeper's config parser, Curator's EnsembleTracker and recipes) against these jars
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
for pkg in framework recipes client; do
    [ -f "/usr/share/java/curator-$pkg.jar" ] || need+=("libcurator-$pkg-java")
done
# go: tests/server/test_zk_session_storm.py builds a go-zookeeper session driver
# (bench/zk_sessions.py) against the library vendored in third_party/
command -v go >/dev/null 2>&1 || need+=(golang-go)
is_311() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1; }
if [ -n "${ZABD_PYTHON:-}" ]; then
    PY=$ZABD_PYTHON
elif [ -x /usr/bin/python3 ] && is_311 /usr/bin/python3; then
    PY=/usr/bin/python3
    # Debian's venv module comes in its own package
    "$PY" -c 'import ensurepip' >/dev/null 2>&1 || need+=("python3-venv")
else
    PY=python3
fi
is_311 "$PY" || { echo "install: zabd needs Python 3.11 or newer; $PY is not one (ZABD_PYTHON=/path/to/python3.11 picks another)" >&2; exit 2; }
if [ ${#need[@]} -gt 0 ]; then
    echo "install: apt-get install ${need[*]}" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi
# a venv made from another interpreter is made again
base_of() { "$1" -c 'import sys; print(sys.base_prefix)' 2>/dev/null || true; }
base=$(base_of "$PY")
for venv in .venv .kazoo-venv; do
    if [ -e "$venv" ] && [ "$(base_of "$venv/bin/python")" != "$base" ]; then
        echo "install: $venv was not made from $PY; making it again" >&2
        rm -rf "$venv"
    fi
done
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
"$VPY" -m pip install -q --disable-pip-version-check -e '.[test,pipeline]'
# The core and the simulator compiled with mypyc (scripts/build_compiled.py) when a C
# compiler is here, else the pure-Python modules run; `zabd --version` says which.
# Built again only when a source changed since the last build.
if command -v cc >/dev/null 2>&1; then
    if ! ZABD_PURE= "$VPY" -c "import sys, zabd.compiled as c; sys.exit(0 if c.in_use() else 1)"; then
        "$VPY" scripts/build_compiled.py || echo "install: the compiled core did not build; the pure-Python one runs" >&2
    fi
fi
# bytecode for every module now, once: where PYTHONDONTWRITEBYTECODE is set, each command
# would otherwise compile every module it imports, every time
"$VPY" -m compileall -q zabd >/dev/null || true
echo "install: $(.venv/bin/zabd --version), in .venv on $("$VPY" -c 'import sys; print("Python", sys.version.split()[0], "of", sys.base_prefix)')" >&2
# kazoo 2.11's own test suite (tests/server/test_kazoo_suite.py) needs pins that would
# downgrade this environment (pyOpenSSL<24.3, cryptography<44): a venv of its own that
# sees .venv's packages after its own
if [ ! -x .kazoo-venv/bin/python ]; then
    "$VPY" -m venv .kazoo-venv
fi
site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
kazoo_site=$(.kazoo-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$site')" > "$kazoo_site/zabd-venv.pth"
# kazoo itself in this venv even though .venv has it: pytest puts the site-packages of the
# tests it runs first on sys.path, and there .venv's cryptography would shadow the pin
.kazoo-venv/bin/python -m pip install -q --disable-pip-version-check --ignore-installed --no-deps "kazoo==2.11.0"
.kazoo-venv/bin/python -m pip install -q --disable-pip-version-check pytest-timeout objgraph pyjks \
    "pyOpenSSL<24.3" "cryptography<44" gevent eventlet pure_sasl
