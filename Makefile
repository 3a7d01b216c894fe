# The course's two commands: `make book` and `make test` (each installs what it needs first).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ASSIGNMENTS := $(notdir $(wildcard solutions/[0-9]*))
MATHJAX := _assets/mathjax/tex-chtml.js

.PHONY: install book test test-fast lint sandbox chromium postgres exercises benchmark clean

install: $(STAMP) $(MATHJAX)

# A local virtual environment with pinned dependencies, d2l without its stale pins,
# and this repository's autograder package (editable, so test cells import the live code).
$(STAMP): requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps d2l==1.0.3
	$(BIN)/python -m pip install --quiet --no-deps --editable .
	$(BIN)/python -c "import matplotlib.pyplot"  # build matplotlib's font cache once, quietly
	touch $@

# MathJax served by the book itself (npm's mathjax package, pinned in package-lock.json),
# so math renders on a classroom network without internet: the TeX-to-HTML bundle, the
# TeX extensions and menu parts it loads on demand, and its fonts.
$(MATHJAX): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	rm -rf _assets/mathjax && mkdir -p _assets/mathjax/output
	cd node_modules/mathjax/es5 && cp -r tex-chtml.js input ui a11y sre $(CURDIR)/_assets/mathjax/
	cp -r node_modules/mathjax/es5/output/chtml $(CURDIR)/_assets/mathjax/output/

# The rendered book, every chapter executed, warnings as errors: _build/html/index.html, and its
# Chinese edition (zh/), which reuses each chapter's execution: _build/html/zh/index.html
book: $(STAMP) $(MATHJAX)
	$(BIN)/python _ext/build_books.py --keep-going

# The whole test suite (it builds the book too, in a temporary folder, and visits every
# page in headless Chromium; screenshots land in _build/screenshots/), on two workers: each
# test module, and the tests of the built book together, run on one (tests/conftest.py).
PYTEST_WORKERS ?= 2
test: $(STAMP) $(MATHJAX) sandbox chromium postgres lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

# The loop to run after every change: the lint gate and every test that needs no book, no
# nbgrader, no kernel, no system package and no training (-m "not slow"; the tiers are the
# markers of pyproject.toml). No apt, no npm.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python _ext/lint_chinese.py
	$(BIN)/python -m pytest -m "not slow" -n $(PYTEST_WORKERS) --dist loadgroup

# The lint gate, before the tests: ruff with the rules chosen in pyproject.toml, and the spacing and
# punctuation of the Chinese edition's prose (_ext/lint_chinese.py; `--fix` applies the spacing).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python _ext/lint_chinese.py

# bubblewrap, the sandbox of the grading command (Debian's package; needs root or sudo once).
sandbox:
	@command -v bwrap >/dev/null || { apt-get update -qq && apt-get install -y -qq bubblewrap; } \
	  || { sudo apt-get update -qq && sudo apt-get install -y -qq bubblewrap; }

# Debian's Chromium, the browser of the book's browser tests (driven by Playwright), and Noto CJK,
# so that its screenshots of the Chinese edition show Chinese, not empty boxes.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; } \
	  || { sudo apt-get update -qq && sudo apt-get install -y -qq chromium; }
	@fc-list :lang=zh | grep -q . || { apt-get update -qq && apt-get install -y -qq fonts-noto-cjk; } \
	  || { sudo apt-get update -qq && sudo apt-get install -y -qq fonts-noto-cjk; }

# Debian's PostgreSQL server, for the tests of a gradebook in PostgreSQL (tests/pg.py starts a
# throw-away server of its own, on a Unix socket in a temporary folder; nothing is configured here).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	  || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } \
	  || { sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }

# Regenerate the student notebooks from solutions/ (and the Chinese ones, zh/exercises/, from
# zh/solutions/), and the visible cases of the checks (autograder/cases/*.json) from the references
# (commit the result).
exercises: $(STAMP)
	$(BIN)/python -m autograder.reference.generate
	for a in $(ASSIGNMENTS); do PATH="$(abspath $(BIN)):$$PATH" nbgrader generate_assignment $$a --force || exit 1; done
	mkdir -p _build; for a in $(ASSIGNMENTS); do PATH="$(abspath $(BIN)):$$PATH" nbgrader generate_assignment $$a --force \
	  --CourseDirectory.root=$(abspath zh) --db=sqlite:///$(abspath _build)/zh-gradebook.db || exit 1; done

benchmark: $(STAMP)
	$(BIN)/python benchmarks/book_build.py

# A lent GPU machine has PyTorch but neither the grading packages nor internet. gpu-wheels makes
# here (from PyPI) the folder it installs them from: the wheels grading, its kernels and the tests
# need beyond PyTorch, for that machine's Python, and bubblewrap; under 60 MB, carried with the tree.
GPU_WHEELS ?= .gpu-wheels
GPU_PYTHON_VERSION ?= 3.12
.PHONY: gpu-wheels gpu-check
gpu-wheels: $(STAMP)
	rm -rf $(GPU_WHEELS)
	$(BIN)/python benchmarks/gpu_check.py wheels $(GPU_WHEELS) --python-version $(GPU_PYTHON_VERSION)

# On that machine, in under 8 minutes: install, grade with --device cuda in the sandbox, run the
# tests that use CUDA and the attention and decoding benchmarks, one summary. Without a GPU, the
# same steps on the CPU, shortened. Needs no .venv: any python3 with PyTorch.
gpu-check:
	bash benchmarks/gpu_check.sh

clean:
	rm -rf _build gradebook.db node_modules _assets/mathjax
