# fedlab — every target creates or reuses the virtual environment by itself.
# The README's two commands:  `make run`  (the notebooks at their default size)  and  `make test`.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml lab/pyproject.toml | sha1sum | cut -c1-12)
export PYTHONHASHSEED := 0
# Every run of a make target lands in this repository's runs/, whatever the working directory of the
# process (papermill executes the notebooks with --cwd notebooks); fedlab's own default is ./runs.
export FEDLAB_RUNS ?= $(CURDIR)/runs
NB_OUT := runs/notebooks
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]*_*.ipynb))
FMNIST_DEB := /usr/share/datasets/fashion-mnist

# What `make test` needs from Debian beyond Python: Chromium (browser tests of the book and JupyterLab)
# and MathJax (the book, served locally). Each "file:package" pair names what shows the package is there.
SYSDEPS := /usr/bin/chromium:chromium /usr/share/javascript/mathjax/MathJax.js:libjs-mathjax \
           /usr/share/javascript/mathjax/fonts/HTML-CSS/TeX/woff:fonts-mathjax
HAVE_FMNIST  := test -d $(FMNIST_DEB) -o -f data/FashionMNIST/raw/train-images-idx3-ubyte
HAVE_MATHJAX := test -f /usr/share/javascript/mathjax/MathJax.js -a -d /usr/share/javascript/mathjax/fonts/HTML-CSS/TeX/woff

.PHONY: venv data sysdeps run test test-unit test-notebooks test-papermill book lab figures figures-dry-run claims bench bench-step bench-store bench-speed bench-amp bench-sweep clean-runs

venv: $(STAMP)
$(STAMP): pyproject.toml lab/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[notebooks,test,book,flower,distributed,track]"
	$(PY) -m pip install -q --no-deps -e ./lab  # the repository's harness beside the library (lab/README.md)
	# cffconvert validates CITATION.cff in the tests; its own pin (jsonschema<4) would break Jupyter, and it
	# runs on the jsonschema 4 installed above, so it and its three missing dependencies come without theirs
	$(PY) -m pip install -q --no-deps cffconvert==2.0.0 pykwalify==1.8.0 docopt==0.6.2 ruamel.yaml==0.19.1
	@rm -f $(VENV)/.installed-* && touch $@

# Fashion-MNIST offline: Debian's dataset-fashion-mnist package (installed here when we are root);
# otherwise torchvision's download where the network allows it; otherwise a note.
data:
	@if $(HAVE_FMNIST); then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing dataset-fashion-mnist"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist; \
	elif [ -x $(PY) ] && timeout 600 $(PY) -c "from fedlab.data import load_dataset; load_dataset('fmnist', download=True)" >/dev/null 2>&1; then \
	  echo "downloaded Fashion-MNIST with torchvision into data/"; \
	else echo "note: Fashion-MNIST not on disk and not downloadable here; install the Debian package dataset-fashion-mnist (as root: make data)"; fi

