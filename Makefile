# The two commands of the README. Both create .venv and install the project
# from its own files, so they work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): setup.cfg setup.py pyproject.toml constraints.txt $(wildcard trainvisor/*/*.c trainvisor/*/*.h)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,frameworks]'
	$(PY) -m compileall -q trainvisor >/dev/null  # an editable install is not byte-compiled: start-up pays for it otherwise
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m trainvisor.demo

# What programs print depends on these variables (Rich and tqdm read the width, colour and
# terminal; Python the encoding and locale; Caffe timestamps the zone): the suite runs with
# none of them inherited, as on a new user's machine, and a test that needs one sets it.
CLEAN_ENV := env -u COLUMNS -u LINES -u TERM -u NO_COLOR -u FORCE_COLOR -u CLICOLOR -u CLICOLOR_FORCE \
	-u TTY_COMPATIBLE -u TTY_INTERACTIVE -u PYTHONIOENCODING -u PYTHONUTF8 -u LANGUAGE -u LC_ALL \
	-u LC_CTYPE -u LC_NUMERIC -u LC_TIME -u LC_MESSAGES -u TZ -u KERAS_BACKEND LANG=C.UTF-8

# A private temp dir per run (removed after): concurrent runs never share one.
test: $(STAMP)
	@tmp=$$(mktemp -d -t trainvisor-tests-XXXXXX); \
	$(CLEAN_ENV) $(PY) -m pytest -q --durations=20 --basetemp="$$tmp"; rc=$$?; rm -rf "$$tmp"; exit $$rc

bench: $(STAMP)
	$(PY) bench/parse_throughput.py
	$(PY) bench/passthrough.py
	$(PY) bench/log_handler.py
	$(PY) bench/parse_mixed.py
	$(PY) bench/checkpoint_latency.py
	$(PY) bench/upload_throughput.py
	$(PY) bench/startup.py
	$(PY) bench/pytest_plugin.py
	$(PY) bench/ava_import.py
	$(PY) bench/tail_latency.py
	$(PY) bench/every_sink.py
	$(PY) bench/pathological.py

clean:
	rm -rf $(VENV) trainvisor-runs build *.egg-info
