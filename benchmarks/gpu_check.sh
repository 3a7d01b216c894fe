#!/usr/bin/env bash
# The grading command on a lent GPU machine, in one go and within 8 minutes (issue 28):
# install what grading needs from the carried wheel folder, then grade, test and benchmark
# on CUDA and print one summary (benchmarks/gpu_check.py says what each step checks).
#
#   bash benchmarks/gpu_check.sh        # from the repository root; `make gpu-check` does the same
#
# The wheel folder is made here by `make gpu-wheels` (.gpu-wheels/, carried with the tree).
# GPU_CHECK_PYTHON names the Python that has PyTorch (default: .venv's if it has one, else
# python3). Without a GPU it runs the same steps on the CPU, shortened ("CPU fallback").
set -u
cd "$(dirname "$0")/.."
wheels=${GPU_CHECK_WHEELS:-.gpu-wheels}
total=${GPU_CHECK_SECONDS:-470}   # the whole run, installation included
started=$SECONDS

python=${GPU_CHECK_PYTHON:-}
if [ -z "$python" ]; then
    for candidate in .venv/bin/python python3; do
        if "$candidate" -c "import torch" 2>/dev/null; then python=$candidate; break; fi
    done
fi
if [ -z "$python" ] || ! "$python" -c "import torch" 2>/dev/null; then
    echo "gpu_check: no Python with PyTorch found (set GPU_CHECK_PYTHON)" >&2
    exit 2
fi
"$python" -c "import torch; print('torch', torch.__version__, '| CUDA', torch.version.cuda, '|',
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU: CPU fallback')"

# 1. The grading packages, from the wheel folder, into the Python that has PyTorch (never
#    reinstalling it): into its own virtual environment when it runs in one, else into a new
#    one that sees the system's packages. Only what is missing there is installed.
if "$python" -c "import nbgrader, nbclient, ipykernel, jupyter_cache, pytest, autograder.grading" 2>/dev/null \
        && "$python" -m pip show --quiet attention-course-autograder 2>/dev/null; then
    install="ok nothing to install: $python has the grading packages"
elif [ ! -f "$wheels/requirements.txt" ]; then
    install="failed no $wheels/requirements.txt: run \`make gpu-wheels\` where the course is installed"
else
    if ! "$python" -c "import sys; sys.exit(sys.prefix == sys.base_prefix)"; then  # not in a venv
        "$python" -m venv --system-site-packages .gpu-venv && python=.gpu-venv/bin/python
    fi
    needed=$("$python" benchmarks/gpu_check.py missing "$wheels")
    log=${OUT:-/tmp}/gpu_check_install.log
    if { "$python" -m pip install --no-deps --no-index --find-links "$wheels" $needed \
            && "$python" -m pip install --no-deps --no-index --no-build-isolation --editable . ; } >"$log" 2>&1; then
        install="ok $(echo $needed | wc -w) wheels from $wheels into $("$python" -c 'import sys; print(sys.prefix)')"
    else
        tail -n 15 "$log"
        install="failed pip could not install from $wheels (Python $("$python" -V 2>&1); see $log)"
    fi
fi
echo "install: $install"

# 2. bubblewrap: the machine's own, else the one carried in the wheel folder.
if ! command -v bwrap >/dev/null && [ -x "$wheels/bwrap/bwrap" ]; then
    export PATH="$PWD/$wheels/bwrap:$PATH"
fi

# 3. Grade, test, benchmark and summarize, within what is left of the time.
export GPU_CHECK_INSTALL=$install GPU_CHECK_INSTALL_SECONDS=$((SECONDS - started))
left=$((total - (SECONDS - started)))
[ "$left" -ge 120 ] || left=120
timeout --kill-after=10 "$left" "$python" benchmarks/gpu_check.py run --deadline $((left - 15))
