/*
 * Tests of the IoT Hub device client of the mqstate C API (mqstate_iothub_device_*,
 * mqstate_c2d_*), against the local IoT Hub of `mqstate serve`.
 *
 *   test_iothub DEVICE_PORT ADMIN_PORT AMQP_PORT CA_FILE
 *   test_iothub x509 DEVICE_PORT ADMIN_PORT AMQP_PORT CA_FILE CERT KEY THUMBPRINT OTHER_CERT OTHER_KEY
 *
 * DEVICE_PORT: the hub's MQTT 3.1.1 device endpoint on 127.0.0.1 (plain TCP; TLS in the x509
 * form); ADMIN_PORT: its HTTP+JSON admin API (docs/iothub.md), which this program drives with
 * a minimal HTTP/1.1 client to register devices, send cloud-to-device messages and read the
 * queues, the feedback and the telemetry; AMQP_PORT: its AMQP device endpoint (TLS); CA_FILE:
 * the certificate the hub generated (--iothub-ca-out), which the devices trust. The hub runs
 * with a 4 s lock timeout and feedback batched every 200 ms (scripts/test-c).
 *
 * The x509 form runs against a hub whose MQTT endpoint is TLS (--iothub-tls): it registers a
 * self-signed X.509 device with THUMBPRINT (SHA-256 of CERT), which connects with CERT and
 * KEY over MQTT and over AMQP; OTHER_CERT and OTHER_KEY are a certificate the hub must refuse.
 *
 * Built by scripts/test-c with -Wall -Wextra -Werror -pedantic -fsanitize=address and run
 * with LeakSanitizer on. Prints "ok - NAME" or "FAIL - NAME" per test case and closes with
 * "C IoT Hub tests: N passed, M failed"; exits non-zero if any failed.
 */
#define _POSIX_C_SOURCE 200809L

#include "mqstate.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Generous: the machine running the tests may be very busy (and this runs under ASan). */
#define WAIT_MS 30000u

#include "harness.h"

static uint16_t g_device_port;
static uint16_t g_admin_port;
static uint16_t g_amqp_port;
static const char *g_ca_file;
/* The x509 form's files and the device certificate's thumbprint. */
static const char *g_cert, *g_key, *g_thumbprint, *g_other_cert, *g_other_key;
static char g_run[32]; /* makes this run's device ids unique */

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------------------------------ */
/* The hub's admin API: a minimal HTTP/1.1 client (one request per connection)                 */
/* ------------------------------------------------------------------------------------------ */

/* Sends METHOD PATH with an optional JSON body; returns the HTTP status and the response body
 * (malloc'd, NUL-terminated, in *body_out, may be NULL), or -1 on a transport failure. */
