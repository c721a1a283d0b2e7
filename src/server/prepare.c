/* prepare.c — a validated request becomes a job: the chat is rendered with the model's format (src/chat)
 * or the completion prompt is taken as it is, the text is tokenized, the context is checked, and the
 * sampling parameters, stop strings, logit bias and (for forced tool calls and JSON output) the
 * constraint are attached. Runs on the HTTP thread: tokenizing may run concurrently with compute. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_io.h"
#include "server/server_internal.h"

static bool format_has_thinking(ChatFormat f) { return f == CHAT_FORMAT_QWEN3 || f == CHAT_FORMAT_QWEN35; }

int render_chat(Server *s, const ApiRequest *req, char **text, size_t *len, bool *forced, ApiError *e) {
    if (!s->have_template)
        return api_error(e, 400, "invalid_request_error", NULL, NULL,
                         "this model has no usable chat template: use /v1/completions, or start the server with "
                         "--chat-template-file or --chat-format");
    const ChatFormat f = s->tmpl.format;
    if (req->tools && f == CHAT_FORMAT_CHATML)
        return api_error(e, 400, "invalid_request_error", "tools", NULL,
                         "this model's chat format (chatml) has no tool-call syntax, so tools cannot be used; start "
                         "the server with --chat-format qwen3|qwen3-coder|qwen35 for a model trained on one");
    *forced = req->tool_choice == TOOL_CHOICE_REQUIRED || req->tool_choice == TOOL_CHOICE_NAMED ||
              req->response_format != RF_TEXT || req->grammar;
    ChatRenderOptions opt = {.add_generation_prompt = true,
                             .enable_thinking = req->enable_thinking < 0 ? CHAT_THINKING_DEFAULT : req->enable_thinking,
                             .flatten_text_parts = true};
    /* constrained output starts right away: no reasoning block first */
    if (*forced && format_has_thinking(f)) opt.enable_thinking = 0;
    Err err = {{0}};
    if (chat_render(&s->tmpl, req->messages, req->tools, &opt, text, len, &err))
        return api_error(e, 400, "invalid_request_error", "messages", NULL, "%s", err.msg);
    return 0;
}

static int attach_constraint(Server *s, const ApiRequest *req, Job *j, ApiError *e) {
    Err err = {{0}};
    if (req->tool_choice == TOOL_CHOICE_REQUIRED || req->tool_choice == TOOL_CHOICE_NAMED) {
        bool xml = s->tmpl.format == CHAT_FORMAT_QWEN35 || s->tmpl.format == CHAT_FORMAT_QWEN3_CODER;
        j->constraint = constraint_tool_call(xml, req->tools, req->tool_choice == TOOL_CHOICE_NAMED ? req->tool_name : NULL,
                                             &err);
    } else if (req->grammar) {
        if (!(j->constraint = constraint_grammar(req->grammar, strlen(req->grammar), &err)))
            return api_error(e, 400, "invalid_request_error", "grammar", NULL, "%s", err.msg);
        return 0;
    } else if (req->response_format != RF_TEXT) {
        j->constraint = constraint_json(req->response_format == RF_JSON_SCHEMA ? req->schema : NULL, &err);
    } else {
        return 0;
    }
    if (!j->constraint) {
        bool json = req->response_format != RF_TEXT;
        return api_error(e, 400, "invalid_request_error", json ? "response_format" : "tools", NULL, "%s%s",
                         json && req->response_format == RF_JSON_SCHEMA ? "response_format.json_schema.schema: " : "",
                         err.msg);
    }
    return 0;
}

/* Text to ids: JSON_NUL stands for a NUL character (json_io.h), tokenized as one; nothing is cut. */
static int tokenize_text(Server *s, char *text, size_t len, int32_t **ids, size_t *n, ApiError *e) {
    DlError derr = {{0}};
    len = json_nul_decode(text, len);
    if (dl_tokenize(s->engine, text, len, true, ids, n, &derr))
        return api_error(e, 500, "server_error", NULL, NULL, "tokenizer: %s", derr.msg);
    return 0;
}

