/* cmd_run.c — `deltallm run`: generate text from a prompt, streaming it as it comes, then report prompt
 * and generation speed. Sits on the public API (deltallm.h) only, plus the chat formatter for --chat.
 * `run -cnv` is `deltallm chat` (cmd_chat.c). Nothing reaches stdout before the prompt is evaluated, so a
 * failing run prints only its error (on stderr). With --draft-max / --model-draft (draft_options.h) the tokens
 * come from speculative steps (dl_session_speculate): the same tokens, several per forward pass. */
#include "cli/chat_prompt.h"
#include "cli/cli.h"
#include "cli/cli_image.h"
#include "cli/draft_options.h"
#include "cli/gen_grammar.h"
#include "cli/gen_options.h"
#include "deltallm.h"
#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(void) {
    printf("usage: deltallm run -m MODEL.gguf (-p PROMPT | -f FILE) [options]\n"
           "  -p, --prompt TEXT        the prompt\n"
           "  -f, --file FILE          the prompt from a file (- = standard input)\n"
           "  --chat                   wrap the prompt in the model's chat template (user turn + assistant prompt)\n"
           "  -cnv, --conversation     interactive multi-turn chat (the same as `deltallm chat`)\n"
           "  --mmproj FILE --image F  an image (PNG or JPEG) before the prompt, through the vision projector FILE\n"
           "                           (llama.cpp's Qwen3.5 mmproj: qwen3vl_merger); the text model on any --device\n"
           "  --vision-device NAME     run the vision encoder on that backend (vulkan[:N], cpu, ref; F32 arithmetic)\n"
           "                           instead of the CPU encoder's fast path\n"
           "%s%s%s"
           "  (-n defaults to 64; with drafting, -v also prints the drafts' acceptance)\n",
           gen_options_help, draft_options_help, cli_engine_help);
}