static int http(const char *method, const char *path, const char *json, char **body_out) {
    if (body_out) *body_out = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(g_admin_port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    size_t body_len = json ? strlen(json) : 0;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, body_len);
    if (n < 0 || (size_t)n >= sizeof head || write(fd, head, (size_t)n) != n ||
        (body_len > 0 && write(fd, json, body_len) != (ssize_t)body_len)) {
        close(fd);
        return -1;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1024 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    int status = -1;
    if (sscanf(buf, "HTTP/1.1 %d", &status) != 1) status = -1;
    char *start = strstr(buf, "\r\n\r\n");
    /* The admin API answers with a Content-Length body (no chunked encoding). */
    if (body_out && start) *body_out = strdup(start + 4);
    free(buf);
    return status;
}

/* GETs PATH and parses the JSON answer (NULL on failure). */
static cJSON *get_json(const char *path) {
    char *body = NULL;
    int status = http("GET", path, NULL, &body);
    cJSON *json = status == 200 && body ? cJSON_Parse(body) : NULL;
    free(body);
    return json;
}

/* Registers DEVICE (unique to this run, written to id_out) and returns its connection string
 * (malloc'd). */
static char *add_device(const char *name, char *id_out, size_t id_len) {
    snprintf(id_out, id_len, "%s-%s", g_run, name);
    char path[256];
    snprintf(path, sizeof path, "/devices/%s", id_out);
    int status = http("PUT", path, NULL, NULL);
    if (status != 201) fail_at(__FILE__, __LINE__, "PUT %s: HTTP %d", path, status);
    snprintf(path, sizeof path, "/devices/%s/token?ttlSecs=3600", id_out);
    cJSON *token = get_json(path);
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(token, "connectionString");
    char *out = strdup(cJSON_IsString(cs) ? cs->valuestring : "");
    cJSON_Delete(token);
    return out;
}

/* Sends a C2D message: `json` is the admin API's send body. */
static void send_c2d(const char *device, const char *json) {
    char path[256];
    snprintf(path, sizeof path, "/devices/%s/messages/devicebound", device);
    int status = http("POST", path, json, NULL);
    if (status != 201) fail_at(__FILE__, __LINE__, "POST %s %s: HTTP %d", path, json, status);
}

/* The device queue's depth, and how many of its recent messages were Completed. */
static void queue(const char *device, int *depth, int *completed) {
    char path[256];
    snprintf(path, sizeof path, "/devices/%s/messages/devicebound", device);
    cJSON *q = get_json(path);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(q, "depth");
    *depth = cJSON_IsNumber(d) ? d->valueint : -1;
    *completed = 0;
    const cJSON *finished = cJSON_GetObjectItemCaseSensitive(q, "finished");
    const cJSON *m;
    cJSON_ArrayForEach(m, finished) {
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(m, "state");
        if (cJSON_IsString(state) && strcmp(state->valuestring, "Completed") == 0) (*completed)++;
    }
    cJSON_Delete(q);
}

/* Waits (up to WAIT_MS) until the device queue is empty with `completed` Completed messages. */
static bool wait_completed(const char *device, int completed) {
    long deadline = now_ms() + (long)WAIT_MS;
    int depth = -1, done = -1;
    while (now_ms() < deadline) {
        queue(device, &depth, &done);
        if (depth == 0 && done == completed) return true;
        sleep_ms(50);
    }
    fprintf(stderr, "    queue of %s: depth %d, completed %d (want 0, %d)\n", device, depth, done,
            completed);
    return false;
}

static mqstate_iothub_device *connect_device(const char *cs, uint32_t token_lifetime_secs) {
    mqstate_iothub_device *device = NULL;
    CHECK_OK(mqstate_iothub_device_new(cs, "127.0.0.1", g_device_port, false, NULL,
                                       token_lifetime_secs, &device));
    if (device == NULL) {
        fprintf(stderr, "cannot connect a device to 127.0.0.1:%u; giving up\n",
                (unsigned)g_device_port);
        exit(2);
    }
    return device;
}

static mqstate_c2d_message *receive(mqstate_iothub_device *device) {
    mqstate_c2d_message *msg = NULL;
    CHECK_OK(mqstate_iothub_device_receive(device, WAIT_MS, &msg));
    return msg;
}

static const char *system_property(const mqstate_c2d_message *msg, const char *name) {
    const char *value = NULL;
    if (mqstate_c2d_message_system_property(msg, name, &value) != MQSTATE_OK) return NULL;
    return value;
}

/* Feedback records taken from the hub's batches (GET /messages/servicebound/feedback, each
 * batch completed once read): every test's records, kept by message id. */
static struct {
    char id[96];
    char status[32];
} g_feedback[64];
static int g_feedback_count;

/* Waits (up to WAIT_MS) for the feedback record of message `mid`; its statusCode (a static
 * buffer), or NULL. */
static const char *feedback(const char *mid) {
    long deadline = now_ms() + (long)WAIT_MS;
    for (;;) {
        for (int i = 0; i < g_feedback_count; i++)
            if (strcmp(g_feedback[i].id, mid) == 0) return g_feedback[i].status;
        if (now_ms() >= deadline) return NULL;
        char *body = NULL;
        int status = http("GET", "/messages/servicebound/feedback?waitSecs=1", NULL, &body);
        cJSON *batch = status == 200 && body ? cJSON_Parse(body) : NULL;
        free(body);
        if (!batch) {
            if (status != 204) sleep_ms(100);
            continue;
        }
        const cJSON *record;
        cJSON_ArrayForEach(record, cJSON_GetObjectItemCaseSensitive(batch, "records")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(record, "originalMessageId");
            const cJSON *code = cJSON_GetObjectItemCaseSensitive(record, "statusCode");
            if (cJSON_IsString(id) && cJSON_IsString(code) && g_feedback_count < 64) {
                snprintf(g_feedback[g_feedback_count].id, sizeof g_feedback[0].id, "%s",
                         id->valuestring);
                snprintf(g_feedback[g_feedback_count].status, sizeof g_feedback[0].status, "%s",
                         code->valuestring);
                g_feedback_count++;
            }
        }
        const cJSON *token = cJSON_GetObjectItemCaseSensitive(batch, "lockToken");
        if (cJSON_IsString(token)) {
            char path[256];
            snprintf(path, sizeof path, "/messages/servicebound/feedback/%s", token->valuestring);
            int done = http("DELETE", path, NULL, NULL);
            if (done != 204) fail_at(__FILE__, __LINE__, "DELETE %s: HTTP %d", path, done);
        }
        cJSON_Delete(batch);
    }
}

/* Options for the hub's AMQP endpoint: TLS on 127.0.0.1, trusting the hub's certificate. */
static mqstate_iothub_options *amqp_options(const char *cs) {
    mqstate_iothub_options *options = NULL;
    CHECK_OK(mqstate_iothub_options_new(cs, &options));
    CHECK_OK(mqstate_iothub_options_set_transport(options, "amqp"));
    CHECK_OK(mqstate_iothub_options_set_host(options, "127.0.0.1"));
    CHECK_OK(mqstate_iothub_options_set_port(options, g_amqp_port));
    CHECK_OK(mqstate_iothub_options_set_ca_file(options, g_ca_file));
    return options;
}

static mqstate_iothub_device *connect_with(const mqstate_iothub_options *options) {
    mqstate_iothub_device *device = NULL;
    CHECK_OK(mqstate_iothub_device_connect(options, &device));
    if (device == NULL) {
        fprintf(stderr, "cannot connect a device; giving up\n");
        exit(2);
    }
    return device;
}

static mqstate_iothub_device *connect_amqp(const char *cs) {
    mqstate_iothub_options *options = amqp_options(cs);
    mqstate_iothub_device *device = connect_with(options);
    mqstate_iothub_options_free(options); /* the device copied them */
    return device;
}

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static void test_every_property_null_and_empty(void) {
    char id[96];
    char *cs = add_device("props", id, sizeof id);
    mqstate_iothub_device *device = connect_device(cs, 0);
    send_c2d(id, "{\"payloadBase64\":\"AAEC/w==\",\"messageId\":\"id 1/\xc3\xa9\","
                 "\"correlationId\":\"c&1\",\"userId\":\"u=1\",\"contentType\":\"application/json\","
                 "\"contentEncoding\":\"utf-8\",\"ack\":\"full\",\"properties\":{"
                 "\"colour\":\"dark blue/&x=y\",\"nothing\":null,\"empty\":\"\"}}");
    mqstate_c2d_message *msg = receive(device);
    if (msg) {
        const uint8_t *data = NULL;
        size_t len = 0;
        CHECK_OK(mqstate_c2d_message_payload(msg, &data, &len));
        CHECK(len == 4 && data[0] == 0 && data[1] == 1 && data[2] == 2 && data[3] == 0xff);
        CHECK_STR(system_property(msg, "message_id"), "id 1/\xc3\xa9");
        CHECK_STR(system_property(msg, "correlation_id"), "c&1");
        CHECK_STR(system_property(msg, "user_id"), "u=1");
        char to[160];
        snprintf(to, sizeof to, "/devices/%s/messages/devicebound", id);
        CHECK_STR(system_property(msg, "to"), to);
        const char *exp = system_property(msg, "expiry_time");
        CHECK(exp != NULL && exp[strlen(exp) - 1] == 'Z');
        CHECK_STR(system_property(msg, "content_type"), "application/json");
        CHECK_STR(system_property(msg, "content_encoding"), "utf-8");
        CHECK_STR(system_property(msg, "ack"), "full");
        const char *v = NULL;
        CHECK_STATUS(mqstate_c2d_message_system_property(msg, "colour", &v),
                     MQSTATE_INVALID_ARGUMENT);
        size_t count = 0;
        CHECK_OK(mqstate_c2d_message_property_count(msg, &count));
        CHECK(count == 3);
        int seen = 0;
        for (size_t i = 0; i < count; i++) {
            const char *name = NULL, *value = NULL;
            CHECK_OK(mqstate_c2d_message_property(msg, i, &name, &value));
            if (name && strcmp(name, "colour") == 0) {
                CHECK_STR(value, "dark blue/&x=y");
                seen |= 1;
            } else if (name && strcmp(name, "nothing") == 0) {
                CHECK(value == NULL); /* a null property */
                seen |= 2;
            } else if (name && strcmp(name, "empty") == 0) {
                CHECK_STR(value, ""); /* an empty one, kept apart from null */
                seen |= 4;
            }
        }
        CHECK(seen == 7);
        const char *name = NULL;
        CHECK_STATUS(mqstate_c2d_message_property(msg, 3, &name, &v), MQSTATE_INVALID_ARGUMENT);
        bool again = true;
        CHECK_OK(mqstate_c2d_message_is_redelivery(msg, &again));
        CHECK(!again);
        /* Nothing is acknowledged before the application completes the message. */
        int depth = -1, done = -1;
        queue(id, &depth, &done);
        CHECK(depth == 1 && done == 0);
        CHECK_OK(mqstate_c2d_complete(msg));
        CHECK(wait_completed(id, 1));
        CHECK_STATUS(mqstate_c2d_complete(msg), MQSTATE_INVALID_ARGUMENT);
        CHECK_MESSAGE_HAS("already completed");
        mqstate_c2d_message_free(msg);
    }
    mqstate_iothub_device_free(device);
    free(cs);
}

static void test_reject_and_abandon_not_supported(void) {
    char id[96];
    char *cs = add_device("reject", id, sizeof id);
    mqstate_iothub_device *device = connect_device(cs, 0);
    send_c2d(id, "{\"payload\":\"x\",\"messageId\":\"r1\"}");
    mqstate_c2d_message *msg = receive(device);
    if (msg) {
        CHECK_STATUS(mqstate_c2d_reject(msg), MQSTATE_NOT_SUPPORTED);
        CHECK_MESSAGE_HAS("reject is not supported over MQTT");
        CHECK_STATUS(mqstate_c2d_abandon(msg), MQSTATE_NOT_SUPPORTED);
        CHECK_MESSAGE_HAS("abandon is not supported over MQTT");
        uint32_t count = 42;
        CHECK_STATUS(mqstate_c2d_message_delivery_count(msg, &count), MQSTATE_NOT_FOUND);
        CHECK(count == 42); /* MQTT carries none; nothing written */
        int depth = -1, done = -1;
        queue(id, &depth, &done);
        CHECK(depth == 1 && done == 0);
        CHECK_OK(mqstate_c2d_complete(msg));
        CHECK(wait_completed(id, 1));
        mqstate_c2d_message_free(msg);
    }
    mqstate_iothub_device_free(device);
    free(cs);
}

static void test_out_of_order_completion(void) {
    char id[96];
    char *cs = add_device("order", id, sizeof id);
    mqstate_iothub_device *device = connect_device(cs, 0);
    char body[96];
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, "{\"payload\":\"%d\",\"messageId\":\"m%d\"}", i, i);
        send_c2d(id, body);
    }
    mqstate_c2d_message *msgs[5] = {0};
    for (int i = 0; i < 5; i++) {
        msgs[i] = receive(device);
        char want[8];
        snprintf(want, sizeof want, "m%d", i);
        CHECK(msgs[i] != NULL);
        if (msgs[i]) CHECK_STR(system_property(msgs[i], "message_id"), want);
    }
    if (msgs[0] && msgs[1] && msgs[2] && msgs[3] && msgs[4]) {
        for (int i = 4; i >= 1; i--) CHECK_OK(mqstate_c2d_complete(msgs[i]));
        sleep_ms(300);
        int depth = -1, done = -1;
        queue(id, &depth, &done);
        CHECK(depth == 5 && done == 0); /* every completion held behind m0 */
        CHECK_OK(mqstate_c2d_complete(msgs[0]));
        CHECK(wait_completed(id, 5)); /* all five, none lost */
    }
    for (int i = 0; i < 5; i++) mqstate_c2d_message_free(msgs[i]);
    mqstate_iothub_device_free(device);
    free(cs);
}

