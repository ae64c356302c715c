# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ASSAY := $(VENV)/bin/assay
STORE ?= runs/demo

.PHONY: env-robosuite demo report serve lint semantic-profile libero-plus libero-plus-shift flywheel flywheel-confirm flywheel-rare-pilot flywheel-pixel-pilot flywheel-rare libero-zoo libero-zoo-state test test-extended test-fast test-ray test-postgres test-interop test-libero bench bench-scale sequential-evidence twin-blind twin-smoke install install-test clean zoo

# System libraries: OSMesa renders camera observations on CPU-only machines (MuJoCo, MUJOCO_GL=osmesa);
# Mesa's EGL (libegl1, libegl-mesa0) lets the tests check EGL's pixels against OSMesa's on the CPU (on a GPU
# host, NVIDIA's driver brings its own EGL and Assay picks MUJOCO_GL=egl by itself).
SYSTEM_READY := $(VENV)/.system

$(SYSTEM_READY):
	@mkdir -p $(VENV)
	@ldconfig -p 2>/dev/null | grep -q libOSMesa || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libosmesa6; \
		else echo "camera rendering needs libOSMesa: sudo apt-get install libosmesa6"; fi; }
	@ldconfig -p 2>/dev/null | grep -q libEGL_mesa || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libegl1 libegl-mesa0; \
		else echo "the EGL rendering tests need Mesa's EGL: sudo apt-get install libegl1 libegl-mesa0"; fi; }
	@touch $@

$(VENV)/.installed: pyproject.toml $(SYSTEM_READY)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test,gymnasium-plugins]'
	# The real openpi client, to prove wire compatibility. Its metadata pins numpy<2; it works with ours.
	$(PY) -m pip install -q --no-deps openpi-client==0.1.2
	@# The PostgreSQL catalog tier (tests/test_postgres.py) starts Debian's server on loopback.
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; }
	@# The browser tier (tests/test_browser*.py, tests/test_figure_layout.py) drives Debian's chromium through
	@# Playwright; the report's SVG text is drawn in DejaVu Sans, the font Matplotlib measured it with.
	@test -x /usr/bin/chromium && test -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium fonts-dejavu-core; }
	touch $@

# The LIBERO backend (assay[libero]) for its test tier: the hash-pinned packages, then their ordinary deps.
$(VENV)/.installed-libero: $(VENV)/.installed-test requirements/libero.lock
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements/libero.lock
	$(PY) -m pip install -q -e '.[libero]'
	touch $@

install: $(VENV)/.installed

