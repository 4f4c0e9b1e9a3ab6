# outbox-relay — build, test, demo, bench.
#
#   make            build/outbox-relay (optimised, -Werror); without the -dev
#                   packages, the apt-get line that installs them
#   make -j2        the same, two compilers at once: objects in build/obj/ (and
#                   build/asan/obj/), each rebuilt only when its source or a
#                   header it includes changed (-MMD -MP)
#   make test       install what is missing (as root), build with ASan+UBSan, run every suite
#   make demo       throwaway PostgreSQL + receiver + relay delivering real intents
#   make demo-mcp   the same behind the MCP front door, an official SDK client, lost answers
#   make bench      throughput, latency and memory figures (build/bench.json)
#   make bench-peers  the relay beside graphile-worker, same PostgreSQL and nginx
#   make soak       20 min steady load, faults, relays killed, retention: flat or not
#   make lint       clang-format check, cppcheck, banned calls
#   make docs-options  docs/options.md from outbox-relay --help
#   make clean

CC       ?= cc
PKGS     := libpq libcurl libuv jansson libcrypto gmp
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wvla -Wstrict-prototypes \
            -Wmissing-prototypes -Wformat=2 -Wimplicit-fallthrough
BASE     := -std=c11 -D_GNU_SOURCE $(WARN) -g
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lhttp_parser -lm
SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

DEPFLAGS := -MMD -MP