static void test_redelivery_after_lock_timeout(void) {
    char id[96];
    char *cs = add_device("lock", id, sizeof id);
    mqstate_iothub_device *device = connect_device(cs, 0);
    send_c2d(id, "{\"payload\":\"again\",\"messageId\":\"m-redeliver\"}");
    mqstate_c2d_message *first = receive(device);
    /* Left uncompleted: after the hub's 4 s lock it is delivered again. */
    mqstate_c2d_message *second = receive(device);
    if (first && second) {
        bool redelivery = false;
        CHECK_OK(mqstate_c2d_message_is_redelivery(second, &redelivery));
        CHECK(redelivery);
        CHECK_STR(system_property(second, "message_id"), "m-redeliver");
        CHECK_OK(mqstate_c2d_complete(second));
        CHECK(wait_completed(id, 1));
        CHECK_STATUS(mqstate_c2d_complete(first), MQSTATE_LOCK_LOST);
        CHECK_MESSAGE_HAS("delivered again");
    }
    mqstate_c2d_message_free(first);
    mqstate_c2d_message_free(second);
    mqstate_iothub_device_free(device);
    free(cs);
}

static void test_offline_messages_arrive_after_reconnecting(void) {
    char id[96];
    char *cs = add_device("offline", id, sizeof id);
    mqstate_iothub_device_free(connect_device(cs, 0)); /* subscribes, then goes away */
    char body[96];
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"payload\":\"offline\",\"messageId\":\"o%d\"}", i);
        send_c2d(id, body);
    }
    mqstate_iothub_device *device = connect_device(cs, 0);
    for (int i = 0; i < 3; i++) {
        mqstate_c2d_message *msg = receive(device);
        char want[8];
        snprintf(want, sizeof want, "o%d", i);
        CHECK(msg != NULL);
        if (msg) {
            CHECK_STR(system_property(msg, "message_id"), want);
            CHECK_OK(mqstate_c2d_complete(msg));
        }
        mqstate_c2d_message_free(msg);
    }
    CHECK(wait_completed(id, 3));
    mqstate_iothub_device_free(device);
    free(cs);
}