# robosuite 1.5's own environment (issue 52): it conflicts with LIBERO's robosuite 1.4, so its tasks run only on a
# served simulator (`assay serve-sim robosuite` starts from this venv). Every package hash-pinned; Assay's own code is
# linked in by a .pth file (no build step). 22 wheels (~340 MB; 1.3 GB installed), 1 min 24 s from pip's cache here.
ROBOSUITE_VENV ?= .venv-robosuite
$(ROBOSUITE_VENV)/.installed: requirements/robosuite.lock
	$(PYTHON) -m venv $(ROBOSUITE_VENV)
	$(ROBOSUITE_VENV)/bin/python -m pip install -q --no-deps --require-hashes -r requirements/robosuite.lock
	$(ROBOSUITE_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" | \
		xargs -I{} sh -c 'echo "$(CURDIR)/src" > {}/assay-checkout.pth'
	touch $@

env-robosuite: $(ROBOSUITE_VENV)/.installed

# Lint and type checks (configured in pyproject.toml); CI runs them before the tests.
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy
install-test: $(VENV)/.installed-test $(VENV)/.installed-libero $(ROBOSUITE_VENV)/.installed

demo: install
	$(ASSAY) run examples/quickstart.yaml --store $(STORE) --workers 2
	$(ASSAY) results --store $(STORE) --campaign quickstart --profile
	$(ASSAY) compare expert shaky-expert --store $(STORE) --campaign quickstart --variant nominal
	@# Real-to-sim: a reality proxy (examples/reality-proxy.yaml) stands in for a real robot's success counts.
	$(ASSAY) run examples/reality-proxy.yaml --store $(STORE) --workers 2
	$(ASSAY) results --store $(STORE) --campaign reality-proxy --csv $(STORE)/reality-proxy.csv
	$(ASSAY) correlate --real $(STORE)/reality-proxy.csv --campaign quickstart:nominal --store $(STORE) --record
	$(ASSAY) failures mine --store $(STORE) --campaign quickstart
	@# One noise draw per probe keeps the demo under 3 minutes (the command defaults to 3 under a noisy variant).
	$(ASSAY) failures ponr --store $(STORE) --campaign quickstart --policy shaky-expert --limit 2 --draws 1
	$(ASSAY) regress add shaky --from quickstart --policy shaky-expert --store $(STORE)
	$(ASSAY) regress run shaky --policy expert --store $(STORE)
	$(ASSAY) openloop --store $(STORE) --campaign quickstart --reference expert
	$(ASSAY) report quickstart --store $(STORE) -o $(STORE)/quickstart.html
	@echo "Open $(STORE)/quickstart.html, or browse the store: $(ASSAY) serve --store $(STORE)"

# The semantic robustness experiment of docs/RESULTS.md: nominal-instruction demos, BC conditioned on the
# instruction's MiniLM embedding, evaluated beside the router and the expert under every semantic factor.
semantic-profile: install-test
	$(ASSAY) semantic-profile --demos 25 --episodes 5 --workers 2 --store runs/semantic --report runs/semantic/semantic.html

# The demo campaign as one self-contained HTML file, and the live dashboard over the demo store.
report: install
	$(ASSAY) report quickstart --store $(STORE) -o $(STORE)/quickstart.html

serve: install
	$(ASSAY) serve --store $(STORE) --campaigns examples

# Two pytest processes: the multi-node Ray cluster tests run in one of their own (a local Ray session earlier in
# the same process leaves state behind that kills a later cluster's actors). The first runs on TEST_WORKERS
# pytest-xdist workers, each test file in one worker, every file with a Ray test in the same one
# (tests/conftest.py's scheduler); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: install-test
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not ray_cluster and not extended" --durations=40
	$(PY) -m pytest -q -m "ray_cluster and not extended" --durations=10

# The slowest known-answer tiers, kept out of make test's 30 minutes (pyproject.toml's `extended` marker).
test-extended: install-test
	$(PY) -m pytest -q -m extended

# The fast core tier: no simulator is built (tests/conftest.py refuses one under ASSAY_TEST_TIER=fast, in the
# test process and in every process it spawns), no Ray, no PostgreSQL, nothing slow.
FAST_TIER := not slow and not sim and not libero and not ray and not postgres and not chaos and not interop
test-fast: install-test
	ASSAY_TEST_TIER=fast $(PY) -m pytest -q -m "$(FAST_TIER)"

test-libero: install-test
	$(PY) -m pytest -q -m libero

test-ray: install-test
	$(PY) -m pytest -q -m "ray and not ray_cluster"
	$(PY) -m pytest -q -m ray_cluster

test-postgres: install-test
	$(PY) -m pytest -q -m "postgres" tests/test_postgres.py

# The real lerobot reads our LeRobotDataset export and trains and runs its ACT policy on it. lerobot lives in its
# own environment (about 8 GB), never in Assay's: lerobot 0.4.4 with its own dependencies, inside its own pins
# (torch 2.10.0, torchvision 0.25.0, torchcodec 0.10.0, diffusers, opencv, imageio, pyserial...), frozen in
# tests/interop/constraints.txt, and Debian's ffmpeg for torchcodec.
INTEROP_VENV ?= .venv-interop
$(INTEROP_VENV)/.installed: tests/interop/constraints.txt pyproject.toml
	@command -v ffmpeg >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ffmpeg; }
	$(PYTHON) -m venv $(INTEROP_VENV)
	$(INTEROP_VENV)/bin/pip install -q -c tests/interop/constraints.txt lerobot==0.4.4 torch==2.10.0 \
		torchvision==0.25.0 torchcodec==0.10.0
	@# Assay itself, so `assay serve-policy lerobot` serves a trained lerobot policy from this environment.
	$(INTEROP_VENV)/bin/pip install -q -c tests/interop/constraints.txt -e .
	$(INTEROP_VENV)/bin/pip check
	touch $@

