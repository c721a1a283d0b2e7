# deltallm — GNU make build. Objects go to build/ (release), build/asan/ (sanitizers), build/fuzz/.
#
#   make            build/deltallm and the library, in parallel (one job per CPU; -jN overrides), one line per
#                   step (V=1: the full command lines); errors always in full
#   make run        a chat turn with the embedded model (MODEL=path.gguf PROMPT="..." N=64: any model, raw text)
#   make test       build and run every test group (TESTS="group ..." narrows it)
#   make deps       install the packages the build needs (apt-get, as root; otherwise it prints the command);
#                   make deps-test: those the tests need too. make run / make test call them first
#   make asan       the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       the libFuzzer targets for FUZZ_TIME seconds each (clang)
#   make format     clang-format every source file
#   make install    the binary, libdeltallm.so / .a, deltallm.h and deltallm.pc under PREFIX (DESTDIR for staging)
#   MPI=0           build without Open MPI even where mpicc is installed (default: use it when found)
#
# Files named *_avx2.c / *_avx512.c are compiled with that ISA's flags only; everything else is
# portable C11 and runs on any x86-64 (runtime dispatch picks the variant, see src/kernels/).

CC      ?= cc
BUILD   ?= build
NPROC   := $(shell nproc 2>/dev/null || echo 2)
MAKEFLAGS += --no-print-directory
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(NPROC) # sub-makes share the top one's jobs
endif
# quiet by default: one line per step; V=1 prints the commands
V ?= 0
ifeq ($(V),0)
Q   = @
say = @printf '  %-6s %s\n' $(1) $(2)
else
Q   =
say =
endif
OPT     ?= -O2
WERROR  ?=
CFLAGS  ?=
CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter -Wvla $(WERROR) \
           -Isrc -Iinclude -MMD -MP -pthread -fno-strict-aliasing
LDLIBS  += -lm -pthread -ldl
APPLIBS  = -lcjson -lmicrohttpd

ISA_AVX2   = -mavx2 -mfma -mf16c -mbmi2
ISA_AVX512 = $(ISA_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

# Open MPI (optional, `--mpi`): found through mpicc. Only src/dist/dist_mpi.c includes <mpi.h>; without MPI
# dist_none.c stands in and --mpi says the build has none.
MPI ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(MPI),1)
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
DIST_LIBS  := $(shell mpicc --showme:link 2>/dev/null)
DIST_SRC    = src/dist/dist_mpi.c
else
DIST_SRC    = src/dist/dist_none.c
endif

# ---- the Vulkan backend (src/backend/vulkan/) ------------------------------------------------------------------
# Built when the Vulkan headers and glslc are there (VULKAN=0 or 1 forces it off or on); libvulkan is opened
# at run time, so a binary with the backend still runs on the CPU where Vulkan is missing. SPV_DIR=DIR takes
# SPIR-V compiled elsewhere (a machine without glslc, bench/vulkan_h200.sh); VK_INC the headers' root.
GLSLC    ?= glslc
VK_INC   ?= /usr/include
SPV_DIR  ?= build/spv
ifeq ($(origin VULKAN),undefined)
VULKAN  := $(shell test -f $(VK_INC)/vulkan/vulkan_core.h && { command -v $(GLSLC) >/dev/null 2>&1 || \
                test -f $(SPV_DIR)/eltwise.spv; } && echo 1 || echo 0)
endif
VK_FORMATS     = f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 iq4_nl mxfp4 q2_K q3_K q4_K q5_K q6_K \
                 iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq4_xs iq1_s iq1_m
VK_FMT_KERNELS = mm_vec mm_mat mm_coop get_rows
VK_KERNELS     = eltwise norm rope dn_gates moe_route moe_group conv_silu dn_recurrent dn_chunked attention probe_copy dn_prep attn_prep attn_combine \
                 dn_prep_scan layer_norm rope_2d attn_full
VK_SHADERS     = src/backend/vulkan/shaders
# mm_vec's two-format variants (mm_vec2_A_B: the pair or gate + up of a K-quant mix in one dispatch)
VK_PAIR_FORMATS = q2_K q3_K q4_K q5_K q6_K q8_0
VK_PAIRS = $(foreach a,$(VK_PAIR_FORMATS),$(foreach b,$(filter-out $(a),$(VK_PAIR_FORMATS)),$(a)_$(b)))
VK_SPV   = $(foreach k,$(VK_FMT_KERNELS),$(foreach f,$(VK_FORMATS),$(SPV_DIR)/$(k)_$(f).spv)) \
           $(patsubst %,$(SPV_DIR)/mm_vec2_%.spv,$(VK_PAIRS)) $(patsubst %,$(SPV_DIR)/%.spv,$(VK_KERNELS))