static const char *B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void base64(const uint8_t *in, size_t len, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len) v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len) v |= in[i + 2];
        out[o++] = B64[(v >> 18) & 63];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = i + 1 < len ? B64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? B64[v & 63] : '=';
    }
    out[o] = '\0';
}

static void test_telemetry_arrives_byte_exact(void) {
    char id[96];
    char *cs = add_device("tele", id, sizeof id);
    mqstate_iothub_device *device = connect_device(cs, 0);
    uint8_t body[256];
    for (int i = 0; i < 256; i++) body[i] = (uint8_t)i;
    const char *names[] = {"place", "flag", "empty"};
    const char *values[] = {"a/b&c=d \xc3\xa9", NULL, ""};
    CHECK_OK(mqstate_iothub_device_send_event(device, body, sizeof body, names, values, 3, "tm 1",
                                              "application/octet-stream"));
    const char *bad[] = {"$.mid"};
    const char *bad_values[] = {"no"};
    CHECK_STATUS(mqstate_iothub_device_send_event(device, body, 1, bad, bad_values, 1, NULL, NULL),
                 MQSTATE_INVALID_ARGUMENT);
    char path[256];
    snprintf(path, sizeof path, "/devices/%s/messages/events?since=0", id);
    cJSON *events = get_json(path);
    CHECK(cJSON_GetArraySize(events) == 1);
    const cJSON *e = cJSON_GetArrayItem(events, 0);
    char want[400];
    base64(body, sizeof body, want);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bodyBase64");
    CHECK(cJSON_IsString(b) && strcmp(b->valuestring, want) == 0);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(e, "properties");
    const cJSON *place = cJSON_GetObjectItemCaseSensitive(props, "place");
    const cJSON *flag = cJSON_GetObjectItemCaseSensitive(props, "flag");
    const cJSON *empty = cJSON_GetObjectItemCaseSensitive(props, "empty");
    CHECK(cJSON_IsString(place) && strcmp(place->valuestring, "a/b&c=d \xc3\xa9") == 0);
    CHECK(cJSON_IsNull(flag));
    CHECK(cJSON_IsString(empty) && empty->valuestring[0] == '\0');
    CHECK(cJSON_GetArraySize(props) == 3);
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(e, "systemProperties");
    const cJSON *mid = cJSON_GetObjectItemCaseSensitive(system, "$.mid");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(system, "$.ct");
    CHECK(cJSON_IsString(mid) && strcmp(mid->valuestring, "tm 1") == 0);
    CHECK(cJSON_IsString(ct) && strcmp(ct->valuestring, "application/octet-stream") == 0);
    cJSON_Delete(events);
    mqstate_iothub_device_free(device);
    free(cs);
}