# The floors of relay/ (HACKING.md): lib/ (no outbox knowledge), admin/ (the
# admin port and status page), cli/ (blocking libpq allowed), the daemon in
# relay/ itself. The unit tests mirror them under tests/unit/.
RELAY_DIRS := relay relay/lib relay/admin relay/cli relay/mcp
RELAY_SRC := $(filter-out relay/main.c,$(foreach d,$(RELAY_DIRS),$(wildcard $(d)/*.c)))
RELAY_HDR := $(foreach d,$(RELAY_DIRS),$(wildcard $(d)/*.h))
UNIT_SRC  := $(foreach d,tests/unit tests/unit/lib tests/unit/admin tests/unit/mcp,$(wildcard $(d)/test_*.c))
C_FILES   := $(foreach d,$(RELAY_DIRS),$(wildcard $(d)/*.[ch])) $(wildcard tests/unit/*.[ch]) \
             $(UNIT_SRC) $(wildcard tests/receiver/*.c tests/inbox/*.c tests/mcp/*.c)
# The test receivers are built on the relay's HTTP server (relay/lib/http_server.c).
HTTPD_SRC := relay/lib/http_server.c relay/lib/strbuf.c

.PHONY: all deps build-deps unit-deps test unit demo demo-mcp bench soak lint cppcheck format format-check schema clean

all: build/outbox-relay

deps:
	@tests/lib/install-deps.sh

# Before any compiler runs: what compiling needs is there, or the one
# apt-get line that installs it (tests/lib/install-deps.sh --build --print).
build-deps:
	@pkg-config --exists $(PKGS) 2>/dev/null && test -f /usr/include/http_parser.h || \
	    tests/lib/install-deps.sh --build --print

# The unit tests need Check as well.
unit-deps:
	@pkg-config --exists check 2>/dev/null || tests/lib/install-deps.sh --build --print

# Objects: build/obj/<source>.o optimised, build/asan/obj/<source>.o with the
# sanitizers; the .d files beside them list the headers each one read.
obj      = $(patsubst %.c,build/obj/%.o,$(1))
asan_obj = $(patsubst %.c,build/asan/obj/%.o,$(1))
UNIT_CFLAGS = $(shell pkg-config --cflags check)

build/obj/%.o: %.c | build-deps
	@mkdir -p $(@D)
	$(CC) $(BASE) -O2 $(DEPFLAGS) -Irelay $(PKG_CFLAGS) -c $< -o $@

build/asan/obj/%.o: %.c | build-deps
	@mkdir -p $(@D)
	$(CC) $(BASE) -O1 $(SAN) $(DEPFLAGS) -Irelay $(PKG_CFLAGS) $(if $(filter tests/unit/%,$<),$(UNIT_CFLAGS)) \
	    -c $< -o $@

build/outbox-relay: $(call obj,relay/main.c $(RELAY_SRC))
	$(CC) $^ -o $@ $(PKG_LIBS)

build/asan/outbox-relay: $(call asan_obj,relay/main.c $(RELAY_SRC))
	$(CC) $(SAN) $^ -o $@ $(PKG_LIBS)

$(call asan_obj,$(UNIT_SRC)): | unit-deps

build/asan/unit-tests: $(call asan_obj,$(UNIT_SRC) $(RELAY_SRC))
	$(CC) $(SAN) $^ -o $@ $(PKG_LIBS) $(shell pkg-config --libs check)

# The official JSON Schema test suite against the validator of the MCP front
# door (tests/mcp/schema_suite.sh); sanitizers on, like every test binary.
build/schema-suite: $(call asan_obj,tests/mcp/schema_suite.c $(wildcard relay/mcp/json_schema*.c) \
                        relay/lib/json_text.c)
	$(CC) $(SAN) $^ -o $@ $(shell pkg-config --libs jansson gmp) -lm
-include build/asan/obj/tests/mcp/schema_suite.d

build/test-receiver: $(call obj,tests/receiver/receiver.c $(HTTPD_SRC))
	$(CC) $^ -o $@ $(shell pkg-config --libs libuv jansson) -lhttp_parser

build/asan/test-receiver: $(call asan_obj,tests/receiver/receiver.c $(HTTPD_SRC))
	$(CC) $(SAN) $^ -o $@ $(shell pkg-config --libs libuv jansson) -lhttp_parser

# The example receiver of the inbox helper (schema/inbox.sql): httpd on the
# loop, each transaction in libuv's thread pool with blocking libpq.
build/inbox-receiver: $(call obj,tests/inbox/inbox_receiver.c $(HTTPD_SRC))
	$(CC) $^ -o $@ $(shell pkg-config --libs libpq libuv) -lhttp_parser

# The bench's arrival clock (tests/bench/run.sh: trickle).
build/bench/stamp_receiver: $(call obj,tests/bench/stamp_receiver.c $(HTTPD_SRC))
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(shell pkg-config --libs libuv) -lhttp_parser

ALL_OBJ := $(call obj,relay/main.c $(RELAY_SRC) tests/receiver/receiver.c \
               tests/inbox/inbox_receiver.c tests/bench/stamp_receiver.c) \
           $(call asan_obj,relay/main.c $(RELAY_SRC) $(UNIT_SRC) tests/receiver/receiver.c)
-include $(ALL_OBJ:.o=.d)

# Everything a test run needs, sanitizers on.
test: deps
	@$(MAKE) --no-print-directory build/outbox-relay build/test-receiver build/asan/outbox-relay \
	    build/asan/test-receiver build/asan/unit-tests build/inbox-receiver build/schema-suite fuzz-build
	@tests/run.sh

unit: deps build/asan/unit-tests
	build/asan/unit-tests

demo: deps
	@$(MAKE) --no-print-directory build/outbox-relay build/test-receiver
	@tests/demo.sh

# The MCP front door: an SDK client through a network that loses answers.
demo-mcp: deps
	@$(MAKE) --no-print-directory build/outbox-relay build/test-receiver
	@tests/demo_mcp.sh

bench: deps
	@$(MAKE) --no-print-directory build/outbox-relay build/test-receiver
	@tests/bench/run.sh

# The relay beside graphile-worker 0.18 (tuned), same PostgreSQL and nginx,
# alternating pairs, the ratio (tests/bench/peers.sh; PEERS_INTENTS,
# PEERS_PAIRS); npm ci of tests/bench/peers; not in make test.
.PHONY: bench-peers
bench-peers: deps
	@$(MAKE) --no-print-directory build/outbox-relay
	@tests/bench/peers.sh

# What one delivered intent writes (pg_walinspect) and costs in backend CPU
# under today's schema and the queue-table designs (tests/bench/designs/;
# DESIGNS_ROUNDS, DESIGNS_N, DESIGNS); not in make test.
.PHONY: bench-designs
bench-designs: deps
	@$(MAKE) --no-print-directory build/outbox-relay
	@tests/bench/designs/run.sh

# 20 minutes at half the drain rate with faults, killed relays and 1-minute
# retention (tests/soak/soak.sh; SOAK_MINUTES, SOAK_KILL_EVERY_S); not in make test.
soak: deps
	@$(MAKE) --no-print-directory build/outbox-relay build/test-receiver
	@tests/soak/soak.sh

# Mutation testing (tests/mutants/run.sh): every mutation in tests/mutants/mutations,
# applied to a copy of the working tree, must be caught by the tests it names.
# Not part of make test. MUTANT=text runs the mutations whose name contains text.
.PHONY: mutants
mutants: deps
	@$(MAKE) --no-print-directory build/outbox-relay build/test-receiver build/asan/outbox-relay \
	    build/asan/unit-tests
	@tests/mutants/run.sh

schema:
	tests/lib/schema-file.sh

# docs/options.md from the binary's --help (the lint suite checks they agree).
.PHONY: docs-options
docs-options: build/outbox-relay
	tests/lib/options-doc.py --write

format:
	clang-format -i $(sort $(C_FILES))

format-check:
	@clang-format --dry-run --Werror $(sort $(C_FILES)) && echo "format: ok"

lint: format-check cppcheck
	@tests/lib/banned-calls.sh

# Static analysis of every C file of the project (also run by make test's lint suite).
cppcheck:
	@cppcheck --quiet --error-exitcode=1 --enable=warning,portability --std=c11 \
	    --suppress=missingIncludeSystem relay/ tests/receiver/ tests/inbox/ tests/bench/ tests/unit/ \
	    && echo "cppcheck: ok"

clean:
	rm -rf build

# ---- fuzzing (tests/fuzz/README.md) --------------------------------- begin fuzz block
# libFuzzer targets tests/fuzz/fuzz_<name>.c, built with clang and
# -fsanitize=fuzzer,address,undefined against the relay sources (not main.c,
# not the daemon's relay*.c; a static archive, so each target links only what
# it calls).
#   make fuzz-build                  build/fuzz/fuzz_<name> for every target
#   make fuzz [FUZZ_SECONDS=60]      run each target that long (tests/fuzz/run.sh)
#   make fuzz-<name> [FUZZ_SECONDS=] one target, corpus kept in build/fuzz/corpus/<name>
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS    := $(FUZZ_NAMES:%=build/fuzz/fuzz_%)
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_LIB_SRC := $(filter-out relay/main.c relay/relay.c relay/relay_%.c,$(RELAY_SRC))
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:relay/%.c=build/fuzz/obj/%.o)
# The admin port's deadlines, short, so that no input waits seconds.
FUZZ_ADMIN_DEFS := -DADMIN_IDLE_TIMEOUT_MS=200 -DADMIN_LOOKUP_TIMEOUT_MS=20 \
    -DADMIN_WAIT_MAX_MS=40 -DADMIN_RECHECK_MS=10 -DADMIN_WRITE_TIMEOUT_MS=200 \
    -DADMIN_DRAIN_TIMEOUT_MS=20

.PHONY: fuzz fuzz-build $(FUZZ_NAMES:%=fuzz-%)

fuzz-build: $(FUZZ_BINS)

fuzz: deps fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh

$(FUZZ_NAMES:%=fuzz-%): fuzz-%: build/fuzz/fuzz_%
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh $*

build/fuzz/obj/%.o: relay/%.c | build/fuzz/obj
	@mkdir -p $(@D)
	$(FUZZ_CC) $(BASE) $(DEPFLAGS) -O1 -fsanitize=fuzzer-no-link $(FUZZ_SAN) \
	    $(if $(filter admin/admin,$*),$(FUZZ_ADMIN_DEFS)) -Irelay $(PKG_CFLAGS) -c $< -o $@

build/fuzz/librelay.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h build/fuzz/librelay.a $(RELAY_HDR)
	$(FUZZ_CC) $(BASE) -O1 -fsanitize=fuzzer $(FUZZ_SAN) -Irelay $(PKG_CFLAGS) \
	    $< build/fuzz/librelay.a -o $@ $(PKG_LIBS)

build/fuzz/obj:
	@mkdir -p $@

-include $(FUZZ_LIB_OBJ:.o=.d)
# ---- end fuzz block ---------------------------------------------------------------------

# ---- model checking (tests/model/README.md) ------------------------------ begin model block
# The delivery protocol (claim, lease, deliver, record, take-over, reconcile)
# as a SPIN model: every property on every reachable state, and seeded bugs
# that must be caught. 30 to 60 s on 2 cores; also the suite "model" of make test.
#   make model                                  tests/model/run.sh
#   make model MODEL_DEFINES="-DSLOWS=2"        a deeper search (minutes)
.PHONY: model

model: deps
	@MODEL_DEFINES="$(MODEL_DEFINES)" tests/model/run.sh
# ---- end model block ---------------------------------------------------------------------
