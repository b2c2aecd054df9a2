#!/usr/bin/env bash
# kazoo 2.11.0's own test suite (kazoo/tests from the wheel, unmodified) against Java
# ZooKeeper 3.8 through kazoo's own harness, twice: plain, then with a `zabd mirror`
# attached to every ensemble the harness starts (tests/kazoo_suite/zk_mirror_plugin.py).
# The claim: no test affected (the same passed/failed/skipped counts), and every
# mirrored tree equals ZooKeeper's (digests, and a zabd node started on the mirror's
# directory serving ZooKeeper's tree). A soak: minutes per run, not in the default suite.
#
#   scripts/kazoo_suite_mirrored.sh                                # both runs, whole suite
#   scripts/kazoo_suite_mirrored.sh kazoo.tests.test_lock          # some modules (dotted, --pyargs)
#   MODE=mirrored scripts/kazoo_suite_mirrored.sh                  # one run: plain | mirrored | both
#
# PYTHON (default: .kazoo-venv/bin/python, which scripts/install.sh makes, else python3)
# must have zabd's dependencies and the packages of kazoo's suite:
#   pip install kazoo==2.11.0 pytest pytest-timeout objgraph pyjks "pyOpenSSL<24.3" \
#       "cryptography<44" gevent eventlet pure_sasl
# and Debian's ZooKeeper (apt-get install zookeeper). The classpath adds the three jars
# Debian's zookeeper.jar manifest omits (../shared/anchors/zookeeper/README.md).
# Output: $KAZOO_SUITE_DIR/{plain,mirrored}.out, and in mirrored/: mirror<N>.log and
# mirror-results.jsonl (one line per ensemble). Exit 0 only if both hold.
set -u
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .kazoo-venv/bin/python ]; then PYTHON=.kazoo-venv/bin/python; else PYTHON=python3; fi
fi
MODE=${MODE:-both}
DIR=${KAZOO_SUITE_DIR:-$(mktemp -d /tmp/kazoo-suite-mirrored-XXXXXX)}
mkdir -p "$DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export ZOOKEEPER_CLASSPATH=${ZOOKEEPER_CLASSPATH:-/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar:/usr/share/java/servlet-api.jar}
export ZOOKEEPER_VERSION=${ZOOKEEPER_VERSION:-3.8.0}
export ZOOKEEPER_PORT_OFFSET=${ZOOKEEPER_PORT_OFFSET:-30000}
mods=()
for a in "$@"; do mods+=("$a"); done
[ ${#mods[@]} -eq 0 ] && mods=(kazoo.tests)

run() {  # run NAME [pytest plugin options...]
    local name=$1; shift
    mkdir -p "$DIR/$name"
    echo "kazoo suite against ZooKeeper ($name): $DIR/$name.out" >&2
    KAZOO_SUITE_DIR="$DIR/$name" "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" \
        --timeout "${KAZOO_SUITE_TIMEOUT:-180}" -rfEs "$@" --pyargs "${mods[@]}" > "$DIR/$name.out" 2>&1
    # if pytest died without its clean-up, end the mirrors it started (by PID)
    for f in "$DIR/$name"/mirror*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        if [ -n "$pid" ] && grep -qs -- "$DIR/$name" "/proc/$pid/cmdline"; then kill "$pid" 2>/dev/null; fi
        rm -f "$f"
    done
}

last() {  # pytest's closing line
    grep -E '^=*.*[0-9]+ (passed|failed|error).* in [0-9.]+s' "$1" | tail -1
}

counts() {  # the counts of pytest's closing line, as "passed=N failed=N skipped=N error=N"
    local line
    line=$(last "$1")
    for k in passed failed skipped error; do
        printf '%s=%s ' "$k" "$(echo "$line" | grep -oE "[0-9]+ $k" | grep -oE '[0-9]+' || echo 0)"
    done
}

rc=0
if [ "$MODE" != mirrored ]; then
    run plain
    plain=$(counts "$DIR/plain.out")
    echo "plain:    $plain ($(last "$DIR/plain.out"))"
fi
if [ "$MODE" != plain ]; then
    run mirrored -p tests.kazoo_suite.zk_mirror_plugin
    mirrored=$(counts "$DIR/mirrored.out")
    echo "mirrored: $mirrored ($(last "$DIR/mirrored.out"))"
    summary=$(grep -E '^mirror: [0-9]+ ensembles followed' "$DIR/mirrored.out" || true)
    echo "${summary:-mirror: no summary (see $DIR/mirrored.out)}"
    grep -E '^mirror [0-9]+ DIFFERS' "$DIR/mirrored.out" || true
    if ! echo "$summary" | grep -qE '^mirror: ([1-9][0-9]*) ensembles followed, \1 equal'; then rc=1; fi
fi
if [ "$MODE" = both ]; then
    if [ "$plain" = "$mirrored" ]; then
        echo "same counts with and without the mirror"
    else
        echo "COUNTS DIFFER; failures plain vs mirrored:"
        diff <(grep -E '^(FAILED|ERROR) ' "$DIR/plain.out" | sort) <(grep -E '^(FAILED|ERROR) ' "$DIR/mirrored.out" | sort)
        rc=1
    fi
fi
exit $rc