/* ----- the message callback ----- */

struct inbox {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    mqstate_c2d_message *msgs[8];
    int count;
    int destroyed;
    int calls_after_destroy;
    bool callback_held_a_lock; /* a library call from the callback failed */
    mqstate_iothub_device *free_me; /* the callback frees this device on its first message */
};

static void inbox_init(struct inbox *in) {
    memset(in, 0, sizeof *in);
    pthread_mutex_init(&in->lock, NULL);
    pthread_cond_init(&in->changed, NULL);
}

static void inbox_fini(struct inbox *in) {
    pthread_mutex_destroy(&in->lock);
    pthread_cond_destroy(&in->changed);
}

static void on_message(void *user_data, mqstate_status status, mqstate_c2d_message *msg) {
    struct inbox *in = user_data;
    /* Library calls work from the callback (no library lock is held while it runs). */
    bool redelivery = true;
    if (status == MQSTATE_OK && mqstate_c2d_message_is_redelivery(msg, &redelivery) != MQSTATE_OK)
        in->callback_held_a_lock = true;
    pthread_mutex_lock(&in->lock);
    if (in->destroyed) in->calls_after_destroy++;
    mqstate_iothub_device *free_me = in->free_me;
    in->free_me = NULL;
    if (status == MQSTATE_OK && in->count < 8) {
        in->msgs[in->count++] = msg;
        msg = NULL;
    }
    pthread_cond_broadcast(&in->changed);
    pthread_mutex_unlock(&in->lock);
    mqstate_c2d_message_free(msg); /* none kept (should not happen) */
    if (free_me) mqstate_iothub_device_free(free_me); /* freeing its own device from the callback */
}

static void on_destroy(void *user_data) {
    struct inbox *in = user_data;
    pthread_mutex_lock(&in->lock);
    in->destroyed++;
    pthread_cond_broadcast(&in->changed);
    pthread_mutex_unlock(&in->lock);
}

/* Waits until `*counter >= want` (under in->lock), up to WAIT_MS. */
static bool wait_for(struct inbox *in, const int *counter, int want) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&in->lock);
    int rc = 0;
    while (*counter < want && rc == 0) rc = pthread_cond_timedwait(&in->changed, &in->lock, &deadline);
    bool ok = *counter >= want;
    pthread_mutex_unlock(&in->lock);
    return ok;
}