VK_SRC   = $(sort $(wildcard src/backend/vulkan/*.c))
VK_GEN   = $(BUILD)/gen/vk_spv.c

# ---- image files (src/image/): libpng and libjpeg, each optional (PNG=0 / JPEG=0 turn one off) ----------------
PNG  ?= $(shell test -f /usr/include/png.h && echo 1 || echo 0)
JPEG ?= $(shell test -f /usr/include/jpeglib.h && echo 1 || echo 0)
IMAGE_LIBS = $(if $(filter 1,$(PNG)),-lpng) $(if $(filter 1,$(JPEG)),-ljpeg)
APPLIBS += $(IMAGE_LIBS)

LIB_SRC  = $(filter-out $(VK_SRC),$(sort $(wildcard src/base/*.c src/gguf/*.c src/tokenizer/*.c src/kernels/*.c \
                              src/kernels/*/*.c src/backend/*.c src/backend/*/*.c src/model/*.c src/engine/*.c src/vision/*.c) $(DIST_SRC)))
ifeq ($(VULKAN),1)
LIB_SRC += $(VK_SRC) $(VK_GEN)
endif
APP_SRC  = $(sort $(wildcard src/chat/*.c src/server/*.c src/cli/*.c src/convert/*.c src/quantize/*.c src/image/*.c))
TEST_SRC = $(sort $(wildcard tests/*.c))
FUZZ_SRC = $(sort $(wildcard tests/fuzz/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
LIB_OBJ  = $(call obj,$(LIB_SRC))
APP_OBJ  = $(call obj,$(APP_SRC))
MAIN_OBJ = $(call obj,src/cli/main.c)
TEST_OBJ = $(call obj,$(TEST_SRC))

.PHONY: all run test asan fuzz format clean bench spv deps deps-test FORCE
all: $(BUILD)/deltallm $(BUILD)/libdeltallm.so

# generated sources: the git revision `deltallm --version` prints (rewritten only when it changes)
GEN = $(BUILD)/gen
$(GEN)/git_rev.h: FORCE
	@mkdir -p $(@D)
	@r=$$(git describe --always --dirty --abbrev=10 2>/dev/null || echo "no git"); \
	  echo "#define DL_GIT_REV \"$$r\"" > $@.tmp; cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(MAIN_OBJ): $(GEN)/git_rev.h
$(MAIN_OBJ): CFLAGS += -I$(GEN)
# the server's chat page: src/server/web/ embedded as byte arrays by tools/embed.c (server/web.h)
WEB_FILES = $(sort $(wildcard src/server/web/*))
WEB_OBJ   = $(BUILD)/obj/gen/web_assets.o
APP_OBJ  += $(WEB_OBJ)
$(BUILD)/embed: tools/embed.c
	@mkdir -p $(@D)
	$(call say,CC,$@)
	$(Q)$(CC) -std=c11 -O1 -o $@ $<
$(GEN)/web_assets.c: $(BUILD)/embed $(WEB_FILES)
	@mkdir -p $(@D)
	$(call say,EMBED,$@)
	$(Q)$(BUILD)/embed $@ $(WEB_FILES)
$(WEB_OBJ): $(GEN)/web_assets.c
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS) $(ISA_AVX2) -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS) $(ISA_AVX512) -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/obj/src/dist/dist_mpi.o: src/dist/dist_mpi.c
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS) $(MPI_CFLAGS) -c $< -o $@

# switching MPI on or off rebuilds the library and relinks
MPI_STAMP = $(BUILD)/.mpi-$(MPI)
$(MPI_STAMP):
	@mkdir -p $(@D)
	@rm -f $(BUILD)/.mpi-*
	@touch $@

# the registry learns whether the backend is built; a stamp per setting rebuilds it when VULKAN changes
$(BUILD)/gen/vulkan-$(VULKAN).stamp:
	@mkdir -p $(@D) && rm -f $(BUILD)/gen/vulkan-*.stamp && touch $@
$(call obj,src/backend/registry.c): CFLAGS += -DDL_VULKAN=$(VULKAN)
$(call obj,src/backend/registry.c): $(BUILD)/gen/vulkan-$(VULKAN).stamp
$(call obj,$(VK_SRC) $(VK_GEN)): CFLAGS += -I$(VK_INC)
# the image decoders learn which libraries are there; a stamp per setting rebuilds them when it changes
$(BUILD)/gen/image-$(PNG)$(JPEG).stamp:
	@mkdir -p $(@D) && rm -f $(BUILD)/gen/image-*.stamp && touch $@
$(call obj,src/image/image.c): CFLAGS += -DDL_PNG=$(PNG) -DDL_JPEG=$(JPEG)
$(call obj,src/image/image.c): $(BUILD)/gen/image-$(PNG)$(JPEG).stamp
$(call obj,tests/test_vision.c tests/test_vision_oracle.c tests/test_vision_dev.c): CFLAGS += -DDL_PNG=$(PNG) -DDL_JPEG=$(JPEG)
$(call obj,tests/test_vision.c tests/test_vision_oracle.c): $(BUILD)/gen/image-$(PNG)$(JPEG).stamp

$(SPV_DIR)/%.spv: $(VK_SHADERS)/%.comp $(wildcard $(VK_SHADERS)/*.glsl) src/backend/vulkan/vk_tables.h
	@mkdir -p $(@D)
	$(call say,GLSLC,$@)
	$(Q)$(GLSLC) --target-env=vulkan1.2 -O -I$(VK_SHADERS) $< -o $@
define VK_FMT_RULE
$(SPV_DIR)/$(1)_%.spv: $(VK_SHADERS)/$(1).comp $(wildcard $(VK_SHADERS)/*.glsl) src/backend/vulkan/vk_tables.h
	@mkdir -p $$(@D)
	$$(call say,GLSLC,$$@)
	$(Q)$(GLSLC) --target-env=vulkan1.2 -O -I$(VK_SHADERS) -DFMT_$$* $$< -o $$@
endef
$(foreach k,$(VK_FMT_KERNELS),$(eval $(call VK_FMT_RULE,$(k))))
define VK_PAIR_RULE
$(SPV_DIR)/mm_vec2_$(1)_$(2).spv: $(VK_SHADERS)/mm_vec.comp $(wildcard $(VK_SHADERS)/*.glsl) src/backend/vulkan/vk_tables.h
	@mkdir -p $$(@D)
	$$(call say,GLSLC,$$@)
	$(Q)$(GLSLC) --target-env=vulkan1.2 -O -I$(VK_SHADERS) -DFMT_$(1) -DFMTB_$(2) -DFMT_TWO $$< -o $$@
endef
$(foreach a,$(VK_PAIR_FORMATS),$(foreach b,$(filter-out $(a),$(VK_PAIR_FORMATS)),$(eval $(call VK_PAIR_RULE,$(a),$(b)))))
# the SPIR-V alone (carried to a machine without glslc: bench/vulkan_h200.sh)
spv: $(VK_SPV)
$(VK_GEN): $(VK_SPV) src/backend/vulkan/embed_spv.sh
	@mkdir -p $(@D)
	$(call say,EMBED,$@)
	$(Q)sh src/backend/vulkan/embed_spv.sh $@ $(VK_SPV)

$(BUILD)/libdeltallm.a: $(LIB_OBJ) $(MPI_STAMP)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)ar rcs $@ $(LIB_OBJ)

# The library for other programs, as llama.cpp's is used: libdeltallm.so.MAJOR (the soname) exporting only the
# dl_* API of deltallm.h (src/engine/deltallm.map). Its objects are the static library's, position-independent:
# -fPIC with -fno-semantic-interposition generates the code -fPIE (gcc's default here) does, so the kernels run
# as fast (bench numbers in docs/ARCHITECTURE.md, "The library").
VERSION := $(shell sed -n 's/^\#define DELTALLM_VERSION "\(.*\)"/\1/p' include/deltallm.h)
MAJOR   := $(firstword $(subst ., ,$(VERSION)))
SONAME   = libdeltallm.so.$(MAJOR)
$(LIB_OBJ): CFLAGS += -fPIC -fno-semantic-interposition
$(LIB_OBJ): $(BUILD)/obj/.pic # objects built before they were position-independent are rebuilt once
$(BUILD)/obj/.pic:
	@mkdir -p $(@D)
	@touch $@
$(BUILD)/libdeltallm.so.$(VERSION): $(LIB_OBJ) $(MPI_STAMP) src/engine/deltallm.map
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/engine/deltallm.map -Wl,-z,defs \
	    -o $@ $(LIB_OBJ) $(DIST_LIBS) $(LDLIBS)
$(BUILD)/libdeltallm.so: $(BUILD)/libdeltallm.so.$(VERSION)
	$(Q)ln -sf libdeltallm.so.$(VERSION) $(BUILD)/$(SONAME)
	$(Q)ln -sf $(SONAME) $@

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
DESTDIR ?=
$(BUILD)/deltallm.pc: Makefile include/deltallm.h
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' 'Name: deltallm' \
	  'Description: inference engine for the Gated-DeltaNet hybrid LLMs (Qwen3-Next, Qwen3.5)' 'Version: $(VERSION)' \
	  'Libs: -L$${libdir} -ldeltallm' 'Libs.private: $(DIST_LIBS) -lm -pthread' 'Cflags: -I$${includedir}' > $@
.PHONY: install uninstall $(BUILD)/deltallm.pc
install: $(BUILD)/deltallm $(BUILD)/libdeltallm.a $(BUILD)/libdeltallm.so $(BUILD)/deltallm.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 755 $(BUILD)/deltallm $(DESTDIR)$(BINDIR)/deltallm
	install -m 644 $(BUILD)/libdeltallm.a $(DESTDIR)$(LIBDIR)/libdeltallm.a
	install -m 755 $(BUILD)/libdeltallm.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdeltallm.so.$(VERSION)
	ln -sf libdeltallm.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdeltallm.so
	install -m 644 include/deltallm.h $(DESTDIR)$(INCLUDEDIR)/deltallm.h
	install -m 644 $(BUILD)/deltallm.pc $(DESTDIR)$(LIBDIR)/pkgconfig/deltallm.pc
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/deltallm $(DESTDIR)$(LIBDIR)/libdeltallm.a $(DESTDIR)$(LIBDIR)/libdeltallm.so* \
	      $(DESTDIR)$(INCLUDEDIR)/deltallm.h $(DESTDIR)$(LIBDIR)/pkgconfig/deltallm.pc

$(BUILD)/deltallm: $(APP_OBJ) $(BUILD)/libdeltallm.a
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) -o $@ $(APP_OBJ) $(BUILD)/libdeltallm.a $(APPLIBS) $(DIST_LIBS) $(LDLIBS)

# the test runner links everything but the CLI's main()
$(BUILD)/tests: $(TEST_OBJ) $(filter-out $(MAIN_OBJ),$(APP_OBJ)) $(BUILD)/libdeltallm.a
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) -o $@ $(TEST_OBJ) $(filter-out $(MAIN_OBJ),$(APP_OBJ)) $(BUILD)/libdeltallm.a $(APPLIBS) $(DIST_LIBS) $(LDLIBS)

# ---- packages (Debian names): the one list; .ci/run installs through `make deps-test` too ----------------------
# build: a C compiler, make, cJSON and libmicrohttpd (the CLI's server). tests: clang + its runtime (libFuzzer,
# the sanitizers), pkg-config (the install test), chromium (the page's browser test), python3-numpy
# (tools/train/gguf_to_hf.py), Open MPI (--mpi), the Vulkan headers, glslc, the loader and lavapipe (every GPU
# kernel tested on the CPU), and Node.js with npm for the server suite (an existing node is kept).
DEPS_BUILD = build-essential libcjson-dev libmicrohttpd-dev
DEPS_TEST  = $(DEPS_BUILD) clang libclang-rt-14-dev pkg-config chromium python3-numpy openmpi-bin libopenmpi-dev \
             libvulkan-dev glslc libvulkan1 mesa-vulkan-drivers openssl curl libpng-dev libjpeg62-turbo-dev
define install_deps
	@command -v dpkg >/dev/null 2>&1 || { echo "make deps: no dpkg (not Debian): install the equivalents of: $(1)"; exit 0; }; \
	missing=""; for p in $(1); do dpkg -s "$$p" >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ "$(2)" = node ] && ! { command -v node && command -v npm; } >/dev/null 2>&1; then missing="$$missing nodejs npm"; fi; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make: packages missing:$$missing"; echo "  run: sudo apt-get update && sudo apt-get install -y$$missing"; exit 1; \
	fi; \
	echo "make deps: apt-get install$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq$$missing >/dev/null
endef
deps:
	$(call install_deps,$(DEPS_BUILD))
deps-test:
	$(call install_deps,$(DEPS_TEST),node)

# the Node server suite needs its client library: installed here on a fresh clone (skipped when npm is missing
# or has no network: the suite then says it is skipped)
test:
	@$(MAKE) deps-test
	@$(MAKE) $(BUILD)/tests $(BUILD)/deltallm $(BUILD)/libdeltallm.so
	@if [ ! -d tests/server/node_modules ] && command -v npm >/dev/null 2>&1; then \
	  echo "make test: npm ci in tests/server (the server suite's openai client)"; \
	  (cd tests/server && npm ci --no-audit --no-fund --loglevel=error) || echo "make test: npm ci failed"; \
	fi
	DELTALLM_BIN=$(BUILD)/deltallm DELTALLM_BUILD=$(BUILD) DELTALLM_CC="$(CC) $(filter -fsanitize=%,$(OPT))" \
	    $(BUILD)/tests $(TESTS)

asan:
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp $(MAKE) BUILD=build/asan OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    LDLIBS="-lm -pthread -ldl -fsanitize=address,undefined" test

# micro-benchmarks: bench/<name>_bench.c → $(BUILD)/<name>_bench against the library (make bench builds them all)
BENCH_BIN = $(patsubst bench/%.c,$(BUILD)/%,$(sort $(wildcard bench/*_bench.c)))
bench: $(BENCH_BIN)
$(BENCH_BIN): $(BUILD)/%: bench/%.c $(BUILD)/libdeltallm.a
	$(call say,CC,$@)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libdeltallm.a $(DIST_LIBS) $(LDLIBS)

FUZZ_TIME ?= 60
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -Isrc -Iinclude -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
# the fuzz targets exercise the file readers: the portable sources they need (no ISA-specific kernels)
FUZZ_LIB = $(filter-out %_avx2.c %_avx512.c,$(sort $(wildcard src/base/*.c src/gguf/*.c)) src/model/config.c src/convert/safetensors.c)
# fuzz_http: the HTTP request path (paths and headers, bodies, chat rendering, constraints, output parsing)
FUZZ_HTTP_LIB = $(sort $(wildcard src/chat/*.c)) src/engine/sampling_defaults.c $(addprefix src/server/,http_parse.c \
                json_io.c openai.c openai_llama.c llama_params.c stop.c responses.c anthropic_req.c constrain.c \
                constrain_schema.c grammar.c util.c) src/tokenizer/unicode.c \
                src/tokenizer/unicode_data.c src/base/err.c -lcjson
# fuzz_image: the PNG / JPEG decoders' wrapper (src/image/image.c) with the libraries this build found
FUZZ_IMAGE_LIB = -DDL_PNG=$(PNG) -DDL_JPEG=$(JPEG) src/image/image.c src/base/err.c $(IMAGE_LIBS)
# fuzz_grammar: the GBNF compiler (grammar.c) and the constraint runtime
FUZZ_GRAMMAR_LIB = $(addprefix src/server/,grammar.c constrain.c util.c) src/base/err.c
fuzz:
	@mkdir -p build/fuzz
	@set -e; for f in $(FUZZ_SRC); do \
	  n=$$(basename $$f .c); \
	  case $$n in fuzz_http) libs="$(FUZZ_HTTP_LIB)";; fuzz_image) libs="$(FUZZ_IMAGE_LIB)";; \
	    fuzz_grammar) libs="$(FUZZ_GRAMMAR_LIB)";; *) libs="$(FUZZ_LIB)";; esac; \
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
PROMPT ?=
N      ?=
# the default: the embedded chat model trained by tools/train/ (docs/TRAINING.md): one chat turn, the reply
# ending by itself; MODEL=path.gguf runs any model on raw text instead (PROMPT, N tokens). The thread count is
# the engine's default (one thread for a model this small: docs/ARCHITECTURE.md, "Threads")
DEFAULT_MODEL = assets/tinychat-f16.gguf
run:
	@$(MAKE) deps
	@$(MAKE) $(BUILD)/deltallm
	@$(BUILD)/deltallm run $(if $(MODEL),-m "$(MODEL)" -p "$(or $(PROMPT),And God said)" -n $(or $(N),48),-m $(DEFAULT_MODEL) \
	    --chat -p "$(or $(PROMPT),Hello! Who are you, and what can you do?)" -n $(or $(N),200))

format:
	clang-format -i $(sort $(LIB_SRC) $(wildcard src/dist/*.c)) $(APP_SRC) $(TEST_SRC) $(wildcard src/*/*.h src/kernels/*/*.h include/*.h tests/*.h)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
