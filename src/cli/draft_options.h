/* draft_options.h — the speculative-decoding options `run`, `serve` and `bench` share (llama.cpp's names):
 *
 *   --draft-max N        draft up to N tokens per step (1..16; 0: no drafting). Drafting is on when this
 *                        or --model-draft is given; the drafter is the model's MTP block unless
 *   -md, --model-draft F a smaller model of the same vocabulary drafts instead
 *   --draft-min N        a step with fewer than N drafts verifies none (default 0)
 *   --draft-p-min P      stop drafting at a draft the drafter gives less probability than P (default 0.5)
 *   --draft-vocab N      the MTP head over the first N token ids only (a multiple of 8; default: all). With a
 *                        small model's large vocabulary the head is most of a draft pass (Qwen3.5-0.8B: 248,320
 *                        rows of 1024), and BPE ids come roughly in order of frequency.
 *
 * Off by default: drafting pays only where the drafter agrees with the model often enough (bench --draft
 * measures it), and every model's MTP block is not trained as well as its trunk. */
#ifndef DL_CLI_DRAFT_OPTIONS_H
#define DL_CLI_DRAFT_OPTIONS_H

#include <stdbool.h>

#include "deltallm.h"

typedef struct DraftOptions {
    long long n_max, n_min, n_vocab; /* n_max -1: not given */
    double p_min;
    const char *model; /* --model-draft */
} DraftOptions;

void draft_options_init(DraftOptions *o);
/* If argv[*i] is one of the options above, takes it (and its value: *i advances) and returns 1; 0 if it is
 * not one; -1 for a bad or missing value (the message printed). */
int draft_options_parse(DraftOptions *o, const char *cmd, int argc, char **argv, int *i);
extern const char draft_options_help[];
/* After parsing: the options together (draft-min ≤ draft-max, the vocabulary a multiple of 8); 0, or 2 after
 * printing a usage error. */
int draft_options_check(const DraftOptions *o, const char *cmd);
/* Whether drafting is asked for (--draft-max ≥ 1 or --model-draft); then *p holds the parameters. */
bool draft_options_on(const DraftOptions *o, DlDraftParams *p);
/* Opens --model-draft on e (when given); once per engine, before its sessions draft. 0, or -1 with err set. */
int draft_options_open(const DraftOptions *o, DlEngine *e, DlError *err);
/* Turns drafting on for s when it is asked for; 0, or -1 with err set. */
int draft_options_apply(const DraftOptions *o, DlSession *s, DlError *err);

#endif