static void test_message_callback_and_destroy(void) {
    char id[96];
    char *cs = add_device("callback", id, sizeof id);
    mqstate_iothub_device *device = connect_device(cs, 0);
    struct inbox in, unused;
    inbox_init(&in);
    inbox_init(&unused);
    CHECK_STATUS(mqstate_iothub_device_on_message(device, NULL, on_destroy, &unused),
                 MQSTATE_NULL_PARAMETER);
    CHECK_OK(mqstate_iothub_device_on_message(device, on_message, on_destroy, &in));
    /* One callback per device; a refused registration never calls its destroy. */
    CHECK_STATUS(mqstate_iothub_device_on_message(device, on_message, on_destroy, &unused),
                 MQSTATE_INVALID_ARGUMENT);
    char body[96];
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"payload\":\"cb\",\"messageId\":\"c%d\"}", i);
        send_c2d(id, body);
    }
    CHECK(wait_for(&in, &in.count, 3));
    pthread_mutex_lock(&in.lock);
    int count = in.count;
    pthread_mutex_unlock(&in.lock);
    if (count == 3) {
        for (int i = 0; i < 3; i++) {
            char want[8];
            snprintf(want, sizeof want, "c%d", i);
            CHECK_STR(system_property(in.msgs[i], "message_id"), want);
        }
        /* Completed later, from another thread, out of order. */
        CHECK_OK(mqstate_c2d_complete(in.msgs[2]));
        CHECK_OK(mqstate_c2d_complete(in.msgs[1]));
        CHECK_OK(mqstate_c2d_complete(in.msgs[0]));
        CHECK(wait_completed(id, 3));
    }
    CHECK(in.destroyed == 0);
    mqstate_iothub_device_free(device);
    /* free returned after the last callback and destroy, which ran exactly once. */
    CHECK(in.destroyed == 1);
    sleep_ms(200);
    CHECK(in.destroyed == 1 && in.calls_after_destroy == 0);
    CHECK(!in.callback_held_a_lock);
    CHECK(unused.destroyed == 0 && unused.count == 0);
    for (int i = 0; i < in.count; i++) mqstate_c2d_message_free(in.msgs[i]);
    inbox_fini(&in);
    inbox_fini(&unused);
    free(cs);
}

static void test_callback_may_free_its_device(void) {
    char id[96];
    char *cs = add_device("cbfree", id, sizeof id);
    mqstate_iothub_device *device = connect_device(cs, 0);
    struct inbox in;
    inbox_init(&in);
    in.free_me = device;
    CHECK_OK(mqstate_iothub_device_on_message(device, on_message, on_destroy, &in));
    send_c2d(id, "{\"payload\":\"bye\",\"messageId\":\"f0\"}");
    /* The callback frees the device; destroy then runs once its callback returned. */
    CHECK(wait_for(&in, &in.destroyed, 1));
    CHECK(in.count == 1 && in.destroyed == 1 && in.calls_after_destroy == 0);
    if (in.count == 1) {
        /* Its connection is gone: the message can no longer be completed. */
        CHECK_STATUS(mqstate_c2d_complete(in.msgs[0]), MQSTATE_DISCONNECTED);
        mqstate_c2d_message_free(in.msgs[0]);
    }
    inbox_fini(&in);
    free(cs);
}

/* ----- options, AMQP, X.509 ----- */

static void test_amqp_complete_reject_abandon_with_feedback(void) {
    char id[96];
    char *cs = add_device("amqp", id, sizeof id);
    mqstate_iothub_device *device = connect_amqp(cs);
    char ok[128], bad[128], later[128], body[256];
    snprintf(ok, sizeof ok, "%s-ok", id);
    snprintf(bad, sizeof bad, "%s-bad", id);
    snprintf(later, sizeof later, "%s-later", id);
    const char *ids[] = {ok, bad, later};
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"payload\":\"x\",\"messageId\":\"%s\",\"ack\":\"full\"}",
                 ids[i]);
        send_c2d(id, body);
    }
    int settled = 0, received = 0;
    bool later_again = false;
    while (settled < 3 && received < 6) {
        mqstate_c2d_message *msg = receive(device);
        if (!msg) break;
        received++;
        const char *mid = system_property(msg, "message_id");
        uint32_t count = 99;
        CHECK_OK(mqstate_c2d_message_delivery_count(msg, &count));
        if (mid && strcmp(mid, bad) == 0) {
            CHECK(count == 0);
            CHECK_OK(mqstate_c2d_reject(msg));
            /* Settled once only. */
            CHECK_STATUS(mqstate_c2d_complete(msg), MQSTATE_INVALID_ARGUMENT);
            settled++;
        } else if (mid && strcmp(mid, later) == 0 && count == 0) {
            CHECK_OK(mqstate_c2d_abandon(msg)); /* comes again, count 1 */
        } else {
            if (mid && strcmp(mid, later) == 0) {
                later_again = count == 1;
                bool redelivery = false;
                CHECK_OK(mqstate_c2d_message_is_redelivery(msg, &redelivery));
                CHECK(redelivery);
            } else {
                CHECK(count == 0);
            }
            CHECK_OK(mqstate_c2d_complete(msg));
            settled++;
        }
        mqstate_c2d_message_free(msg);
    }
    CHECK(settled == 3 && received == 4);
    CHECK(later_again); /* abandoned, delivered again with delivery count 1 */
    CHECK_STR(feedback(ok), "Success");
    CHECK_STR(feedback(bad), "Rejected");
    CHECK_STR(feedback(later), "Success");
    CHECK(wait_completed(id, 2)); /* ok and later; bad was dead-lettered */
    mqstate_iothub_device_free(device);
    free(cs);
}

