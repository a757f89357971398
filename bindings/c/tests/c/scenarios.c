/*
 * Runs the behaviour scenarios shared by every language (the JSON files of tests/scenarios, format in
 * tests/scenarios/README.md) through the C API, against a real local state store.
 *
 *   scenarios <server port> <scenarios dir>
 *
 * The JSON is read with cJSON (Debian package libcjson-dev). A step type or field this
 * runner does not know fails it; the counts are printed at the end. Exit status 0 only when
 * every step of every scenario passed.
 */
#define _POSIX_C_SOURCE 200809L

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mqstate.h"

#define WAIT_SECONDS 20 /* anything that must happen may take this long on a busy machine */
#define MAX_NAMED 16
#define MAX_FILES 64

/* ---------------------------------------------------------------------------------------- */
/* Failing loudly                                                                           */

static const char *current_file = "";
static int current_step = 0;
static const cJSON *current_json = NULL;

static void fail(const char *fmt, ...) {
    va_list ap;
    char *step = current_json ? cJSON_PrintUnformatted(current_json) : NULL;
    fprintf(stderr, "FAILED at %s step %d: %s\n  ", current_file, current_step, step ? step : "");
    free(step);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void *checked_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fail("out of memory");
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* Bytes and the scenarios' value forms                                                     */

typedef struct {
    uint8_t *data;
    size_t len;
    bool present; /* false: absent (a JSON null, a GET miss) */
} bytes_t;

static void bytes_free(bytes_t *b) {
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

static bytes_t bytes_copy(const uint8_t *data, size_t len) {
    bytes_t b = {checked_malloc(len), len, true};
    if (len) memcpy(b.data, data, len);
    return b;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A scenario value: a string is its UTF-8, {"hex": ...} is binary, null is absent. */
static bytes_t value_of(const cJSON *v) {
    if (cJSON_IsNull(v)) return (bytes_t){NULL, 0, false};
    if (cJSON_IsString(v)) return bytes_copy((const uint8_t *)v->valuestring, strlen(v->valuestring));
    const cJSON *hex = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "hex") : NULL;
    if (!cJSON_IsString(hex) || cJSON_GetArraySize(v) != 1) fail("not a value (a string or {\"hex\": ...})");
    size_t n = strlen(hex->valuestring);
    if (n % 2) fail("odd hex length");
    bytes_t b = {checked_malloc(n / 2), n / 2, true};
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hex_digit(hex->valuestring[2 * i]), lo = hex_digit(hex->valuestring[2 * i + 1]);
        if (hi < 0 || lo < 0) fail("bad hex digit");
        b.data[i] = (uint8_t)(hi * 16 + lo);
    }
    return b;
}

static bool bytes_equal(const bytes_t *a, const bytes_t *b) {
    if (a->present != b->present) return false;
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* For messages: the bytes as hex. Returns a static buffer. */
static const char *show(const bytes_t *b) {
    static char buf[256];
    if (!b->present) return "(absent)";
    size_t i = 0;
    for (; i < b->len && 2 * i + 3 < sizeof buf; i++) snprintf(buf + 2 * i, 3, "%02x", b->data[i]);
    buf[2 * i] = 0;
    return buf;
}

/* ---------------------------------------------------------------------------------------- */
/* Steps' fields                                                                            */

static const cJSON *field(const cJSON *step, const char *name) {
    return cJSON_GetObjectItemCaseSensitive(step, name);
}

static const char *str_field(const cJSON *step, const char *name, const char *dflt) {
    const cJSON *f = field(step, name);
    if (!f) {
        if (!dflt) fail("missing field %s", name);
        return dflt;
    }
    if (!cJSON_IsString(f)) fail("%s must be a string", name);
    return f->valuestring;
}

static uint64_t u64_field(const cJSON *step, const char *name) {
    const cJSON *f = field(step, name);
    if (!cJSON_IsNumber(f) || f->valuedouble < 0) fail("%s must be a whole number", name);
    return (uint64_t)f->valuedouble;
}

static bool bool_field(const cJSON *step, const char *name) {
    return cJSON_IsTrue(field(step, name));
}

/* The fields each step type takes (besides op, client and expect). */
static const struct {
    const char *op;
    const char *fields[8];
} STEPS[] = {
    {"connect", {"url", "host", "tls", "connect_timeout_ms"}},
    {"close", {0}},
    {"set", {"key", "value", "nx", "nex", "expiry_ms", "fencing_token", "save_version"}},
    {"get", {"key"}},
    {"del", {"key", "fencing_token"}},
    {"vdel", {"key", "value", "fencing_token"}},
    {"observe", {"key", "observer"}},
    {"expect_notification", {"observer", "operation", "value"}},
    {"flood", {"key", "count"}},
    {"expect_lagged", {"observer", "total"}},
    {"hlc", {"ms", "counter", "node_id"}},
    {"lease_acquire", {"lease", "name", "holder", "ttl_ms", "save_token"}},
    {"lease_auto_renew", {"lease", "fraction"}},
    {"expect_lease_event", {"lease", "event", "skip"}},
    {"lease_release", {"lease"}},
    {"lock", {"lock", "name", "holder", "session", "ttl_ms", "timeout_ms"}},
    {"lock_edit", {"lock", "name", "holder", "key", "ttl_ms", "timeout_ms", "new_value"}},
    {"unlock", {"lock"}},
    {"try_campaign", {"election", "name", "candidate", "term_ms"}},
    {"leader", {"election"}},
    {"resign", {"election"}},
    {"fill", {"prefix", "count", "start", "delete"}},
    {"scan", {"pattern"}},
    {"scan_open", {"scan", "pattern"}},
    {"scan_page", {"scan"}},
    {"scan_rest", {"scan", "must_include"}},
};

static const char *validate(const cJSON *step) {
    if (!cJSON_IsObject(step)) fail("a step must be an object");
    const char *op = str_field(step, "op", NULL);
    for (size_t i = 0; i < sizeof STEPS / sizeof STEPS[0]; i++) {
        if (strcmp(STEPS[i].op, op) != 0) continue;
        const cJSON *f;
        cJSON_ArrayForEach(f, step) {
            bool known = !strcmp(f->string, "op") || !strcmp(f->string, "client") || !strcmp(f->string, "expect");
            for (size_t j = 0; !known && j < 8 && STEPS[i].fields[j]; j++) known = !strcmp(STEPS[i].fields[j], f->string);
            if (!known) fail("step %s takes no field %s", op, f->string);
        }
        return op;
    }
    fail("unknown step type %s", op);
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Observations: a slow reader                                                              */

/* The callback hands each notification over one at a time and waits until the scenario has
 * taken it: a reader that does not read holds the library's thread, so the observation's
 * buffer fills and the library reports the lag, as in the other languages. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool full, closing;
    mqstate_notification_kind kind;
    bytes_t value;
    mqstate_status error_status;
    uint64_t missed; /* of an MQSTATE_LAGGED error: mqstate_notification_missed */
    char error_message[512];
} observer_t;

static void on_notification(void *user_data, const struct mqstate_notification *n) {
    observer_t *o = user_data;
    mqstate_notification_kind kind = 0;
    bytes_t value = {NULL, 0, false};
    mqstate_status error_status = MQSTATE_OK;
    uint64_t missed = 0;
    const char *message = "";
    if (mqstate_notification_get_kind(n, &kind) != MQSTATE_OK) return;
    if (kind == MQSTATE_NOTIFICATION_SET) {
        const uint8_t *v;
        size_t len;
        if (mqstate_notification_value(n, &v, &len) == MQSTATE_OK) value = bytes_copy(v, len);
    } else if (kind == MQSTATE_NOTIFICATION_ERROR) {
        mqstate_notification_error(n, &error_status, &message);
        if (error_status == MQSTATE_LAGGED && mqstate_notification_missed(n, &missed) != MQSTATE_OK) missed = 0;
    }
    pthread_mutex_lock(&o->mu);
    while (o->full && !o->closing) pthread_cond_wait(&o->cv, &o->mu);
    if (o->closing) {
        pthread_mutex_unlock(&o->mu);
        bytes_free(&value);
        return;
    }
    o->full = true;
    o->kind = kind;
    o->value = value;
    o->error_status = error_status;
    o->missed = missed;
    snprintf(o->error_message, sizeof o->error_message, "%s", message ? message : "");
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* Takes the next notification (waiting up to WAIT_SECONDS); the caller owns item->value. */
static void observer_take(observer_t *o, observer_t *item) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += WAIT_SECONDS;
    pthread_mutex_lock(&o->mu);
    while (!o->full) {
        if (pthread_cond_timedwait(&o->cv, &o->mu, &deadline) == ETIMEDOUT) {
            pthread_mutex_unlock(&o->mu);
            fail("no notification within %d s", WAIT_SECONDS);
        }
    }
    item->kind = o->kind;
    item->value = o->value;
    item->error_status = o->error_status;
    item->missed = o->missed;
    memcpy(item->error_message, o->error_message, sizeof item->error_message);
    o->value = (bytes_t){NULL, 0, false};
    o->full = false;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void observer_release(observer_t *o) {
    pthread_mutex_lock(&o->mu);
    o->closing = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* ---------------------------------------------------------------------------------------- */
/* One scenario's named objects                                                             */

typedef struct {
    char name[32];
    void *ptr;
    void *extra;
} named_t;

typedef struct {
    named_t items[MAX_NAMED];
    size_t n;
} table_t;

static named_t *lookup(table_t *t, const char *name, bool must) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->items[i].name, name)) return &t->items[i];
    if (must) fail("nothing named %s", name);
    return NULL;
}

static named_t *insert(table_t *t, const char *name) {
    named_t *e = lookup(t, name, false);
    if (e) return e;
    if (t->n == MAX_NAMED) fail("too many named objects");
    e = &t->items[t->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    return e;
}

static struct {
    char server_url[64];
    char blackhole_url[64];
    char blackhole_port[8];
    char uid[384];
    char prefix[384];
    table_t clients, observers, tokens, leases, guards, elections, scans;
} run;

static char *subst(const char *s) {
    /* Every placeholder is shorter than what replaces it at most 3 times over. */
    size_t cap = strlen(s) * 4 + 256;
    char *out = checked_malloc(cap);
    size_t o = 0;
    while (*s) {
        const char *rep = NULL;
        size_t skip = 0;
        if (!strncmp(s, "{server}", 8)) rep = run.server_url, skip = 8;
        else if (!strncmp(s, "{blackhole_port}", 16)) rep = run.blackhole_port, skip = 16;
        else if (!strncmp(s, "{blackhole}", 11)) rep = run.blackhole_url, skip = 11;
        else if (!strncmp(s, "{uid}", 5)) rep = run.uid, skip = 5;
        if (rep) {
            size_t n = strlen(rep);
            if (o + n + 1 > cap) fail("substitution too long");
            memcpy(out + o, rep, n);
            o += n;
            s += skip;
        } else {
            if (o + 2 > cap) fail("substitution too long");
            out[o++] = *s++;
        }
    }
    out[o] = 0;
    return out;
}

/* A key or name of the scenario, with the run's prefix (the empty one stays empty). */
static bytes_t key_of(const cJSON *step, const char *name) {
    const cJSON *f = field(step, name);
    if (!f) fail("missing field %s", name);
    bytes_t raw = value_of(f);
    if (raw.len == 0) return raw;
    size_t p = strlen(run.prefix);
    bytes_t k = {checked_malloc(p + raw.len), p + raw.len, true};
    memcpy(k.data, run.prefix, p);
    memcpy(k.data + p, raw.data, raw.len);
    bytes_free(&raw);
    return k;
}

/* ---------------------------------------------------------------------------------------- */
/* Listed keys (the scan steps)                                                             */

typedef struct {
    bytes_t *items;
    size_t len, cap;
} keylist_t;

static void keylist_push(keylist_t *l, const uint8_t *data, size_t len) {
    if (l->len == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        bytes_t *items = realloc(l->items, cap * sizeof *items);
        if (!items) fail("out of memory");
        l->items = items;
        l->cap = cap;
    }
    l->items[l->len++] = bytes_copy(data, len);
}

static void keylist_free(keylist_t *l) {
    for (size_t i = 0; i < l->len; i++) bytes_free(&l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int compare_bytes(const void *a, const void *b) {
    const bytes_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->data, y->data, n) : 0;
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

static bool keylist_contains(const keylist_t *l, const bytes_t *key) {
    for (size_t i = 0; i < l->len; i++)
        if (bytes_equal(&l->items[i], key)) return true;
    return false;
}

/* The keys as the scan steps give them: without the run's prefix, sorted by their bytes. */
static keylist_t keylist_listed(const keylist_t *l) {
    keylist_t out = {0};
    size_t p = strlen(run.prefix);
    for (size_t i = 0; i < l->len; i++) {
        const bytes_t *k = &l->items[i];
        if (k->len < p || memcmp(k->data, run.prefix, p) != 0) fail("the key %s lacks the run's prefix", show(k));
        keylist_push(&out, k->data + p, k->len - p);
    }
    if (out.len) qsort(out.items, out.len, sizeof out.items[0], compare_bytes);
    return out;
}

/* Appends the keys of a page to `l`. */
static void keylist_add_page(keylist_t *l, const struct mqstate_scan_page *page) {
    size_t n = 0;
    if (mqstate_scan_page_count(page, &n) != MQSTATE_OK) fail("mqstate_scan_page_count");
    for (size_t i = 0; i < n; i++) {
        const uint8_t *key;
        size_t len;
        if (mqstate_scan_page_key(page, i, &key, &len) != MQSTATE_OK) fail("mqstate_scan_page_key");
        keylist_push(l, key, len);
    }
}

/* Reads pages with mqstate_scan_next_page until the last (MQSTATE_NOT_FOUND), adding their
 * keys to `l`; returns that status, or the error that stopped it. */
static mqstate_status read_pages(const struct mqstate_scan *scan, keylist_t *l) {
    struct mqstate_scan_page *page = NULL;
    mqstate_status s;
    while ((s = mqstate_scan_next_page(scan, &page)) == MQSTATE_OK) {
        keylist_add_page(l, page);
        mqstate_scan_page_free(page);
        page = NULL;
    }
    return s;
}

static struct mqstate_client *client_of(const cJSON *step) {
    return lookup(&run.clients, str_field(step, "client", "a"), true)->ptr;
}

static const struct mqstate_version *token_of(const cJSON *step) {
    const cJSON *f = field(step, "fencing_token");
    if (!f) return NULL;
    if (!cJSON_IsString(f)) fail("fencing_token names a saved token");
    return lookup(&run.tokens, f->valuestring, true)->ptr;
}

static void save_token(const char *name, struct mqstate_version *token) {
    named_t *e = insert(&run.tokens, name);
    mqstate_version_free(e->ptr);
    e->ptr = token;
}

/* ---------------------------------------------------------------------------------------- */
/* Outcomes                                                                                 */

typedef enum { OUT_NONE, OUT_BOOL, OUT_INT, OUT_STR, OUT_BYTES, OUT_KEYS } out_type;

typedef struct {
    const char *field; /* the expect field this step gives, or NULL */
    out_type type;
    bool b;
    long long i;
    char s[128];
    bytes_t bytes;
    const char *field2; /* a second bytes field (lock_edit gives old and value) */
    bytes_t bytes2;
    keylist_t keys;     /* OUT_KEYS: listed keys, without the run's prefix, sorted */
    const char *count_field; /* a second, whole-number field (the scan steps' count) */
    long long count;
} outcome_t;

/* The edit function of lock_edit: records the old value, returns the scenario's new one. */
typedef struct {
    bytes_t new_value, old;
    int calls;
} edit_t;

static bool on_edit(void *user_data, const uint8_t *old_value, size_t old_len, const uint8_t **new_value,
                    size_t *new_len) {
    edit_t *e = user_data;
    e->calls++;
    bytes_free(&e->old);
    e->old = old_value ? bytes_copy(old_value, old_len) : (bytes_t){NULL, 0, false};
    *new_value = e->new_value.present ? (e->new_value.data ? e->new_value.data : (const uint8_t *)"") : NULL;
    *new_len = e->new_value.len;
    return true;
}

static const char *kind_of_status(mqstate_status s) {
    switch (s) {
    case MQSTATE_INVALID_ARGUMENT: return "invalid_argument";
    case MQSTATE_TIMEOUT: return "timeout";
    case MQSTATE_DISCONNECTED: return "disconnected";
    case MQSTATE_CONNECTION_ERROR: return "connection";
    case MQSTATE_SERVICE_ERROR: return "service";
    case MQSTATE_UNEXPECTED_PAYLOAD: return "unexpected_payload";
    case MQSTATE_CLOCK_DRIFT: return "clock_drift";
    case MQSTATE_LAGGED: return "lagged";
    case MQSTATE_AUTHENTICATION_FAILED: return "authentication";
    case MQSTATE_NOT_SUPPORTED: return "not_supported";
    case MQSTATE_LOCK_LOST: return "lock_lost";
    default: return NULL;
    }
}

static const char *service_kind_name(mqstate_service_error k) {
    switch (k) {
    case MQSTATE_SERVICE_ERROR_TIMESTAMP_SKEW: return "timestamp_skew";
    case MQSTATE_SERVICE_ERROR_FENCING_TOKEN_REQUIRED: return "fencing_token_required";
    case MQSTATE_SERVICE_ERROR_FENCING_TOKEN_SKEW: return "fencing_token_skew";
    case MQSTATE_SERVICE_ERROR_FENCING_TOKEN_LOWER_VERSION: return "fencing_token_lower_version";
    case MQSTATE_SERVICE_ERROR_QUOTA_EXCEEDED: return "quota_exceeded";
    case MQSTATE_SERVICE_ERROR_SYNTAX_ERROR: return "syntax_error";
    case MQSTATE_SERVICE_ERROR_NOT_AUTHORIZED: return "not_authorized";
    case MQSTATE_SERVICE_ERROR_UNKNOWN_COMMAND: return "unknown_command";
    case MQSTATE_SERVICE_ERROR_WRONG_NUMBER_OF_ARGUMENTS: return "wrong_number_of_arguments";
    case MQSTATE_SERVICE_ERROR_MISSING_TIMESTAMP: return "missing_timestamp";
    case MQSTATE_SERVICE_ERROR_MALFORMED_TIMESTAMP: return "malformed_timestamp";
    case MQSTATE_SERVICE_ERROR_KEY_LENGTH_ZERO: return "key_length_zero";
    default: return "unknown";
    }
}

/* The error of a failed call: status, message and service kind, taken right after it. */
typedef struct {
    mqstate_status status;
    char message[1024];
    const char *service;
} error_t_;

static error_t_ last_error;

/* Records a status that is an error (not OK, NOT_FOUND or NOT_APPLIED). */
static bool failed(mqstate_status s) {
    if (s == MQSTATE_OK || s == MQSTATE_NOT_FOUND || s == MQSTATE_NOT_APPLIED) return false;
    size_t written = 0;
    last_error.status = s;
    last_error.message[0] = 0;
    mqstate_error_message(last_error.message, sizeof last_error.message, &written);
    last_error.service = NULL;
    if (s == MQSTATE_SERVICE_ERROR) {
        mqstate_service_error k = 0;
        if (mqstate_error_service_kind(&k) == MQSTATE_OK) last_error.service = service_kind_name(k);
    }
    return true;
}

/* ---------------------------------------------------------------------------------------- */
/* Executing a step: true when it failed with an error (in last_error)                      */

static bool execute(const char *op, const cJSON *step, outcome_t *out) {
    mqstate_status s;
    if (!strcmp(op, "connect")) {
        char *url;
        if (field(step, "url")) {
            url = subst(str_field(step, "url", NULL));
        } else {
            /* Settings field by field with no port: the C API takes a port in
             * mqstate_connect_options_new, so "no port" is said the C way, with a URL without
             * one, and the core picks the port from TLS (mqtts:// means TLS). */
            char *host = subst(str_field(step, "host", NULL));
            const char *scheme = bool_field(step, "tls") ? "mqtts://" : "mqtt://";
            url = malloc(strlen(scheme) + strlen(host) + 1);
            if (!url) fail("out of memory");
            strcpy(url, scheme);
            strcat(url, host);
            free(host);
        }
        struct mqstate_connect_options *options = NULL;
        s = mqstate_connect_options_from_url(url, &options);
        free(url);
        if (failed(s)) return true;
        if (field(step, "connect_timeout_ms")) {
            s = mqstate_connect_options_set_connect_timeout_ms(options, u64_field(step, "connect_timeout_ms"));
            if (failed(s)) {
                mqstate_connect_options_free(options);
                return true;
            }
        }
        struct mqstate_client *client = NULL;
        s = mqstate_client_new(options, &client);
        mqstate_connect_options_free(options);
        if (failed(s)) return true;
        named_t *e = insert(&run.clients, str_field(step, "client", "a"));
        if (e->ptr) fail("client %s is already open", e->name);
        e->ptr = client;
    } else if (!strcmp(op, "close")) {
        named_t *e = lookup(&run.clients, str_field(step, "client", "a"), true);
        if (failed(mqstate_client_close(e->ptr))) return true;
    } else if (!strcmp(op, "set")) {
        bytes_t key = key_of(step, "key"), value = value_of(field(step, "value"));
        mqstate_set_condition condition = MQSTATE_SET_ALWAYS;
        if (bool_field(step, "nx")) condition |= MQSTATE_SET_NX;
        if (bool_field(step, "nex")) condition |= MQSTATE_SET_NEX;
        uint64_t expiry_ms = field(step, "expiry_ms") ? u64_field(step, "expiry_ms") : 0;
        struct mqstate_version *version = NULL;
        s = mqstate_client_set(client_of(step), key.data, key.len, value.data, value.len, condition,
                               field(step, "expiry_ms") ? &expiry_ms : NULL, token_of(step), &version);
        bytes_free(&key);
        bytes_free(&value);
        if (failed(s)) return true;
        if (field(step, "save_version")) {
            if (!version) fail("SET not applied: no version to save");
            save_token(str_field(step, "save_version", NULL), version);
        } else {
            mqstate_version_free(version);
        }
        out->field = "applied", out->type = OUT_BOOL, out->b = (s == MQSTATE_OK);
    } else if (!strcmp(op, "get")) {
        bytes_t key = key_of(step, "key");
        struct mqstate_value *value = NULL;
        s = mqstate_client_get(client_of(step), key.data, key.len, &value);
        bytes_free(&key);
        if (failed(s)) return true;
        out->field = "value", out->type = OUT_BYTES, out->bytes = (bytes_t){NULL, 0, false};
        if (s == MQSTATE_OK) {
            const uint8_t *data;
            size_t len;
            if (mqstate_value_bytes(value, &data, &len) != MQSTATE_OK) fail("mqstate_value_bytes");
            out->bytes = bytes_copy(data, len);
            mqstate_value_free(value);
        }
    } else if (!strcmp(op, "del")) {
        bytes_t key = key_of(step, "key");
        s = mqstate_client_del(client_of(step), key.data, key.len, token_of(step));
        bytes_free(&key);
        if (failed(s)) return true;
        out->field = "deleted", out->type = OUT_INT, out->i = (s == MQSTATE_OK);
    } else if (!strcmp(op, "vdel")) {
        bytes_t key = key_of(step, "key"), value = value_of(field(step, "value"));
        s = mqstate_client_vdel(client_of(step), key.data, key.len, value.data, value.len, token_of(step));
        bytes_free(&key);
        bytes_free(&value);
        if (failed(s)) return true;
        out->field = "outcome", out->type = OUT_STR;
        snprintf(out->s, sizeof out->s, "%s",
                 s == MQSTATE_OK ? "deleted" : s == MQSTATE_NOT_FOUND ? "not_found" : "value_mismatch");
    } else if (!strcmp(op, "observe")) {
        bytes_t key = key_of(step, "key");
        observer_t *o = checked_malloc(sizeof *o);
        memset(o, 0, sizeof *o);
        pthread_mutex_init(&o->mu, NULL);
        pthread_cond_init(&o->cv, NULL);
        named_t *e = insert(&run.observers, str_field(step, "observer", NULL));
        if (e->ptr) fail("observer %s exists", e->name);
        e->ptr = o; /* freed after the clients are */
        s = mqstate_client_observe(client_of(step), key.data, key.len, on_notification, NULL, o);
        bytes_free(&key);
        if (failed(s)) return true;
    } else if (!strcmp(op, "expect_notification")) {
        observer_t item;
        observer_take(lookup(&run.observers, str_field(step, "observer", NULL), true)->ptr, &item);
        if (item.kind == MQSTATE_NOTIFICATION_ERROR) {
            last_error.status = item.error_status;
            snprintf(last_error.message, sizeof last_error.message, "%s", item.error_message);
            last_error.service = NULL;
            return true;
        }
        const char *operation = item.kind == MQSTATE_NOTIFICATION_SET ? "set" : "delete";
        if (strcmp(operation, str_field(step, "operation", NULL)) != 0)
            fail("a %s notification, expected %s", operation, str_field(step, "operation", NULL));
        if (field(step, "value")) {
            bytes_t want = value_of(field(step, "value"));
            if (!bytes_equal(&want, &item.value)) fail("notification value %s", show(&item.value));
            bytes_free(&want);
        }
        bytes_free(&item.value);
    } else if (!strcmp(op, "flood")) {
        bytes_t key = key_of(step, "key");
        uint64_t count = u64_field(step, "count");
        for (uint64_t i = 0; i < count; i++) {
            char v[24];
            int n = snprintf(v, sizeof v, "%llu", (unsigned long long)i);
            s = mqstate_client_set(client_of(step), key.data, key.len, (const uint8_t *)v, (size_t)n,
                                   MQSTATE_SET_ALWAYS, NULL, NULL, NULL);
            if (s != MQSTATE_OK) {
                bytes_free(&key);
                if (failed(s)) return true;
                fail("flood: SET #%llu not applied", (unsigned long long)i);
            }
        }
        bytes_free(&key);
    } else if (!strcmp(op, "expect_lagged")) {
        observer_t *o = lookup(&run.observers, str_field(step, "observer", NULL), true)->ptr;
        uint64_t total = u64_field(step, "total"), received = 0, lost = 0, lags = 0;
        while (received + lost < total) {
            observer_t item;
            observer_take(o, &item);
            if (item.kind == MQSTATE_NOTIFICATION_ERROR) {
                if (item.error_status != MQSTATE_LAGGED) fail("notification error: %s", item.error_message);
                /* The count, as a number (mqstate_notification_missed), never 0. */
                if (item.missed == 0) fail("lagged without a count: %s", item.error_message);
                lost += item.missed;
                lags++;
            } else {
                if (item.kind != MQSTATE_NOTIFICATION_SET) fail("a flood gives set notifications only");
                received++;
            }
            bytes_free(&item.value);
        }
        if (received + lost != total) fail("%llu read + %llu lost != %llu", (unsigned long long)received,
                                           (unsigned long long)lost, (unsigned long long)total);
        if (lags == 0) fail("no lagged error after %llu unread notifications", (unsigned long long)total);
    } else if (!strcmp(op, "hlc")) {
        struct mqstate_version *v = NULL;
        s = mqstate_version_new(u64_field(step, "ms"), u64_field(step, "counter"),
                                str_field(step, "node_id", NULL), &v);
        if (failed(s)) return true;
        const char *text;
        size_t len;
        if (mqstate_version_string(v, &text, &len) != MQSTATE_OK) fail("mqstate_version_string");
        out->field = "text", out->type = OUT_STR;
        snprintf(out->s, sizeof out->s, "%.*s", (int)len, text);
        mqstate_version_free(v);
    } else if (!strcmp(op, "lease_acquire")) {
        bytes_t name = key_of(step, "name"), holder = value_of(field(step, "holder"));
        struct mqstate_lease *lease = NULL;
        s = mqstate_lease_new(client_of(step), name.data, name.len, holder.data, holder.len, &lease);
        bytes_free(&name);
        bytes_free(&holder);
        if (failed(s)) return true;
        named_t *e = insert(&run.leases, str_field(step, "lease", NULL));
        mqstate_lease_events_free(e->extra);
        mqstate_lease_free(e->ptr);
        e->ptr = lease, e->extra = NULL;
        struct mqstate_version *token = NULL;
        s = mqstate_lease_acquire(lease, u64_field(step, "ttl_ms"), &token);
        if (failed(s)) return true;
        if (s == MQSTATE_OK && field(step, "save_token")) save_token(str_field(step, "save_token", NULL), token);
        else mqstate_version_free(token);
        out->field = "acquired", out->type = OUT_BOOL, out->b = (s == MQSTATE_OK);
    } else if (!strcmp(op, "lease_auto_renew")) {
        const cJSON *fraction = field(step, "fraction");
        if (!cJSON_IsNumber(fraction)) fail("fraction must be a number");
        named_t *e = lookup(&run.leases, str_field(step, "lease", NULL), true);
        /* The events first (the stream sees the events after it was made). */
        mqstate_lease_events_free(e->extra);
        e->extra = NULL;
        if (failed(mqstate_lease_events_new(e->ptr, (struct mqstate_lease_events **)&e->extra))) return true;
        if (failed(mqstate_lease_auto_renew(e->ptr, fraction->valuedouble))) return true;
    } else if (!strcmp(op, "expect_lease_event")) {
        named_t *e = lookup(&run.leases, str_field(step, "lease", NULL), true);
        if (!e->extra) fail("expect_lease_event before lease_auto_renew (which subscribes to the events)");
        const char *wanted = str_field(step, "event", NULL);
        const cJSON *skip = field(step, "skip");
        for (;;) {
            struct mqstate_lease_event *event = NULL;
            const char *name;
            if (failed(mqstate_lease_events_next(e->extra, WAIT_SECONDS * 1000, &event))) return true;
            if (mqstate_lease_event_name(event, &name) != MQSTATE_OK) fail("mqstate_lease_event_name");
            bool match = !strcmp(name, wanted), skipped = false;
            const cJSON *s_item;
            cJSON_ArrayForEach(s_item, skip) {
                if (cJSON_IsString(s_item) && !strcmp(s_item->valuestring, name)) skipped = true;
            }
            if (match) {
                /* acquired / renewed carry the new token, the others none. */
                const struct mqstate_version *token;
                bool has_token = mqstate_lease_event_token(event, &token) == MQSTATE_OK;
                if (has_token != (!strcmp(name, "acquired") || !strcmp(name, "renewed")))
                    fail("lease event %s: token %s", name, has_token ? "present" : "absent");
            }
            char seen[32];
            snprintf(seen, sizeof seen, "%s", name);
            mqstate_lease_event_free(event);
            if (match) break;
            if (!skipped) fail("lease event %s while waiting for %s", seen, wanted);
        }
    } else if (!strcmp(op, "lease_release")) {
        s = mqstate_lease_release(lookup(&run.leases, str_field(step, "lease", NULL), true)->ptr);
        if (failed(s)) return true;
        out->field = "released", out->type = OUT_BOOL, out->b = (s == MQSTATE_OK);
    } else if (!strcmp(op, "lock")) {
        bytes_t name = key_of(step, "name"), holder = value_of(field(step, "holder"));
        struct mqstate_lock *lock = NULL;
        if (field(step, "session")) {
            bytes_t session = value_of(field(step, "session"));
            s = mqstate_lock_new_with_session(client_of(step), name.data, name.len, holder.data, holder.len,
                                              session.data, session.len, &lock);
            bytes_free(&session);
        } else {
            s = mqstate_lock_new(client_of(step), name.data, name.len, holder.data, holder.len, &lock);
        }
        bytes_free(&name);
        bytes_free(&holder);
        if (failed(s)) return true;
        named_t *e = insert(&run.guards, str_field(step, "lock", NULL));
        mqstate_lock_guard_free(e->extra);
        mqstate_lock_free(e->ptr);
        e->ptr = lock;
        e->extra = NULL;
        struct mqstate_lock_guard *guard = NULL;
        s = mqstate_lock_lock(lock, u64_field(step, "ttl_ms"), u64_field(step, "timeout_ms"), &guard);
        if (failed(s)) return true;
        e->extra = guard;
        out->field = "locked", out->type = OUT_BOOL, out->b = (s == MQSTATE_OK);
    } else if (!strcmp(op, "lock_edit")) {
        bytes_t name = key_of(step, "name"), holder = value_of(field(step, "holder")), key = key_of(step, "key");
        struct mqstate_lock *lock = NULL;
        s = mqstate_lock_new(client_of(step), name.data, name.len, holder.data, holder.len, &lock);
        bytes_free(&name);
        bytes_free(&holder);
        if (failed(s)) {
            bytes_free(&key);
            return true;
        }
        edit_t edit = {.new_value = value_of(field(step, "new_value"))};
        struct mqstate_value *written = NULL;
        s = mqstate_lock_edit(lock, key.data, key.len, u64_field(step, "ttl_ms"), u64_field(step, "timeout_ms"),
                              on_edit, &edit, &written);
        mqstate_lock_free(lock);
        bytes_free(&key);
        bytes_free(&edit.new_value);
        if (failed(s)) {
            bytes_free(&edit.old);
            return true;
        }
        if (edit.calls != 1) fail("the edit function was called %d times", edit.calls);
        out->field = "old", out->type = OUT_BYTES, out->bytes = edit.old;
        out->field2 = "value", out->bytes2 = (bytes_t){NULL, 0, false};
        if (written) {
            const uint8_t *data;
            size_t len;
            if (mqstate_value_bytes(written, &data, &len) != MQSTATE_OK) fail("mqstate_value_bytes");
            out->bytes2 = bytes_copy(data, len);
            mqstate_value_free(written);
        }
    } else if (!strcmp(op, "unlock")) {
        named_t *e = lookup(&run.guards, str_field(step, "lock", NULL), true);
        if (!e->extra) fail("lock %s is not held", e->name);
        s = mqstate_lock_unlock(e->extra);
        if (failed(s)) return true;
        out->field = "unlocked", out->type = OUT_BOOL, out->b = (s == MQSTATE_OK);
    } else if (!strcmp(op, "try_campaign")) {
        bytes_t name = key_of(step, "name"), candidate = value_of(field(step, "candidate"));
        struct mqstate_election *election = NULL;
        s = mqstate_election_new(client_of(step), name.data, name.len, candidate.data, candidate.len, &election);
        bytes_free(&name);
        bytes_free(&candidate);
        if (failed(s)) return true;
        named_t *e = insert(&run.elections, str_field(step, "election", NULL));
        mqstate_election_free(e->ptr);
        e->ptr = election;
        struct mqstate_version *token = NULL;
        s = mqstate_election_try_campaign(election, u64_field(step, "term_ms"), &token);
        if (failed(s)) return true;
        mqstate_version_free(token);
        out->field = "elected", out->type = OUT_BOOL, out->b = (s == MQSTATE_OK);
    } else if (!strcmp(op, "leader")) {
        struct mqstate_value *leader = NULL;
        s = mqstate_election_leader(lookup(&run.elections, str_field(step, "election", NULL), true)->ptr, &leader);
        if (failed(s)) return true;
        out->field = "leader", out->type = OUT_BYTES, out->bytes = (bytes_t){NULL, 0, false};
        if (s == MQSTATE_OK) {
            const uint8_t *data;
            size_t len;
            if (mqstate_value_bytes(leader, &data, &len) != MQSTATE_OK) fail("mqstate_value_bytes");
            out->bytes = bytes_copy(data, len);
            mqstate_value_free(leader);
        }
    } else if (!strcmp(op, "resign")) {
        s = mqstate_election_resign(lookup(&run.elections, str_field(step, "election", NULL), true)->ptr);
        if (failed(s)) return true;
        out->field = "resigned", out->type = OUT_BOOL, out->b = (s == MQSTATE_OK);
    } else if (!strcmp(op, "fill")) {
        bytes_t prefix = key_of(step, "prefix");
        uint64_t start = field(step, "start") ? u64_field(step, "start") : 0, count = u64_field(step, "count");
        bool delete = bool_field(step, "delete");
        uint8_t *key = checked_malloc(prefix.len + 24);
        if (prefix.len) memcpy(key, prefix.data, prefix.len);
        for (uint64_t i = start; i < start + count; i++) {
            int n = snprintf((char *)key + prefix.len, 24, "%04llu", (unsigned long long)i);
            size_t key_len = prefix.len + (size_t)n;
            s = delete ? mqstate_client_del(client_of(step), key, key_len, NULL)
                       : mqstate_client_set(client_of(step), key, key_len, (const uint8_t *)"v", 1,
                                            MQSTATE_SET_ALWAYS, NULL, NULL, NULL);
            if (s != MQSTATE_OK) {
                free(key);
                bytes_free(&prefix);
                if (failed(s)) return true;
                fail("fill: %s #%llu gave %s", delete ? "DEL" : "SET", (unsigned long long)i, mqstate_status_name(s));
            }
        }
        free(key);
        bytes_free(&prefix);
    } else if (!strcmp(op, "scan")) {
        /* C has no iterator: the language's own iteration is the mqstate_scan_next_page loop. */
        bytes_t pattern = key_of(step, "pattern");
        struct mqstate_scan *scan = NULL;
        s = mqstate_scan_new(client_of(step), pattern.data, pattern.len, &scan);
        bytes_free(&pattern);
        if (failed(s)) return true;
        keylist_t listed = {0};
        s = read_pages(scan, &listed);
        mqstate_scan_free(scan);
        if (s != MQSTATE_NOT_FOUND) {
            keylist_free(&listed);
            if (failed(s)) return true;
            fail("mqstate_scan_next_page gave %s", mqstate_status_name(s));
        }
        out->field = "keys", out->type = OUT_KEYS, out->keys = keylist_listed(&listed);
        out->count_field = "count", out->count = (long long)listed.len;
        keylist_free(&listed);
    } else if (!strcmp(op, "scan_open")) {
        bytes_t pattern = key_of(step, "pattern");
        struct mqstate_scan *scan = NULL;
        s = mqstate_scan_new(client_of(step), pattern.data, pattern.len, &scan);
        bytes_free(&pattern);
        if (failed(s)) return true;
        named_t *e = insert(&run.scans, str_field(step, "scan", NULL));
        mqstate_scan_free(e->ptr);
        if (e->extra) keylist_free(e->extra);
        free(e->extra);
        e->ptr = scan;
        e->extra = checked_malloc(sizeof(keylist_t));
        memset(e->extra, 0, sizeof(keylist_t));
    } else if (!strcmp(op, "scan_page")) {
        named_t *e = lookup(&run.scans, str_field(step, "scan", NULL), true);
        struct mqstate_scan_page *page = NULL;
        s = mqstate_scan_next_page(e->ptr, &page);
        if (failed(s)) return true; /* the scan stays where it was */
        if (s == MQSTATE_OK) {
            keylist_add_page(e->extra, page);
            mqstate_scan_page_free(page);
        }
        bool done = false;
        if (failed(mqstate_scan_is_done(e->ptr, &done))) return true;
        out->field = "done", out->type = OUT_BOOL, out->b = done;
    } else if (!strcmp(op, "scan_rest")) {
        named_t *e = lookup(&run.scans, str_field(step, "scan", NULL), true);
        keylist_t *listed = e->extra;
        s = read_pages(e->ptr, listed);
        if (s != MQSTATE_NOT_FOUND) {
            if (failed(s)) return true;
            fail("mqstate_scan_next_page gave %s", mqstate_status_name(s));
        }
        const cJSON *must = field(step, "must_include");
        if (!cJSON_IsArray(must)) fail("must_include: a list of keys");
        keylist_t missing = {0};
        const cJSON *k;
        cJSON_ArrayForEach(k, must) {
            bytes_t raw = value_of(k);
            size_t p = strlen(run.prefix);
            bytes_t key = {checked_malloc(p + raw.len), p + raw.len, true};
            memcpy(key.data, run.prefix, p);
            if (raw.len) memcpy(key.data + p, raw.data, raw.len);
            if (!keylist_contains(listed, &key)) keylist_push(&missing, key.data, key.len);
            bytes_free(&key);
            bytes_free(&raw);
        }
        out->field = "missing", out->type = OUT_KEYS, out->keys = keylist_listed(&missing);
        out->count_field = "count", out->count = (long long)listed->len;
        keylist_free(&missing);
    } else {
        fail("unknown step type %s", op);
    }
    return false;
}

/* Compares the outcome (or the error in last_error) with the step's expect. */
static void check(const cJSON *step, bool errored, outcome_t *out) {
    const cJSON *expect = field(step, "expect");
    const cJSON *kind = expect ? cJSON_GetObjectItemCaseSensitive(expect, "error") : NULL;
    if (kind) {
        if (!errored) fail("expected an error of kind %s, but the step succeeded", kind->valuestring);
        const char *got = kind_of_status(last_error.status);
        if (strcmp(kind->valuestring, "any") != 0 && (!got || strcmp(got, kind->valuestring) != 0))
            fail("error %s (%s), expected kind %s", mqstate_status_name(last_error.status), last_error.message,
                 kind->valuestring);
        const cJSON *service = cJSON_GetObjectItemCaseSensitive(expect, "service");
        if (service && (!last_error.service || strcmp(last_error.service, service->valuestring) != 0))
            fail("service kind %s, expected %s", last_error.service ? last_error.service : "(none)",
                 service->valuestring);
        const cJSON *part;
        cJSON_ArrayForEach(part, cJSON_GetObjectItemCaseSensitive(expect, "message_contains")) {
            char *p = subst(part->valuestring);
            if (!strstr(last_error.message, p)) fail("the message \"%s\" does not contain \"%s\"", last_error.message, p);
            free(p);
        }
        return;
    }
    if (errored)
        fail("unexpected error %s: %s", mqstate_status_name(last_error.status), last_error.message);
    const cJSON *want;
    cJSON_ArrayForEach(want, expect) {
        if (out->count_field && !strcmp(out->count_field, want->string)) {
            if (!cJSON_IsNumber(want) || (long long)want->valuedouble != out->count)
                fail("%s: got %lld", want->string, out->count);
            continue;
        }
        if (out->field2 && !strcmp(out->field2, want->string)) {
            bytes_t w = value_of(want);
            if (!bytes_equal(&w, &out->bytes2)) fail("%s: got %s", want->string, show(&out->bytes2));
            bytes_free(&w);
            continue;
        }
        if (!out->field || strcmp(out->field, want->string) != 0) fail("the step gives no %s", want->string);
        switch (out->type) {
        case OUT_BOOL:
            if (!cJSON_IsBool(want) || cJSON_IsTrue(want) != out->b) fail("%s: got %d", want->string, out->b);
            break;
        case OUT_INT:
            if (!cJSON_IsNumber(want) || (long long)want->valuedouble != out->i) fail("%s: got %lld", want->string, out->i);
            break;
        case OUT_STR:
            if (!cJSON_IsString(want) || strcmp(want->valuestring, out->s) != 0) fail("%s: got \"%s\"", want->string, out->s);
            break;
        case OUT_BYTES: {
            bytes_t w = value_of(want);
            if (!bytes_equal(&w, &out->bytes)) fail("%s: got %s", want->string, show(&out->bytes));
            bytes_free(&w);
            break;
        }
        case OUT_KEYS: {
            if (!cJSON_IsArray(want)) fail("%s must be a list of keys", want->string);
            bool same = (size_t)cJSON_GetArraySize(want) == out->keys.len;
            size_t i = 0;
            const cJSON *w_item;
            cJSON_ArrayForEach(w_item, want) {
                if (!same) break;
                bytes_t w = value_of(w_item);
                same = bytes_equal(&w, &out->keys.items[i++]);
                bytes_free(&w);
            }
            if (!same) {
                fprintf(stderr, "%s: got %zu key(s):\n", want->string, out->keys.len);
                for (i = 0; i < out->keys.len && i < 20; i++) fprintf(stderr, "  %s\n", show(&out->keys.items[i]));
                fail("%s: not the %d key(s) expected", want->string, cJSON_GetArraySize(want));
            }
            break;
        }
        case OUT_NONE:
            fail("the step gives no %s", want->string);
        }
    }
}

static void cleanup(void) {
    /* Unblock the callbacks first, so that closing a client can end its observations. */
    for (size_t i = 0; i < run.observers.n; i++) observer_release(run.observers.items[i].ptr);
    for (size_t i = 0; i < run.guards.n; i++) {
        mqstate_lock_guard_free(run.guards.items[i].extra);
        mqstate_lock_free(run.guards.items[i].ptr);
    }
    for (size_t i = 0; i < run.leases.n; i++) {
        mqstate_lease_events_free(run.leases.items[i].extra);
        mqstate_lease_free(run.leases.items[i].ptr);
    }
    for (size_t i = 0; i < run.elections.n; i++) mqstate_election_free(run.elections.items[i].ptr);
    for (size_t i = 0; i < run.scans.n; i++) {
        mqstate_scan_free(run.scans.items[i].ptr);
        if (run.scans.items[i].extra) keylist_free(run.scans.items[i].extra);
        free(run.scans.items[i].extra);
    }
    for (size_t i = 0; i < run.clients.n; i++) mqstate_client_free(run.clients.items[i].ptr);
    for (size_t i = 0; i < run.observers.n; i++) {
        observer_t *o = run.observers.items[i].ptr;
        bytes_free(&o->value);
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
        free(o);
    }
    for (size_t i = 0; i < run.tokens.n; i++) mqstate_version_free(run.tokens.items[i].ptr);
    memset(&run.clients, 0, sizeof run.clients);
    memset(&run.observers, 0, sizeof run.observers);
    memset(&run.tokens, 0, sizeof run.tokens);
    memset(&run.leases, 0, sizeof run.leases);
    memset(&run.guards, 0, sizeof run.guards);
    memset(&run.elections, 0, sizeof run.elections);
    memset(&run.scans, 0, sizeof run.scans);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail("cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = checked_malloc((size_t)n + 1);
    if (fread(text, 1, (size_t)n, f) != (size_t)n) fail("cannot read %s", path);
    text[n] = 0;
    fclose(f);
    return text;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s <server port> <scenarios dir>\n", argv[0]);
        return 2;
    }
    /* A listener that accepts TCP connections (into the backlog) and never answers. */
    int blackhole = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t addr_len = sizeof addr;
    if (blackhole < 0 || bind(blackhole, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(blackhole, 64) != 0 ||
        getsockname(blackhole, (struct sockaddr *)&addr, &addr_len) != 0) {
        perror("black-hole listener");
        return 1;
    }
    snprintf(run.server_url, sizeof run.server_url, "mqtt://127.0.0.1:%s", argv[1]);
    snprintf(run.blackhole_port, sizeof run.blackhole_port, "%u", (unsigned)ntohs(addr.sin_port));
    snprintf(run.blackhole_url, sizeof run.blackhole_url, "mqtt://127.0.0.1:%s", run.blackhole_port);

    DIR *dir = opendir(argv[2]);
    if (!dir) {
        perror(argv[2]);
        return 1;
    }
    char *files[MAX_FILES];
    size_t nfiles = 0;
    struct dirent *d;
    while ((d = readdir(dir))) {
        size_t n = strlen(d->d_name);
        if (n > 5 && !strcmp(d->d_name + n - 5, ".json")) {
            if (nfiles == MAX_FILES) fail("more than %d scenarios", MAX_FILES);
            files[nfiles++] = strdup(d->d_name);
        }
    }
    closedir(dir);
    if (nfiles == 0) fail("no scenarios in %s", argv[2]);
    qsort(files, nfiles, sizeof files[0], compare_names);

    long run_id = (long)getpid();
    int scenarios = 0, steps = 0, not_run = 0;
    for (size_t f = 0; f < nfiles; f++) {
        char path[1024], name[256];
        snprintf(path, sizeof path, "%s/%s", argv[2], files[f]);
        snprintf(name, sizeof name, "%.*s", (int)(strlen(files[f]) - 5), files[f]);
        char *text = read_file(path);
        cJSON *doc = cJSON_Parse(text);
        free(text);
        current_file = files[f];
        current_step = 0;
        current_json = NULL;
        const cJSON *list = doc ? cJSON_GetObjectItemCaseSensitive(doc, "steps") : NULL;
        if (!cJSON_IsArray(list)) fail("not a scenario (no steps array)");
        const cJSON *top;
        cJSON_ArrayForEach(top, doc) {
            if (strcmp(top->string, "description") && strcmp(top->string, "not_in") && strcmp(top->string, "steps"))
                fail("unknown top-level field %s", top->string);
        }
        const cJSON *lang;
        cJSON_ArrayForEach(lang, cJSON_GetObjectItemCaseSensitive(doc, "not_in")) {
            if (strcmp(lang->string, "rust") && strcmp(lang->string, "c") && strcmp(lang->string, "python") &&
                strcmp(lang->string, "node"))
                fail("not_in names an unknown language %s", lang->string);
            if (!cJSON_IsString(lang) || !lang->valuestring[0]) fail("not_in.%s must give the reason", lang->string);
        }
        const cJSON *reason = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "not_in"), "c");
        if (reason) {
            printf("scenario %s: NOT RUN in C: %s\n", name, reason->valuestring);
            not_run++;
            cJSON_Delete(doc);
            continue;
        }
        snprintf(run.uid, sizeof run.uid, "%ld-%ld-%s", run_id, (long)time(NULL), name);
        snprintf(run.prefix, sizeof run.prefix, "scenarios/c/%ld-%ld/%s/", run_id, (long)time(NULL), name);
        printf("scenario %s (%d steps)\n", name, cJSON_GetArraySize(list));
        fflush(stdout);
        const cJSON *step;
        cJSON_ArrayForEach(step, list) {
            current_step++;
            current_json = step;
            const char *op = validate(step);
            outcome_t out = {0};
            bool errored = execute(op, step, &out);
            check(step, errored, &out);
            if (out.type == OUT_BYTES) bytes_free(&out.bytes);
            keylist_free(&out.keys);
            bytes_free(&out.bytes2);
            steps++;
        }
        current_json = NULL;
        cleanup();
        cJSON_Delete(doc);
        scenarios++;
    }
    for (size_t f = 0; f < nfiles; f++) free(files[f]);
    close(blackhole);
    printf("c: %d scenarios, %d steps passed (%d not run)\n", scenarios, steps, not_run);
    return 0;
}