# Debian packages of the book and browser tests: installed when we are root, otherwise named (the
# steps that need them are then skipped, each with a note; nothing else changes).
sysdeps:
	@need=""; for pair in $(SYSDEPS); do [ -e "$${pair%%:*}" ] || need="$$need $${pair##*:}"; done; \
	if [ -z "$$need" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing$$need"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need; \
	else echo "note: missing Debian packages:$$need (as root: make sysdeps); the book build and the browser tests are skipped"; fi

# The main job (<= 10 min on 2 cores once the venv exists): every notebook at its ci size, two at a
# time through papermill, then FedAvg, FedSAM and FedVSSAM on the cpu profile's Dirichlet-0.1
# federation with the hyperparameters tuned for it (lab/tools/summary.py; notebook 10's seed-0 runs,
# loaded from figures/records/ where committed).
run: venv data
	@mkdir -p $(NB_OUT); t0=$$(date +%s); \
	printf '%s\n' $(NOTEBOOKS) | xargs -P 2 -I{} sh -c 'nb={}; out=$(NB_OUT)/$$(basename $$nb); \
	  OMP_NUM_THREADS=1 $(PY) -m papermill $$nb $$out -k python3 --cwd notebooks --execution-timeout 1800 \
	    --no-progress-bar --log-level WARNING > $${out%.ipynb}.log 2>&1 \
	  && echo "executed  $$nb" || { echo "FAILED    $$nb (log: $${out%.ipynb}.log)"; exit 255; }' || exit 1; \
	t1=$$(date +%s); echo; \
	OMP_NUM_THREADS=1 $(PY) -m lab.tools.summary --client-threads 2 || exit 1; \
	t2=$$(date +%s); echo; \
	echo "executed notebooks (ci size): $(NB_OUT)/   their figures: figures/_scratch/   runs: runs/"; \
	echo "committed cpu-profile figures, their data and evidence: figures/README.md"; \
	echo "time: $$((t2 - t0)) s (notebooks $$((t1 - t0)) s, summary runs $$((t2 - t1)) s); a second make run loads finished runs"

test: venv sysdeps data test-unit test-notebooks test-papermill
	@if ! $(HAVE_FMNIST); then echo "SKIPPED: nbval and papermill (Fashion-MNIST is not on disk; see make data)"; fi
	@if ! $(HAVE_MATHJAX); then echo "SKIPPED: the book build (Debian's libjs-mathjax and fonts-mathjax are not installed; see make sysdeps)"; fi
	@if [ ! -x /usr/bin/chromium ]; then echo "SKIPPED: the browser tests (Debian's chromium is not installed; see make sysdeps)"; fi

# the tests that start a Ray cluster run after the others, one at a time, on a machine they have to themselves:
# Ray gives a starting raylet fixed deadlines, which a second pytest worker's load made it miss
test-unit: venv
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 -q -m "not ray" tests
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m ray tests

test-notebooks: venv
	@if ! $(HAVE_FMNIST); then echo "SKIPPED nbval: Fashion-MNIST is not on disk (make data)"; \
	elif [ -n "$(NOTEBOOKS)" ]; then \
	  OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadscope -q -p no:randomly --nbval-lax --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 600 notebooks/; \
	else echo "no notebooks yet"; fi

# papermill in CI: every notebook at the ci size with -p seed 1 (two at a time) into runs/book/executed/,
# each checked (finished, no errors, check cells print the committed statements up to the numbers),
# then the book built from those executed copies. nbval (above) validates the committed outputs.
BOOK_EXEC := runs/book/executed
test-papermill: venv
	@if ! $(HAVE_FMNIST); then echo "SKIPPED papermill: Fashion-MNIST is not on disk (make data)"; \
	else OMP_NUM_THREADS=1 $(PY) notebooks/book/execute.py --jobs 2 -p seed 1 --out $(BOOK_EXEC) || exit 1; \
	  if $(HAVE_MATHJAX); then $(PY) notebooks/book/build.py --notebooks $(BOOK_EXEC) || exit 1; \
	  else echo "SKIPPED the book build: Debian's libjs-mathjax and fonts-mathjax are not installed (make sysdeps)"; fi; fi

# The book (runs/book/html/index.html), offline, warnings as errors: from the committed notebooks as
# they are, or with EXECUTE=1 from copies that papermill executes first at the ci size.
EXECUTE ?= 0
book: venv
	@if [ "$(EXECUTE)" = 1 ]; then \
	  OMP_NUM_THREADS=1 $(PY) notebooks/book/execute.py --jobs 2 -p seed 1 --out $(BOOK_EXEC) && \
	  $(PY) notebooks/book/build.py --notebooks $(BOOK_EXEC); \
	else $(PY) notebooks/book/build.py; fi

# JupyterLab on the notebooks; jupytext pairs NN_slug.ipynb and NN_slug.py (jupytext.toml): edit either.
lab: venv
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# Regenerate the committed figures with the `cpu` profile, the regime rerun of issue 28
# (lab/regime/rerun.yaml, figures/regime/rerun_plan.md): first the tuning of every method on the plan's
# tuning split (held-out samples; resumable), then every run of the plan, two at a time, the runs whose
# models an analysis reads last (keep runs/ for the notebooks: they read those models), then the
# notebooks in the order of lab.evidence.budget.RUN_ORDER, which read the runs' records (one client per
# core where a notebook still trains). Every finished run is written to figures/records/ at once: commit
# them as they come (a rerun, here or on another machine, skips every committed run). `make figures ONLY="04 05"`
# runs only those notebooks (after the same tuning and training): the ones whose committed figures are older.
# nproc answers OMP_NUM_THREADS when it is set (`OMP_NUM_THREADS=1 make figures` would train one run at a time)
CORES ?= $(shell env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
figures: venv data
	OMP_NUM_THREADS=1 FEDLAB_RUNS=$(CURDIR)/runs $(PY) -m lab regime rerun-tune --client-threads $(CORES)
	OMP_NUM_THREADS=1 FEDLAB_RUNS=$(CURDIR)/runs $(PY) -m lab regime rerun-train --workers $(CORES)
	@for base in $$($(PY) -c "import sys; from lab.evidence.budget import RUN_ORDER; only = sys.argv[1:]; \
	    print(' '.join(n for n in RUN_ORDER if not only or n.split('_')[0] in only))" $(ONLY)); do \
	  params=notebooks/params/$$base.cpu.yaml; \
	  threads=$$(grep -q '^client_threads = ' notebooks/$$base.py && echo "-p client_threads $(CORES)"); \
	  echo "== $$base ($$params $$threads)"; \
	  OMP_NUM_THREADS=1 FEDLAB_RUNS=$(CURDIR)/runs $(PY) -m papermill notebooks/$$base.ipynb runs/figures/$$base.ipynb -f $$params $$threads \
	    -k python3 --cwd notebooks --execution-timeout 7200 --no-progress-bar --log-level WARNING || exit 1; \
	done
	$(PY) -m lab claims --write

# What `make figures` would cost (runs x rounds x measured per-round cost, minus committed records),
# and the papers' claims evaluated from the committed results (writes figures/claims_cpu.{md,csv}).
figures-dry-run: venv
	OMP_NUM_THREADS=1 $(PY) -m lab figures --dry-run

claims: venv
	$(PY) -m lab claims --write

bench: venv data
	$(PY) -m lab bench --algorithms all

# The step guard: ms per local step, fedlab's engine vs the plain PyTorch loop (FedAvg, FedSAM; mlp, cnn,
# resnet18_gn), taking turns in pairs (lab.bench.step); JSON in runs/bench/.
bench-step: venv
	@mkdir -p runs/bench
	$(PY) -m lab bench step --json runs/bench/step.json

# What client states on disk cost: ms per client of a round's state traffic, in RAM vs on disk (lab.bench.store).
bench-store: venv
	$(PY) -m lab bench store

# Execution modes side by side (conventional loop, sequential, vmap, auto, client threads, NHWC, bf16);
# JSON in runs/bench/. bench-amp: what bf16 does to accuracy (FedAvg, FedSAM; 50 rounds on Fashion-MNIST).
bench-speed: venv data
	@mkdir -p runs/bench
	$(PY) -m lab bench --speed --models cnn --rounds 6 --json runs/bench/speed_cnn.json

bench-amp: venv data
	@mkdir -p runs/bench
	$(PY) -m lab bench --amp-check --json runs/bench/amp_check.json

# Wall time of a 16-run sweep sequential vs a local process pool vs Ray (lab.bench.sweep).
bench-sweep: venv data
	@mkdir -p runs/bench
	$(PY) -m lab bench sweep --json runs/bench/sweep.json

clean-runs:
	rm -rf runs