static void test_amqp_settling_after_the_connection_was_replaced_is_lock_lost(void) {
    char id[96];
    char *cs = add_device("amqplost", id, sizeof id);
    mqstate_iothub_options *options = amqp_options(cs);
    mqstate_iothub_device *device = connect_with(options);
    send_c2d(id, "{\"payload\":\"k\",\"messageId\":\"kept\"}");
    mqstate_c2d_message *before = receive(device);
    /* A second connection of the device makes the hub drop the first, which reconnects and
     * gets the message again. */
    mqstate_iothub_device_free(connect_with(options));
    mqstate_c2d_message *again = receive(device);
    if (before && again) {
        CHECK_STR(system_property(again, "message_id"), "kept");
        CHECK_STATUS(mqstate_c2d_complete(before), MQSTATE_LOCK_LOST);
        CHECK_STATUS(mqstate_c2d_reject(before), MQSTATE_LOCK_LOST);
        CHECK_STATUS(mqstate_c2d_abandon(before), MQSTATE_LOCK_LOST);
        CHECK(strcmp(mqstate_status_name(MQSTATE_LOCK_LOST), "MQSTATE_LOCK_LOST") == 0);
        CHECK_OK(mqstate_c2d_complete(again));
        CHECK(wait_completed(id, 1));
    }
    mqstate_c2d_message_free(before);
    mqstate_c2d_message_free(again);
    mqstate_iothub_device_free(device);
    mqstate_iothub_options_free(options);
    free(cs);
}

static void test_option_mistakes_are_the_cores_messages(void) {
    mqstate_iothub_options *options = NULL;
    CHECK_STATUS(mqstate_iothub_options_new(NULL, &options), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_iothub_options_new("HostName=h;DeviceId=d", &options),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK(options == NULL);
    CHECK_OK(mqstate_iothub_options_new("HostName=h.example;DeviceId=d;x509=true", &options));
    /* A certificate without its key: refused before any connection is tried. */
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, "d.pem", NULL));
    mqstate_iothub_device *device = NULL;
    CHECK_STATUS(mqstate_iothub_device_connect(options, &device), MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("an X.509 client certificate needs both cert_file and key_file");
    CHECK(device == NULL);
    CHECK_STATUS(mqstate_iothub_options_check(options), MQSTATE_INVALID_ARGUMENT);
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, NULL, NULL));
    CHECK_STATUS(mqstate_iothub_options_check(options), MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("x509=true");
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, "d.pem", "d.key"));
    CHECK_OK(mqstate_iothub_options_check(options));
    /* TLS off with TLS files. */
    CHECK_OK(mqstate_iothub_options_set_tls(options, false));
    CHECK_STATUS(mqstate_iothub_options_check(options), MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("TLS is turned off");
    /* A transport the core does not know. */
    CHECK_STATUS(mqstate_iothub_options_set_transport(options, "carrier-pigeon"),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("unknown transport");
    CHECK_STATUS(mqstate_iothub_options_set_port(NULL, 1), MQSTATE_NULL_PARAMETER);
    mqstate_iothub_options_free(options);
    mqstate_iothub_options_free(NULL);
}

static void test_x509_device_receives_over_mqtt_tls_and_rejects_over_amqp(void) {
    char id[96];
    snprintf(id, sizeof id, "%s-x509", g_run);
    char path[256], json[256], cs[256];
    snprintf(path, sizeof path, "/devices/%s", id);
    snprintf(json, sizeof json, "{\"primaryThumbprint\":\"%s\"}", g_thumbprint);
    int status = http("PUT", path, json, NULL);
    CHECK(status == 201);
    /* The connection string the SDKs take for an X.509 device: no key. */
    snprintf(cs, sizeof cs, "HostName=localhost;DeviceId=%s;x509=true", id);
    mqstate_iothub_options *options = NULL;
    CHECK_OK(mqstate_iothub_options_new(cs, &options));
    CHECK_OK(mqstate_iothub_options_set_host(options, "127.0.0.1")); /* in the certificate */
    CHECK_OK(mqstate_iothub_options_set_port(options, g_device_port));
    CHECK_OK(mqstate_iothub_options_set_ca_file(options, g_ca_file));
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, g_cert, g_key));
    mqstate_iothub_device *device = connect_with(options);
    send_c2d(id, "{\"payload\":\"by certificate\",\"messageId\":\"x1\",\"ack\":\"full\"}");
    mqstate_c2d_message *msg = receive(device);
    if (msg) {
        const uint8_t *data = NULL;
        size_t len = 0;
        CHECK_OK(mqstate_c2d_message_payload(msg, &data, &len));
        CHECK(len == 14 && memcmp(data, "by certificate", 14) == 0);
        CHECK_OK(mqstate_c2d_complete(msg));
        CHECK(wait_completed(id, 1));
        CHECK_STR(feedback("x1"), "Success");
    }
    mqstate_c2d_message_free(msg);
    mqstate_iothub_device_free(device);

    /* A certificate that is not the device's is refused, as IoT Hub refuses it. */
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, g_other_cert, g_other_key));
    device = NULL;
    CHECK_STATUS(mqstate_iothub_device_connect(options, &device), MQSTATE_AUTHENTICATION_FAILED);
    CHECK(device == NULL);
    mqstate_iothub_device_free(device);
    /* The certificate without its key: the core's message, nothing tried. */
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, g_cert, NULL));
    CHECK_STATUS(mqstate_iothub_device_connect(options, &device), MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("both cert_file and key_file");

    /* The same device over AMQP (the certificate in the TLS handshake): it can reject. */
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, g_cert, g_key));
    CHECK_OK(mqstate_iothub_options_set_transport(options, "amqp"));
    CHECK_OK(mqstate_iothub_options_set_port(options, g_amqp_port));
    device = connect_with(options);
    send_c2d(id, "{\"payload\":\"no thanks\",\"messageId\":\"x2\",\"ack\":\"full\"}");
    msg = receive(device);
    if (msg) {
        uint32_t count = 99;
        CHECK_OK(mqstate_c2d_message_delivery_count(msg, &count));
        CHECK(count == 0);
        CHECK_OK(mqstate_c2d_reject(msg));
        CHECK_STR(feedback("x2"), "Rejected");
    }
    mqstate_c2d_message_free(msg);
    mqstate_iothub_device_free(device);
    CHECK_OK(mqstate_iothub_options_set_client_cert(options, g_other_cert, g_other_key));
    device = NULL;
    CHECK_STATUS(mqstate_iothub_device_connect(options, &device), MQSTATE_AUTHENTICATION_FAILED);
    CHECK(device == NULL);
    mqstate_iothub_options_free(options);
}

