/* alloc_guard.c — see alloc_guard.h. */
#include "alloc_guard.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

static atomic_int armed;
static atomic_long count;

static inline void seen(void) {
    if (atomic_load_explicit(&armed, memory_order_relaxed)) atomic_fetch_add(&count, 1);
}

void alloc_guard_arm(void) {
    atomic_store(&count, 0);
    atomic_store(&armed, 1);
}

long alloc_guard_disarm(void) {
    atomic_store(&armed, 0);
    return atomic_load(&count);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GUARD_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(GUARD_ASAN)
/* ASan owns malloc: count through its hooks */
/* sanitizer/allocator_interface.h's declaration (the header is not installed with every compiler) */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));

static void on_malloc(const volatile void *p, size_t n) {
    (void)p, (void)n;
    seen();
}
static void on_free(const volatile void *p) { (void)p; }

__attribute__((constructor)) static void install(void) { __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free); }
#else
/* glibc's allocator under its internal names; these definitions take the public ones for the whole process */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);
void *__libc_memalign(size_t align, size_t n);

void *malloc(size_t n) {
    seen();
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
    seen();
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
    seen();
    return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }
void *aligned_alloc(size_t align, size_t n) {
    seen();
    return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
    seen();
    return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
    seen();
    void *p = __libc_memalign(align, n);
    if (!p) return 12; /* ENOMEM */
    *out = p;
    return 0;
}
#endif

bool alloc_guard_works(void) {
    alloc_guard_arm();
    void *volatile p = malloc(24);
    const long n = alloc_guard_disarm();
    free(p);
    return n >= 1;
}
