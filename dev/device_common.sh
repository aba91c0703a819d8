# Sourced by dev/gpu_checks.sh and dev/gpu_end_to_end.sh, from the tree's root, with OUT set:
# the interpreter, the paths the checks import, the OpenMMLab wheels of dev/device_wheels.sh
# on a machine without mmdet, and run(), which runs one check under its own time limit.
# The interpreter: $PYTHON, else .venv/bin/python where tools/setup.sh made it, else python3.
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
need_cuda() {  # need_cuda SCRIPT_NAME: exit 2 unless $PY's torch sees a CUDA GPU
    if ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
        echo "$1 needs a CUDA GPU that $PY's torch can see; none found." >&2
        exit 2
    fi
}
# the package and the measuring library (benchlib) the checks import, whether or not
# mmlinattn is installed in $PY's environment (on a bare GPU machine it is not)
export PYTHONPATH="$PWD:$PWD/tools/analysis_tools${PYTHONPATH:+:$PYTHONPATH}"
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/mmlinattn-site}
install_wheels() {  # the wheels of $WHEELS into $SITE, once, where $PY has no mmdet
    # a $SITE of an earlier call on this machine is used as it is (its mmcv may have been
    # compiled there since)
    if [ -d "$SITE" ]; then export PYTHONPATH="$SITE:$PYTHONPATH"; fi
    if [ -d "$WHEELS" ] && ! "$PY" -c 'import mmdet' 2>/dev/null; then
        echo "== installing the wheels of $WHEELS into $SITE"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
            "$WHEELS"/*.whl || exit 2
        # mmcv without its compiled ops: a stand-in that names an op when it is called
        [ -e "$SITE/mmcv/_ext.py" ] || cp dev/mmcv_ext_stub.py "$SITE/mmcv/_ext.py"
        case ":$PYTHONPATH:" in *":$SITE:"*) ;; *) export PYTHONPATH="$SITE:$PYTHONPATH" ;; esac
    fi
}
status=0

run() {  # run NAME SECONDS COMMAND...  (0 seconds: skip it)
    local name=$1 limit=$2
    shift 2
    if [ "$limit" = 0 ]; then echo "== $name: skipped (time limit 0)"; return; fi
    echo "== $name (at most ${limit} s): $*"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    grep -v -e 'Warning' -e 'warnings.warn' "$OUT/$name.log" | tail -n 30
    echo "== $name: exit status $rc$([ $rc = 124 ] && echo ' (time limit)')"
    [ $rc = 0 ] || status=1
}