test-interop: install-test $(INTEROP_VENV)/.installed
	ASSAY_INTEROP_PYTHON=$(INTEROP_VENV)/bin/python $(PY) -m pytest -q -m interop tests/test_export_interop.py \
		tests/test_libero_interop.py

# The flywheel experiment (issue 21, docs/RESULTS.md): base BC on a slice of the workspace; random, targeted
# (from failure mining), DAgger-relabel and oracle arms at an equal budget; 5 replicates, about 4 minutes on 2
# cores; a rerun resumes every episode and checkpoint. The report of any of its campaigns shows the section.
# flywheel-confirm: the confirmatory design (28 new replicates; 10-23 minutes on 2 cores, by load).
FLYWHEEL_STORE ?= runs/flywheel
flywheel: install-test
	$(ASSAY) budget --delta 0.10 --power 0.8 --paired --baseline 0.7
	$(ASSAY) flywheel --design examples/flywheel/push-goal-slice.yaml --store $(FLYWHEEL_STORE) --workers 2

flywheel-confirm: install-test
	$(ASSAY) flywheel --design examples/flywheel/push-goal-slice-confirm.yaml --store $(FLYWHEEL_STORE) --workers 2

# Issue 43 (docs/RESULTS.md): rare-gap pilot 1 (3 replicates; goal x >= 0.07 unseen by the base) and the
# pixel-policy pilots (button-press-topdown, light 0.3, then 0.1, unseen by the base; pixel BC on a 64 px camera).
flywheel-rare-pilot: install-test
	$(ASSAY) flywheel --design examples/flywheel/push-goal-rare-gap-pilot.yaml --store $(FLYWHEEL_STORE) --workers 2

flywheel-pixel-pilot: install-test
	$(ASSAY) flywheel --design examples/flywheel/button-light-pixel-pilot.yaml --store $(FLYWHEEL_STORE) --workers 2
	$(ASSAY) flywheel --design examples/flywheel/button-dark-pixel-pilot.yaml --store $(FLYWHEEL_STORE) --workers 2

# The declared rare-gap run (30 replicates; nominal + object.init_range 1.3, base on nominal; 38 minutes on 2 cores
# beside other jobs) and its pilot 2 (23 minutes).
flywheel-rare: install-test
	$(ASSAY) flywheel --design examples/flywheel/push-range-rare-gap-pilot.yaml --store $(FLYWHEEL_STORE) --workers 2
	$(ASSAY) flywheel --design examples/flywheel/push-range-rare-gap.yaml --store $(FLYWHEEL_STORE) --workers 2

# LIBERO-Plus's seven categories (docs/LIBERO.md): the scripted expert's demos on LIBERO-Object's soup task (the agent
# view recorded at every step), a state BC and a pixel BC trained on them, and the three policies' per-category
# retention on held-out initial states (about 2 hours on 2 cores: every frame is rasterised on the CPU).
LIBERO_PLUS_STORE ?= runs/libero-plus
libero-plus: install-test
	$(ASSAY) run examples/libero_plus_demos.yaml --store $(LIBERO_PLUS_STORE) --workers 1
	$(ASSAY) train-bc --data campaign=libero-plus-demos --store $(LIBERO_PLUS_STORE) --out $(LIBERO_PLUS_STORE)/bc.pt \
		--epochs 200 --conditioning instruction
	$(ASSAY) train-bc --obs image+proprio --camera agentview --data campaign=libero-plus-demos \
		--store $(LIBERO_PLUS_STORE) --out $(LIBERO_PLUS_STORE)/pix.pt --epochs 30 --conditioning instruction
	$(ASSAY) run examples/libero_plus.yaml --store $(LIBERO_PLUS_STORE) --workers 2
	$(ASSAY) results --store $(LIBERO_PLUS_STORE) --campaign libero-plus-soup --profile