int prepare_job(Server *s, const ApiRequest *req, int index, Job **out, bool *starts_in_reasoning, ApiError *e) {
    *out = NULL;
    *starts_in_reasoning = false;
    Job *j = job_new();
    if (!j) return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    int32_t *ids = NULL;
    size_t n = 0;
    const ApiPrompt *prompt = req->chat ? NULL : &req->prompts[index];
    if (req->chat) {
        char *text = NULL;
        size_t len = 0;
        bool forced = false;
        if (render_chat(s, req, &text, &len, &forced, e)) goto fail;
        *starts_in_reasoning = !forced && format_has_thinking(s->tmpl.format) && chat_prompt_opens_reasoning(text, len);
        int rc = tokenize_text(s, text, len, &ids, &n, e);
        free(text);
        if (rc) goto fail;
        if (sv_prepare(s->vision, s->engine, req->messages, &ids, &n, &j->mm, e)) goto fail;
        if (attach_constraint(s, req, j, e)) goto fail;
        const int32_t im_start = dl_token_id(s->engine, "<|im_start|>");
        for (size_t i = n; i-- > 0 && im_start >= 0;)
            if (ids[i] == im_start) {
                j->n_stable = i;
                break;
            }
    } else if (prompt->text) {
        char *text = strdup(prompt->text);
        int rc = text ? tokenize_text(s, text, strlen(text), &ids, &n, e)
                      : api_error(e, 500, "server_error", NULL, NULL, "out of memory");
        free(text);
        if (rc) goto fail;
    } else {
        ids = malloc(sizeof *ids * prompt->n_ids);
        if (!ids) {
            api_error(e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        memcpy(ids, prompt->ids, sizeof *ids * prompt->n_ids);
        n = prompt->n_ids;
    }
    if (!req->chat && attach_constraint(s, req, j, e)) goto fail; /* grammar, json_schema */
    const int n_ctx = s->info->n_ctx;
    if (n == 0) {
        api_error(e, 400, "invalid_request_error", req->chat ? "messages" : "prompt", NULL, "the prompt is empty");
        goto fail;
    }
    if (n >= (size_t)n_ctx) {
        api_error(e, 400, "invalid_request_error", req->chat ? "messages" : "prompt", "context_length_exceeded",
                  "This model's maximum context length is %d tokens. However, your %s resulted in %zu tokens.", n_ctx,
                  req->chat ? "messages" : "prompt", n);
        goto fail;
    }
    int room = n_ctx - (int)n;
    if (req->max_tokens_given && req->max_tokens > room) {
        api_error(e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                  "This model's maximum context length is %d tokens. However, you requested %zu tokens (%zu in the "
                  "%s, %d in the completion).",
                  n_ctx, n + (size_t)req->max_tokens, n, req->chat ? "messages" : "prompt", req->max_tokens);
        goto fail;
    }
    j->prompt = ids;
    j->n_prompt = n;
    ids = NULL;
    j->max_tokens = req->max_tokens > 0 && req->max_tokens < room ? req->max_tokens : room;
    j->sp = req->sp;
    if (req->spx && !(j->spx = sampler_spec_copy(req->spx))) {
        api_error(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    j->use_cache = req->cache_prompt;
    j->logprobs = req->logprobs;
    if (stop_init(&j->stop, req->stop, req->n_stop)) {
        api_error(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    j->stop.include = req->llama.include_stop;
    j->render_special = req->llama.keep_special;
    j->slot_id = -1;
    if (req->llama.id_slot_given) {
        if (req->llama.id_slot >= s->cfg.parallel) {
            api_error(e, 400, "invalid_request_error", "id_slot", NULL, "id_slot %d: the server has %d slot(s)",
                      req->llama.id_slot, s->cfg.parallel);
            goto fail;
        }
        j->slot_id = req->llama.id_slot;
    }
    int n_eog = 0;
    for (int32_t t = 0; req->ignore_eos && t < s->info->n_vocab; t++) n_eog += dl_token_is_eog(s->engine, t);
    if (req->n_bias || n_eog) {
        j->bias = malloc(sizeof *j->bias * (size_t)(req->n_bias + n_eog));
        if (!j->bias) {
            api_error(e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        if (req->n_bias) memcpy(j->bias, req->bias, sizeof *j->bias * (size_t)req->n_bias);
        j->n_bias = req->n_bias;
        for (int32_t t = 0; n_eog && t < s->info->n_vocab; t++)
            if (dl_token_is_eog(s->engine, t)) j->bias[j->n_bias++] = (LogitBias){t, -INFINITY};
    }
    *out = j;
    return 0;
fail:
    free(ids);
    job_unref(j);
    return -1;
}
