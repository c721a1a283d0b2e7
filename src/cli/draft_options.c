/* draft_options.c — see draft_options.h: --draft-max, --draft-min, --draft-p-min, --model-draft. */
#include "cli/draft_options.h"

#include "cli/cli.h"

#include <string.h>

void draft_options_init(DraftOptions *o) {
    DlDraftParams p;
    dl_draft_params_init(&p);
    *o = (DraftOptions){.n_max = -1, .n_min = p.n_min, .n_vocab = 0, .p_min = p.p_min, .model = NULL};
}

const char draft_options_help[] =
    "  --draft-max N            speculative decoding: draft up to N tokens a step (1..16; default 3 when\n"
    "                           drafting, 0 = off) with the model's MTP block, or with --model-draft\n"
    "  -md, --model-draft F     a smaller model of the same vocabulary drafts (turns drafting on)\n"
    "  --draft-min N            verify no drafts in a step that drafted fewer than N (default 0)\n"
    "  --draft-p-min P          stop drafting under this draft probability (default 0.5; 0 = always N)\n"
    "  --draft-vocab N          the MTP head over the first N token ids only (multiple of 8; default all)\n";

int draft_options_parse(DraftOptions *o, const char *cmd, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const bool is_max = !strcmp(a, "--draft-max"), is_min = !strcmp(a, "--draft-min"), is_p = !strcmp(a, "--draft-p-min"),
               is_md = !strcmp(a, "-md") || !strcmp(a, "--model-draft"), is_v = !strcmp(a, "--draft-vocab");
    if (!is_max && !is_min && !is_p && !is_md && !is_v) return 0;
    if (!v) return cli_usage_error(cmd, "%s needs a value", a), -1;
    ++*i;
    if (is_md) o->model = v;
    else if (is_p) return cli_parse_float(cmd, a, v, 0, 1, &o->p_min) ? -1 : 1;
    else if (is_v) return cli_parse_int(cmd, a, v, 0, 1 << 24, &o->n_vocab) ? -1 : 1;
    else if (cli_parse_int(cmd, a, v, 0, DL_DRAFT_MAX, is_max ? &o->n_max : &o->n_min)) return -1;
    return 1;
}

int draft_options_check(const DraftOptions *o, const char *cmd) {
    DlDraftParams p;
    draft_options_on(o, &p);
    if (o->n_min > p.n_max) return cli_usage_error(cmd, "--draft-min %lld exceeds --draft-max %d", o->n_min, p.n_max);
    if (o->n_vocab % 8) return cli_usage_error(cmd, "--draft-vocab %lld: a multiple of 8", o->n_vocab);
    return 0;
}

bool draft_options_on(const DraftOptions *o, DlDraftParams *p) {
    dl_draft_params_init(p);
    if (o->n_max == 0 || (o->n_max < 0 && !o->model)) return false;
    if (o->n_max > 0) p->n_max = (int)o->n_max;
    p->n_min = (int)o->n_min;
    p->p_min = (float)o->p_min;
    p->n_vocab = (int)o->n_vocab;
    return true;
}

int draft_options_open(const DraftOptions *o, DlEngine *e, DlError *err) {
    DlDraftParams p;
    return draft_options_on(o, &p) && o->model ? dl_engine_open_draft(e, o->model, err) : 0;
}

int draft_options_apply(const DraftOptions *o, DlSession *s, DlError *err) {
    DlDraftParams p;
    return draft_options_on(o, &p) ? dl_session_set_draft(s, &p, err) : 0;
}