# The declared second attempt (docs/LIBERO.md): the pixel BC retrained on the same demos, 200 epochs with random
# shifts; needs make libero-plus's demos. ~10 min training and ~10 min evaluation on 2 cores.
libero-plus-shift: install-test
	$(ASSAY) train-bc --obs image+proprio --camera agentview --data campaign=libero-plus-demos \
		--store $(LIBERO_PLUS_STORE) --out $(LIBERO_PLUS_STORE)/pix-shift.pt --epochs 200 --augment shift \
		--conditioning instruction
	$(ASSAY) run examples/libero_plus_shift.yaml --store $(LIBERO_PLUS_STORE) --workers 2
	$(ASSAY) results --store $(LIBERO_PLUS_STORE) --campaign libero-plus-soup-shift --profile

# The graded LIBERO zoo (docs/LIBERO.md, "Learned policies"): the scripted expert's demos on initial states 0-19 of
# three LIBERO-Object and three LIBERO-Spatial tasks (the 64 px agent view recorded at every step for the pixel
# members), four state and two pixel BC checkpoints of graded skill, each evaluated on initial states 20-49
# (the best of each kind, state-20 and pixel-20, on 30 per task, never trained on; the others on 20-29 only: a
# pixel step costs ~3x a state step here, docs/PERFORMANCE.md) and graded: the best pixel member must reach 40%,
# the best state member 70% (measured 2026-12-06: pixel-20 0.79 passes; state-20 0.67 fails, so the target exits 1).
# Hours on 2 CPU cores (every frame is rasterised on the CPU); every step resumes.
LIBERO_ZOO_STORE ?= runs/libero-zoo
LIBERO_ZOO_EPISODES ?= 30
libero-zoo: install-test
	$(ASSAY) zoo build --preset libero --store $(LIBERO_ZOO_STORE) --out $(LIBERO_ZOO_STORE)/zoo --workers 2
	$(ASSAY) zoo campaign $(LIBERO_ZOO_STORE)/zoo -o $(LIBERO_ZOO_STORE)/state-best.yaml --name libero-zoo-state-best \
		--kind state --members state-20 --episodes $(LIBERO_ZOO_EPISODES)
	$(ASSAY) run $(LIBERO_ZOO_STORE)/state-best.yaml --store $(LIBERO_ZOO_STORE) --workers 2
	$(ASSAY) zoo campaign $(LIBERO_ZOO_STORE)/zoo -o $(LIBERO_ZOO_STORE)/state-10.yaml --name libero-zoo-state-10 \
		--kind state --episodes 10
	$(ASSAY) run $(LIBERO_ZOO_STORE)/state-10.yaml --store $(LIBERO_ZOO_STORE) --workers 2
	$(ASSAY) zoo campaign $(LIBERO_ZOO_STORE)/zoo -o $(LIBERO_ZOO_STORE)/pixel.yaml --name libero-zoo-pixel --kind pixel \
		--members pixel-20 --no-expert --episodes $(LIBERO_ZOO_EPISODES)
	$(ASSAY) run $(LIBERO_ZOO_STORE)/pixel.yaml --store $(LIBERO_ZOO_STORE) --workers 2
	$(ASSAY) zoo campaign $(LIBERO_ZOO_STORE)/zoo -o $(LIBERO_ZOO_STORE)/pixel5.yaml --name libero-zoo-pixel-5 --kind pixel \
		--members pixel-5 --no-expert --episodes 10
	$(ASSAY) run $(LIBERO_ZOO_STORE)/pixel5.yaml --store $(LIBERO_ZOO_STORE) --workers 2
	$(ASSAY) zoo grade $(LIBERO_ZOO_STORE)/zoo --campaign libero-zoo-pixel --store $(LIBERO_ZOO_STORE) --min pixel=0.4
	$(ASSAY) zoo grade $(LIBERO_ZOO_STORE)/zoo --campaign libero-zoo-state-best --store $(LIBERO_ZOO_STORE) --min state=0.7

