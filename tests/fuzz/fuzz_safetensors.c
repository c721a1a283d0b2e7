/* fuzz_safetensors.c — libFuzzer target over the safetensors reader (`make fuzz`; seeds in
 * tests/fuzz/seeds/fuzz_safetensors/, written by the test convert/safetensors_fuzz_seeds).
 *
 * A refused input must come back with a one-line message. An accepted one must keep every promise of
 * safetensors.h: tensors in name order with unique names, each inside the data, sized elements × dtype,
 * disjoint; every byte of every tensor is read (under ASan). Any broken promise traps. */
#include "convert/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(x)                                                                                          \
    do {                                                                                                   \
        if (!(x)) __builtin_trap();                                                                        \
    } while (0)

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Err err = {{0}};
    StFile *f = st_open_memory(data, size, &err);
    if (!f) {
        EXPECT(err.msg[0] != '\0' && memchr(err.msg, '\0', sizeof err.msg) && !strchr(err.msg, '\n'));
        return 0;
    }
    const uint8_t *lo = data, *hi = data + size;
    for (int i = 0; i < st_n_tensors(f); i++) {
        const StTensor *t = st_tensor(f, i);
        EXPECT(t->name && t->name[0]);
        EXPECT(i == 0 || strcmp(st_tensor(f, i - 1)->name, t->name) < 0);
        EXPECT(st_find(f, t->name) == t);
        uint64_t ne = 1;
        for (int d = 0; d < t->n_dims; d++) ne *= (uint64_t)t->shape[d];
        EXPECT(ne == t->n_elements && t->nbytes == ne * st_dtype_size(t->dtype));
        const uint8_t *p = t->data;
        EXPECT(p >= lo && p + t->nbytes <= hi);
        uint64_t s = 0;
        for (uint64_t k = 0; k < t->nbytes; k++) s += p[k];
        sink += s;
        for (int j = 0; j < i; j++) {
            const StTensor *u = st_tensor(f, j);
            const uint8_t *q = u->data;
            EXPECT(!t->nbytes || !u->nbytes || p + t->nbytes <= q || q + u->nbytes <= p);
        }
    }
    st_close(f);
    return 0;
}
