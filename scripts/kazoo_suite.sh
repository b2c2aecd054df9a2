#!/usr/bin/env bash
# kazoo 2.11.0's own test suite (kazoo/tests from the wheel, unmodified) against a
# zabd cluster: tests/kazoo_suite/plugin.py replaces kazoo's get_global_cluster.
#
#   scripts/kazoo_suite.sh                          # whole suite
#   scripts/kazoo_suite.sh kazoo.tests.test_lock    # some modules (dotted, --pyargs)
#   KAZOO_SUITE_DIR=/tmp/ks scripts/kazoo_suite.sh -x kazoo.tests.test_client
#
# PYTHON (default python3) must have zabd and the packages of kazoo's suite:
#   pip install kazoo==2.11.0 pytest pytest-timeout objgraph pyjks "pyOpenSSL<24.3" \
#       "cryptography<44" gevent eventlet pure_sasl
# (a venv made with --system-site-packages keeps the pins away from the main env).
# Server logs and events.log stay in $KAZOO_SUITE_DIR; leftover servers are ended by PID.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export KAZOO_SUITE_DIR=${KAZOO_SUITE_DIR:-$(mktemp -d /tmp/kazoo-suite-XXXXXX)}
mkdir -p "$KAZOO_SUITE_DIR"
opts=() mods=()
for a in "$@"; do
    case "$a" in kazoo.tests*) mods+=("$a") ;; *) opts+=("$a") ;; esac
done
[ ${#mods[@]} -eq 0 ] && mods=(kazoo.tests)
echo "kazoo suite against zabd: logs in $KAZOO_SUITE_DIR" >&2
"$PYTHON" -m pytest -q -p tests.kazoo_suite.plugin -p no:cacheprovider -o addopts="" \
    --timeout "${KAZOO_SUITE_TIMEOUT:-180}" -rfEs "${opts[@]}" --pyargs "${mods[@]}"
rc=$?
# if pytest died without its clean-up, end the servers it started (by PID)
for f in "$KAZOO_SUITE_DIR"/node*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if [ -n "$pid" ] && grep -qs -- "$KAZOO_SUITE_DIR" "/proc/$pid/cmdline"; then
        kill "$pid" 2>/dev/null; sleep 1; kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$f"
done
exit $rc
