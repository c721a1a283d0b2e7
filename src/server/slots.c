/* slots.c — llama-server's slot actions, POST /slots/{id}?action=save|restore|erase:
 *   save    {"filename": "NAME"} -> the slot's state to --slot-save-path/NAME, in the checkpoint file format
 *           (prefix_cache.h: header, model fingerprint, tokens, snapshot, checksums); answers
 *           {"id_slot", "filename", "n_saved", "n_written", "timings": {"save_ms"}}
 *   restore {"filename": "NAME"} -> that state back into the slot (the same model and settings only);
 *           {"id_slot", "filename", "n_restored", "n_read", "timings": {"restore_ms"}}
 *   erase   -> the slot emptied; {"id_slot", "n_erased"}
 * The slot must be idle (409 otherwise). NAME is a plain file name: no '/', no leading '.', at most 200 bytes.
 * Without --slot-save-path save and restore are refused (501), as llama-server refuses them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/json_io.h"
#include "server/server_internal.h"
#include "server/util.h"

static int status_of(int rc) { return rc == SLOT_BUSY ? 409 : rc == SLOT_BAD ? 400 : 500; }

static bool plain_name(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 200 || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || s[i] == '\\' || (unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0xC0) return false;
    return true;
}

int slot_action(Server *s, const char *id_text, const char *action, const char *body, size_t len, char **json,
                ApiError *e) {
    *json = NULL;
    int id = atoi(id_text);
    if (strlen(id_text) > 3 || id >= s->cfg.parallel)
        return api_error(e, 404, "invalid_request_error", NULL, "not_found", "no slot %s (the server has %d)",
                         id_text, s->cfg.parallel);
    if (!action) return api_error(e, 400, "invalid_request_error", "action", NULL, "give ?action=save, restore or erase");
    bool save = !strcmp(action, "save"), restore = !strcmp(action, "restore"), erase = !strcmp(action, "erase");
    if (!save && !restore && !erase)
        return api_error(e, 400, "invalid_request_error", "action", NULL,
                         "unknown action '%.40s' (save, restore or erase)", action);
    Err err = {{0}};
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "id_slot", id);
    if (erase) {
        size_t n = 0;
        int rc = sched_slot_erase(s->sched, id, &n, &err);
        if (rc) return cJSON_Delete(out), api_error(e, status_of(rc), NULL, NULL, NULL, "%s", err.msg);
        cJSON_AddNumberToObject(out, "n_erased", (double)n);
        *json = json_print(out);
        cJSON_Delete(out);
        return 0;
    }
    if (!s->cfg.slot_save_path)
        return cJSON_Delete(out), api_error(e, 501, "invalid_request_error", NULL, "not_supported",
                                            "slot %s needs the server started with --slot-save-path DIR", action);
    char msg[300], where[96];
    cJSON *doc = len ? json_parse_body(body, len, false, msg, sizeof msg, where, sizeof where) : NULL;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(doc, "filename");
    if (!cJSON_IsString(fn) || !plain_name(fn->valuestring)) {
        cJSON_Delete(doc);
        cJSON_Delete(out);
        return api_error(e, 400, "invalid_request_error", "filename", NULL,
                         "a body {\"filename\": NAME} is needed, NAME a plain file name (no '/', no leading '.')");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", s->cfg.slot_save_path, fn->valuestring);
    cJSON_AddStringToObject(out, "filename", fn->valuestring);
    char fn_copy[256];
    snprintf(fn_copy, sizeof fn_copy, "%s", fn->valuestring);
    cJSON_Delete(doc);
    double t0 = now_s();
    int32_t *tokens = NULL;
    void *data = NULL;
    size_t n = 0, size = 0;
    int rc = 0;
    if (save) {
        rc = sched_slot_save(s->sched, id, &tokens, &n, &data, &size, &err);
        if (!rc && pcache_file_write(s->fingerprint, path, tokens, n, data, size, &err)) rc = SLOT_FAILED;
    } else if (pcache_file_read(s->fingerprint, path, &tokens, &n, &data, &size, &err)) {
        rc = SLOT_BAD;
    } else {
        rc = sched_slot_restore(s->sched, id, tokens, n, data, size, &err);
    }
    free(tokens);
    free(data);
    if (rc) { /* the message names the file, not the server's directory */
        const char *m = err.msg, *dir = strstr(m, path);
        char shown[600];
        if (dir) snprintf(shown, sizeof shown, "%.*s%s%s", (int)(dir - m), m, fn_copy, dir + strlen(path));
        else snprintf(shown, sizeof shown, "%s", m);
        return cJSON_Delete(out), api_error(e, status_of(rc), NULL, NULL, NULL, "%s", shown);
    }
    struct stat sb;
    double bytes = stat(path, &sb) == 0 ? (double)sb.st_size : 0;
    cJSON_AddNumberToObject(out, save ? "n_saved" : "n_restored", (double)n);
    cJSON_AddNumberToObject(out, save ? "n_written" : "n_read", bytes);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(out, "timings"), save ? "save_ms" : "restore_ms",
                            (now_s() - t0) * 1000.0);
    srv_log(LOG_INFO, "slot %d: %s %s (%zu tokens)", id, save ? "saved to" : "restored from", path, n);
    *json = json_print(out);
    cJSON_Delete(out);
    return 0;
}
