/* simple.c — the smallest program on libdeltallm: load a model, generate greedily from a prompt, stream the
 * text. Built against the installed library (tests: install/example_against_installed_library):
 *
 *   cc simple.c $(pkg-config --cflags --libs deltallm) -o simple
 *   ./simple MODEL.gguf "The capital of France is" 32
 */
#include <deltallm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N]\n", argv[0]);
        return 2;
    }
    const int n_gen = argc > 3 ? atoi(argv[3]) : 32;
    DlError err = {{0}};
    DlEngineParams ep;
    dl_engine_params_init(&ep);
    ep.model_path = argv[1];
    ep.n_threads = 1;
    DlEngine *e = dl_engine_open(&ep, &err);
    if (!e) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    sp.temperature = 0; /* greedy */
    DlSession *s = dl_session_new(e, &err);
    DlSampler *smp = s ? dl_sampler_new(e, &sp, &err) : NULL;
    DlDetok *dt = smp ? dl_detok_new(e, false, &err) : NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 1;
    if (!dt || dl_tokenize(e, argv[2], strlen(argv[2]), false, &ids, &n, &err) || dl_session_eval(s, ids, n, &err))
        goto done;
    fputs(argv[2], stdout);
    for (int i = 0; i < n_gen && dl_session_n_past(s) < dl_session_n_ctx(s); i++) {
        int32_t t = dl_sampler_sample(smp, dl_session_logits(s));
        if (dl_token_is_eog(e, t)) break;
        const char *piece;
        size_t len;
        if (dl_detok_push(dt, t, &piece, &len, &err) || dl_session_eval(s, &t, 1, &err)) goto done;
        fwrite(piece, 1, len, stdout);
    }
    const char *piece;
    size_t len;
    dl_detok_flush(dt, &piece, &len);
    fwrite(piece, 1, len, stdout);
    fputc('\n', stdout);
    fprintf(stderr, "libdeltallm %s\n", dl_version());
    rc = 0;
done:
    if (rc) fprintf(stderr, "%s\n", err.msg);
    free(ids);
    dl_detok_free(dt);
    dl_sampler_free(smp);
    dl_session_free(s);
    dl_engine_close(e);
    return rc;
}
