# deltallm — GNU make build. Objects go to build/ (release), build/asan/ (sanitizers), build/fuzz/.
#
#   make            build/deltallm
#   make run        run the main job (MODEL=path.gguf PROMPT="..." N=64; synthetic model when no MODEL)
#   make test       build and run every test group (TESTS="group ..." narrows it)
#   make asan       the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       the libFuzzer targets for FUZZ_TIME seconds each (clang)
#   make format     clang-format every source file
#
# Files named *_avx2.c / *_avx512.c are compiled with that ISA's flags only; everything else is
# portable C11 and runs on any x86-64 (runtime dispatch picks the variant, see src/kernels/).

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
WERROR  ?=
CFLAGS  ?=
CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter -Wvla $(WERROR) \
           -Isrc -Iinclude -MMD -MP -pthread -fno-strict-aliasing
LDLIBS  += -lm -pthread
APPLIBS  = -lcjson -lmicrohttpd

ISA_AVX2   = -mavx2 -mfma -mf16c -mbmi2
ISA_AVX512 = $(ISA_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

LIB_SRC  = $(sort $(wildcard src/base/*.c src/gguf/*.c src/tokenizer/*.c src/kernels/*.c src/kernels/*/*.c src/backend/*/*.c \
                              src/model/*.c src/engine/*.c))
APP_SRC  = $(sort $(wildcard src/chat/*.c src/server/*.c src/cli/*.c))
TEST_SRC = $(sort $(wildcard tests/*.c))
FUZZ_SRC = $(sort $(wildcard tests/fuzz/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
LIB_OBJ  = $(call obj,$(LIB_SRC))
APP_OBJ  = $(call obj,$(APP_SRC))
MAIN_OBJ = $(call obj,src/cli/main.c)
TEST_OBJ = $(call obj,$(TEST_SRC))

.PHONY: all run test asan fuzz format clean bench
all: $(BUILD)/deltallm

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(ISA_AVX2) -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(ISA_AVX512) -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libdeltallm.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/deltallm: $(APP_OBJ) $(BUILD)/libdeltallm.a
	$(CC) $(CFLAGS) -o $@ $(APP_OBJ) $(BUILD)/libdeltallm.a $(APPLIBS) $(LDLIBS)

# the test runner links everything but the CLI's main()
$(BUILD)/tests: $(TEST_OBJ) $(filter-out $(MAIN_OBJ),$(APP_OBJ)) $(BUILD)/libdeltallm.a
	$(CC) $(CFLAGS) -o $@ $(TEST_OBJ) $(filter-out $(MAIN_OBJ),$(APP_OBJ)) $(BUILD)/libdeltallm.a $(APPLIBS) $(LDLIBS)

test: $(BUILD)/tests $(BUILD)/deltallm
	DELTALLM_BIN=$(BUILD)/deltallm $(BUILD)/tests $(TESTS)

asan:
	$(MAKE) BUILD=build/asan OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    LDLIBS="-lm -pthread -fsanitize=address,undefined" test

# micro-benchmarks: bench/<name>_bench.c → $(BUILD)/<name>_bench against the library (make bench builds them all)
BENCH_BIN = $(patsubst bench/%.c,$(BUILD)/%,$(sort $(wildcard bench/*_bench.c)))
bench: $(BENCH_BIN)
$(BENCH_BIN): $(BUILD)/%: bench/%.c $(BUILD)/libdeltallm.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libdeltallm.a $(LDLIBS)

FUZZ_TIME ?= 60
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -Isrc -Iinclude -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
# the fuzz targets exercise the file readers: the portable sources they need (no ISA-specific kernels)
FUZZ_LIB = $(filter-out %_avx2.c %_avx512.c,$(sort $(wildcard src/base/*.c src/gguf/*.c)) src/model/config.c)
# fuzz_http: the HTTP request path (paths and headers, bodies, chat rendering, constraints, output parsing)
FUZZ_HTTP_LIB = $(sort $(wildcard src/chat/*.c)) $(addprefix src/server/,http_parse.c json_io.c openai.c \
                responses.c constrain.c constrain_schema.c util.c) src/tokenizer/unicode.c \
                src/tokenizer/unicode_data.c src/base/err.c -lcjson
fuzz:
	@mkdir -p build/fuzz
	@set -e; for f in $(FUZZ_SRC); do \
	  n=$$(basename $$f .c); \
	  case $$n in fuzz_http) libs="$(FUZZ_HTTP_LIB)";; *) libs="$(FUZZ_LIB)";; esac; \
	  clang $(FUZZ_CFLAGS) -o build/fuzz/$$n $$f $$libs -lm -pthread; \
	  mkdir -p build/fuzz/$$n.corpus; \
	  echo "fuzz: $$n for $(FUZZ_TIME)s"; \
	  if ! build/fuzz/$$n -max_total_time=$(FUZZ_TIME) -print_final_stats=1 -artifact_prefix=build/fuzz/$$n- \
	       build/fuzz/$$n.corpus tests/fuzz/seeds/$$n > build/fuzz/$$n.log 2>&1; then \
	    tail -n 40 build/fuzz/$$n.log; echo "fuzz: $$n FAILED (crash input in build/fuzz/$$n-*)"; exit 1; \
	  fi; \
	  grep -E 'stat::number_of_executed_units|stat::new_units_added' build/fuzz/$$n.log; \
	done

MODEL  ?=
PROMPT ?= The quick brown fox
N      ?= 32
run: $(BUILD)/deltallm
	@if [ -n "$(MODEL)" ]; then \
	  $(BUILD)/deltallm run -m "$(MODEL)" -p "$(PROMPT)" -n $(N); \
	else \
	  $(BUILD)/deltallm synth --default models/synth-qwen35-0.8b.gguf && \
	  $(BUILD)/deltallm run -m models/synth-qwen35-0.8b.gguf -p "$(PROMPT)" -n $(N) --synthetic-note; \
	fi

format:
	clang-format -i $(LIB_SRC) $(APP_SRC) $(TEST_SRC) $(wildcard src/*/*.h src/kernels/*/*.h include/*.h tests/*.h)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