int main(int argc, char **argv) {
    snprintf(g_run, sizeof g_run, "c%ld", (long)getpid());
    if (argc == 11 && strcmp(argv[1], "x509") == 0) {
        g_device_port = (uint16_t)atoi(argv[2]);
        g_admin_port = (uint16_t)atoi(argv[3]);
        g_amqp_port = (uint16_t)atoi(argv[4]);
        g_ca_file = argv[5];
        g_cert = argv[6];
        g_key = argv[7];
        g_thumbprint = argv[8];
        g_other_cert = argv[9];
        g_other_key = argv[10];
        run("an X.509 device receives over MQTT with TLS and rejects over AMQP; another "
            "certificate is refused on both",
            test_x509_device_receives_over_mqtt_tls_and_rejects_over_amqp);
        printf("C IoT Hub X.509 tests: %d passed, %d failed\n", g_passed, g_failed);
        return g_failed == 0 ? 0 : 1;
    }
    if (argc != 5) {
        fprintf(stderr,
                "usage: %s DEVICE_PORT ADMIN_PORT AMQP_PORT CA_FILE\n"
                "       %s x509 DEVICE_PORT ADMIN_PORT AMQP_PORT CA_FILE CERT KEY THUMBPRINT "
                "OTHER_CERT OTHER_KEY\n",
                argv[0], argv[0]);
        return 2;
    }
    g_device_port = (uint16_t)atoi(argv[1]);
    g_admin_port = (uint16_t)atoi(argv[2]);
    g_amqp_port = (uint16_t)atoi(argv[3]);
    g_ca_file = argv[4];

    run("every system property, a null and an empty property, explicit completion",
        test_every_property_null_and_empty);
    run("reject and abandon: MQSTATE_NOT_SUPPORTED", test_reject_and_abandon_not_supported);
    run("completion out of order acknowledges in order, nothing lost", test_out_of_order_completion);
    run("a message not completed is redelivered after the lock timeout",
        test_redelivery_after_lock_timeout);
    run("messages sent while offline arrive after reconnecting",
        test_offline_messages_arrive_after_reconnecting);
    run("telemetry with properties arrives byte-exact", test_telemetry_arrives_byte_exact);
    run("message callback: out-of-order completion, destroy exactly once",
        test_message_callback_and_destroy);
    run("a callback may free its own device", test_callback_may_free_its_device);
    run("AMQP: complete, reject (Rejected feedback), abandon (delivery count + 1)",
        test_amqp_complete_reject_abandon_with_feedback);
    run("AMQP: settling a message of a replaced connection is MQSTATE_LOCK_LOST",
        test_amqp_settling_after_the_connection_was_replaced_is_lock_lost);
    run("option mistakes: MQSTATE_INVALID_ARGUMENT with the core's message",
        test_option_mistakes_are_the_cores_messages);

    printf("C IoT Hub tests: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