int cmd_run(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-cnv") || !strcmp(argv[i], "--conversation")) return cmd_chat(argc, argv);
    GenOptions o;
    gen_options_init(&o, 64);
    DraftOptions dro;
    draft_options_init(&dro);
    const char *prompt = NULL, *file = NULL, *mmproj = NULL, *image = NULL, *vision_device = NULL;
    bool chat = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = gen_options_parse(&o, "run", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if ((r = draft_options_parse(&dro, "run", argc, argv, &i)) < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!v) return cli_usage_error("run", "%s needs a value", a);
            prompt = argv[++i];
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!v) return cli_usage_error("run", "%s needs a value", a);
            file = argv[++i];
        } else if (!strcmp(a, "--mmproj") || !strcmp(a, "--image")) {
            if (!v) return cli_usage_error("run", "%s needs a value", a);
            *(a[2] == 'm' ? &mmproj : &image) = argv[++i];
        } else if (!strcmp(a, "--vision-device")) {
            if (!v) return cli_usage_error("run", "%s needs a value", a);
            vision_device = argv[++i];
        } else if (!strcmp(a, "--chat")) chat = true;
        else return cli_usage_error("run", "unknown option '%s' (see --help)", a);
    }
    if (!o.model && !(o.model = cli_default_model()))
        return cli_usage_error("run", "needs -m MODEL.gguf (the embedded %s is not here)", CLI_DEFAULT_MODEL);
    if (draft_options_check(&dro, "run")) return 2;
    if (!prompt == !file) return cli_usage_error("run", "needs exactly one of -p PROMPT or -f FILE");
    if (!chat && !o.think) return cli_usage_error("run", "--no-think needs --chat (it changes the chat template)");
    if (!chat && o.system_prompt) return cli_usage_error("run", "--system-prompt needs --chat");
    if (!image != !mmproj) return cli_usage_error("run", "--image needs --mmproj (the vision projector) and the reverse");
    if (vision_device && !image) return cli_usage_error("run", "--vision-device needs --mmproj and --image");
    char *text = NULL;
    size_t text_len = 0;
    if (file) {
        text = cli_read_path(file, &text_len);
        if (!text) {
            fprintf(stderr, "deltallm run: cannot read '%s': %s\n", file, strerror(errno));
            return 1;
        }
    } else {
        text = strdup(prompt);
        text_len = strlen(text);
    }

    int rc = 1;
    DlError err = {{0}};
    DlSession *s = NULL;
    DlSampler *smp = NULL;
    GenGrammar *gram = NULL;
    DlDetok *dt = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    CliImage img = {0};
    DlEngine *e = gen_open_engine(&o, &err);
    if (!e) goto done;
    if (image) { /* the image's embeddings; its place: the marker the chat template writes, before the text */
        if (cli_image_encode_on(e, mmproj, image, (int)o.threads, vision_device, &img, &err)) goto done;
        const size_t ml = strlen(CLI_IMAGE_MARKER);
        char *t = malloc(ml + text_len + 1);
        if (!t) goto done;
        memcpy(t, CLI_IMAGE_MARKER, ml), memcpy(t + ml, text, text_len + 1);
        free(text);
        text = t, text_len += ml;
    }
    if (chat) {
        ChatTemplate t;
        char *rendered = NULL, why[400];
        if (chat_prompt_template(dl_chat_template(e), o.chat_template_file, o.chat_format, &t, why, sizeof why) ||
            chat_prompt_render(&t, o.system_prompt, text, o.think, &rendered, why, sizeof why)) {
            snprintf(err.msg, sizeof err.msg, "--chat: %s", why);
            goto done;
        }
        free(text);
        text = rendered;
        text_len = strlen(text);
    }
    /* without --chat the text is not parsed for special tokens; the image marker still is */
    const size_t skip = image && !chat ? strlen(CLI_IMAGE_MARKER) : 0;
    if (dl_tokenize(e, text + skip, text_len - skip, chat, &ids, &n_ids, &err)) goto done;
    if (skip) {
        int32_t *mk = NULL, *all = NULL;
        size_t n_mk = 0;
        if (dl_tokenize(e, CLI_IMAGE_MARKER, skip, true, &mk, &n_mk, &err)) goto done;
        all = malloc(sizeof(int32_t) * (n_mk + n_ids + 1));
        if (all) memcpy(all, mk, sizeof(int32_t) * n_mk), memcpy(all + n_mk, ids, sizeof(int32_t) * n_ids);
        free(mk), free(ids);
        if (!(ids = all)) goto done;
        n_ids += n_mk;
    }
    if (n_ids == 0) {
        snprintf(err.msg, sizeof err.msg, "the prompt is empty");
        goto done;
    }
    s = dl_session_new(e, &err);
    if (!s || draft_options_open(&dro, e, &err) || draft_options_apply(&dro, s, &err)) goto done;
    smp = gen_new_sampler(&o, e, &err);
    dt = smp ? dl_detok_new(e, o.special, &err) : NULL;
    if (!smp || !dt) goto done;
    for (size_t i = 0; i < n_ids; i++) dl_sampler_accept(smp, ids[i]);
    if (!(gram = gen_grammar_open(o.grammar, o.grammar_file, e, &err)) && err.msg[0]) goto done;
    DlDraftParams gdp;
    if (gram && draft_options_on(&dro, &gdp)) {
        snprintf(err.msg, sizeof err.msg, "--grammar cannot be combined with drafting");
        goto done;
    }

    double t1 = now_s();
    size_t n_eval = n_ids;
    if (image ? cli_image_eval(e, s, ids, n_ids, &img, &n_eval, &err) : dl_session_eval(s, ids, n_ids, &err)) goto done;
    double t_prompt = now_s() - t1;
    if (!chat) fwrite(text + skip, 1, text_len - skip, stdout);
    fflush(stdout);
    long long n_done = 0;
    double t2 = now_s();
    const char *stop = NULL;
    DlDraftParams dp;
    const bool drafting = draft_options_on(&dro, &dp);
    int32_t out[DL_DRAFT_MAX + 1], tok = -1;
    int n_out = 0, at = 0; /* tokens of the last speculative step, and the next of them to emit */
    while (o.n_gen < 0 || n_done < o.n_gen) {
        if (at == n_out && dl_session_n_past(s) >= dl_session_n_ctx(s) - (drafting && n_done > 0)) {
            stop = "context full";
            break;
        }
        if (drafting && n_done > 0 && at == n_out) { /* tok: emitted, not evaluated; the step samples the next ones */
            long long cap = o.n_gen < 0 ? DL_DRAFT_MAX + 1 : o.n_gen - n_done;
            cap = cap < DL_DRAFT_MAX + 1 ? cap : DL_DRAFT_MAX + 1;
            const long long room = dl_session_n_ctx(s) - dl_session_n_past(s) - 1; /* as plain decoding stops */
            cap = cap < room ? cap : room;
            if ((n_out = dl_session_speculate(s, smp, tok, out, (size_t)cap, &err)) < 0) goto done;
            at = 0;
        }
        if (at < n_out) tok = out[at++]; /* sampled and accepted by the step */
        else if (gram) {
            if ((tok = gen_grammar_sample(gram, smp, dl_session_logits(s))) < 0) {
                stop = "the grammar allows no token";
                break;
            }
            dl_sampler_accept(smp, tok);
        } else {
            tok = dl_sampler_sample(smp, dl_session_logits(s));
            dl_sampler_accept(smp, tok);
        }
        n_done++;
        const bool gram_done = gram && gen_grammar_accept(gram, tok);
        if (!o.ignore_eos && dl_token_is_eog(e, tok)) {
            stop = "end of generation";
            break;
        }
        const char *piece;
        size_t len;
        if (dl_detok_push(dt, tok, &piece, &len, &err)) goto done;
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        if (gram_done) {
            stop = "grammar complete";
            break;
        }
        if (!drafting && dl_session_eval(s, &tok, 1, &err)) goto done;
    }
    double t_gen = now_s() - t2;
    const char *piece;
    size_t len;
    dl_detok_flush(dt, &piece, &len);
    fwrite(piece, 1, len, stdout);
    printf("\n");
    fprintf(stderr, "\nprompt: %zu tokens in %.3f s (%.1f t/s); generation: %lld tokens in %.3f s (%.1f t/s)%s%s\n", n_ids,
            t_prompt, (double)n_ids / (t_prompt > 0 ? t_prompt : 1e-9), n_done, t_gen,
            (double)n_done / (t_gen > 0 ? t_gen : 1e-9), stop ? "; stopped: " : "", stop ? stop : "");
    if (drafting && o.verbose) {
        DlDraftStats st;
        dl_session_draft_stats(s, &st);
        fprintf(stderr, "drafts: %llu steps, %llu of %llu drafts accepted (%.1f%%); by position:", (unsigned long long)st.steps,
                (unsigned long long)st.accepted, (unsigned long long)st.drafted,
                100.0 * (double)st.accepted / (double)(st.drafted ? st.drafted : 1));
        for (int i = 0; i < dp.n_max && i < DL_DRAFT_MAX && st.drafted_at[i]; i++)
            fprintf(stderr, " %.1f%%", 100.0 * (double)st.accepted_at[i] / (double)st.drafted_at[i]);
        const double ns = (double)(st.steps ? st.steps : 1);
        fprintf(stderr, "\ndraft steps: drafting %.2f ms (%llu passes), verifying %.2f ms, rollback %.3f ms per step\n",
                1e3 * st.draft_s / ns, (unsigned long long)st.draft_passes, 1e3 * st.verify_s / ns, 1e3 * st.keep_s / ns);
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "deltallm run: %s\n", err.msg[0] ? err.msg : "failed");
    free(ids);
    free(text);
    dl_detok_free(dt);
    dl_sampler_free(smp);
    cli_image_free(&img);
    gen_grammar_free(gram);
    dl_session_free(s);
    dl_engine_close(e);
    return rc;
}
