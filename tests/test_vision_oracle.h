/* test_vision_oracle.h — llama.cpp's recorded image prompt (tests/data/vision_oracle, test_vision_oracle.c) for
 * the tests of each entry point that takes an image: its inputs and its last row. */
#ifndef DELTALLM_TEST_VISION_ORACLE_H
#define DELTALLM_TEST_VISION_ORACLE_H

#include <stdbool.h>
#include <stdint.h>

/* A gap lp[k] − lp[0] holds two logits; vision/mtmd_oracle_logits measured the default path 0.087·std from
 * llama.cpp per logit (every row): 2 × that, with some margin. The server measured 0.048; the same request with
 * the other recorded image gives 0.29 (and another top-1), with ChatML's default system prompt added 0.15. */
#define VISION_ORACLE_GAP_LIMIT 0.2

/* The recorded inputs (rebuilt bit for bit): the width-64 qwen35, the F32 projector, the up-scaled PNG. */
bool test_vision_oracle_files(const char **model, const char **mmproj, const char **png);
/* llama.cpp's argmax after the whole prompt (the first token a greedy entry point generates); -1 if missing. */
int32_t test_vision_oracle_top1(void);
/* The recorded prompt's tokens: before the image (ending in <|vision_start|>) and after it; NULL if missing. */
const int32_t *test_vision_oracle_prompt(int *n1, const int32_t **c2, int *n2);
/* ids[0, n) (ids[0] the most likely) with their log-probabilities lp: max over the ids the recording kept of
 * |(lp[k] − lp[0]) − (l[ids[k]] − l[ids[0]])| / std, l llama.cpp's logits after the prompt; *n_cmp: how many
 * were compared; NAN when the recording or ids[0] is missing. */
double test_vision_oracle_gap_dist(const int32_t *ids, const double *lp, int n, int *n_cmp);

#endif