# The state member on 50 demos per task (examples/libero_zoo/state-50-design.md): 20 fixed-state and 30
# sampled-layout demos, no camera; graded on the same held-out initial states 20-49 (about 40 minutes on 2 cores).
libero-zoo-state: install-test
	$(ASSAY) zoo build --preset libero-state --store $(LIBERO_ZOO_STORE) --out $(LIBERO_ZOO_STORE)/zoo-state --workers 2
	$(ASSAY) zoo campaign $(LIBERO_ZOO_STORE)/zoo-state -o $(LIBERO_ZOO_STORE)/state-50.yaml --name libero-zoo-state-50 \
		--kind state --members state-50 --no-expert --episodes $(LIBERO_ZOO_EPISODES)
	$(ASSAY) run $(LIBERO_ZOO_STORE)/state-50.yaml --store $(LIBERO_ZOO_STORE) --workers 2
	$(ASSAY) zoo grade $(LIBERO_ZOO_STORE)/zoo-state --campaign libero-zoo-state-50 --store $(LIBERO_ZOO_STORE) --min state=0.7

# The policy zoo (docs/RESULTS.md): camera demos, six pixel BC checkpoints on three tasks, their nominal
# evaluation with open- vs closed-loop, and their visual robustness profile beside the state expert.
ZOO_STORE ?= runs/zoo
ZOO_EPISODES ?= 20
ZOO_VISUAL_EPISODES ?= 10
ZOO_VISUAL_TASKS ?= metaworld/reach@1,metaworld/button-press-topdown@1
zoo: install-test
	$(ASSAY) zoo build --store $(ZOO_STORE) --out $(ZOO_STORE)/zoo/main --workers 2
	$(ASSAY) zoo campaign $(ZOO_STORE)/zoo/main -o $(ZOO_STORE)/zoo-nominal.yaml --name zoo-nominal --episodes $(ZOO_EPISODES)
	$(ASSAY) run $(ZOO_STORE)/zoo-nominal.yaml --store $(ZOO_STORE) --workers 2
	$(ASSAY) openloop --store $(ZOO_STORE) --campaign zoo-nominal --reference expert
	$(ASSAY) report zoo-nominal --store $(ZOO_STORE) --baseline expert -o $(ZOO_STORE)/zoo-nominal.html
	$(ASSAY) zoo campaign $(ZOO_STORE)/zoo/main -o $(ZOO_STORE)/zoo-visual.yaml --name zoo-visual --visual \
		--episodes $(ZOO_VISUAL_EPISODES) --tasks $(ZOO_VISUAL_TASKS)
	$(ASSAY) run $(ZOO_STORE)/zoo-visual.yaml --store $(ZOO_STORE) --workers 2
	$(ASSAY) results --store $(ZOO_STORE) --campaign zoo-visual --profile
	$(ASSAY) report zoo-visual --store $(ZOO_STORE) --baseline expert -o $(ZOO_STORE)/zoo-visual.html

bench-scale: install-test
	$(PY) benchmarks/eval_throughput.py

bench: install
	$(PY) benchmarks/throughput.py

sequential-evidence: install
	$(PY) benchmarks/sequential_evidence.py

# Blind twin attribution over six hidden realities (docs/TWIN.md; about 40 min on 2 cores).
# The twin protocol's blind smoke tier (issue 55): eight hidden realities (two controls) at 1 lab episode per
# policy and 60 sysid replays, about 2.5 CPU-minutes; exit 1 unless each is named exactly (docs/TWIN.md).
twin-smoke: install
	$(PY) benchmarks/twin_blind.py --out runs/twin-smoke --set smoke --episodes 1 --evaluations 60 --resamples 200 \
		--rendering-steps 10 --jobs 2 --check

twin-blind: install
	$(PY) benchmarks/twin_blind.py --out runs/twin-blind --set a
	$(PY) benchmarks/twin_blind.py --out runs/twin-blind --set b

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
