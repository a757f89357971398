/*
 * Tests of the mqstate C API, against a local state store (`mqstate serve`).
 *
 *   test_mqstate PORT VECTORS_FILE
 *
 * PORT: the port of the local server on 127.0.0.1. VECTORS_FILE: the shared vectors of
 * tests/vectors/ that apply to the C API, converted by tests/vectors_to_lines.py into one
 * case per line (tab-separated fields, strings as hex of their UTF-8 bytes), so that this
 * program needs no JSON parser.
 *
 * Built by scripts/test-c with -Wall -Wextra -Werror -pedantic -fsanitize=address and run
 * with LeakSanitizer on. Prints "ok - NAME" or "FAIL - NAME" per test case and closes with
 * "C tests: N passed, M failed"; exits non-zero if any failed.
 */
#define _POSIX_C_SOURCE 200809L

#include "mqstate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static uint16_t g_port;
static const char *g_vectors_path;
static char g_prefix[64]; /* makes the keys of this run unique */

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A key unique to this run: PREFIX + name, as bytes (written to buf, returns its length). */
static size_t make_key(char *buf, size_t len, const char *name) {
    int n = snprintf(buf, len, "%s%s", g_prefix, name);
    return n < 0 ? 0 : (size_t)n;
}

static mqstate_client *connect_client(void) {
    mqstate_connect_options *options = NULL;
    mqstate_client *client = NULL;
    CHECK_OK(mqstate_connect_options_new("127.0.0.1", g_port, &options));
    CHECK_OK(mqstate_connect_options_set_request_timeout_ms(options, 5000));
    CHECK_OK(mqstate_client_new(options, &client));
    mqstate_connect_options_free(options);
    if (client == NULL) {
        fprintf(stderr, "cannot connect to 127.0.0.1:%u; giving up\n", (unsigned)g_port);
        exit(2);
    }
    return client;
}

/* The string form of a version, copied into buf. */
static const char *version_text(const mqstate_version *version, char *buf, size_t len) {
    const char *text = NULL;
    size_t text_len = 0;
    buf[0] = '\0';
    if (mqstate_version_string(version, &text, &text_len) == MQSTATE_OK) {
        snprintf(buf, len, "%s", text);
        if (strlen(text) != text_len) fail_at(__FILE__, __LINE__, "version length mismatch");
    }
    return buf;
}

static int compare_versions(const mqstate_version *a, const mqstate_version *b) {
    int order = 42;
    CHECK_OK(mqstate_version_compare(a, b, &order));
    return order;
}

/* ------------------------------------------------------------------------------------------ */
/* Errors, statuses, panics                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void test_status_names_and_panic(void) {
    CHECK(strcmp(mqstate_status_name(MQSTATE_OK), "MQSTATE_OK") == 0);
    CHECK(strcmp(mqstate_status_name(MQSTATE_NOT_APPLIED), "MQSTATE_NOT_APPLIED") == 0);
    CHECK(strcmp(mqstate_status_name(MQSTATE_NULL_PARAMETER), "MQSTATE_NULL_PARAMETER") == 0);
    CHECK(strcmp(mqstate_status_name(123456u), "MQSTATE_UNKNOWN_STATUS") == 0);
    /* Stable values: part of the ABI. */
    CHECK(MQSTATE_OK == 0 && MQSTATE_NOT_FOUND == 1 && MQSTATE_NOT_APPLIED == 2);
    CHECK(MQSTATE_INVALID_ARGUMENT == 100 && MQSTATE_NULL_PARAMETER == 101);
    CHECK(MQSTATE_TIMEOUT == 200 && MQSTATE_DISCONNECTED == 201);
    CHECK(MQSTATE_SERVICE_ERROR == 300 && MQSTATE_UNEXPECTED_PAYLOAD == 301);
    CHECK(MQSTATE_PANIC == 900);

    /* A panic inside the library is a status, not an abort. */
    CHECK_STATUS(mqstate_test_panic(), MQSTATE_PANIC);
    CHECK_MESSAGE_HAS("panic");
    CHECK_MESSAGE_HAS("on purpose");
    {
        mqstate_service_error kind = 77;
        CHECK_OK(mqstate_error_service_kind(&kind));
        CHECK(kind == MQSTATE_SERVICE_ERROR_NONE);
    }

    /* Truncation: NUL-terminated, at most len - 1 bytes, the accessor keeps the error. */
    {
        char small[8];
        size_t written = 99, full = 0;
        CHECK_OK(mqstate_error_message_len(&full));
        CHECK(full > 20);
        CHECK_OK(mqstate_error_message(small, sizeof small, &written));
        CHECK(written == 7 && strlen(small) == 7);
        CHECK_STATUS(mqstate_error_message(small, 0, &written), MQSTATE_BUFFER_TOO_SMALL);
        CHECK_STATUS(mqstate_error_message(NULL, 8, &written), MQSTATE_NULL_PARAMETER);
        CHECK_STATUS(mqstate_error_message(small, 8, NULL), MQSTATE_NULL_PARAMETER);
        CHECK_MESSAGE_HAS("on purpose"); /* still the panic's message */
    }
}

/* NULL where a pointer is required: MQSTATE_NULL_PARAMETER, naming the parameter, and the
 * outputs are left alone. */
static void test_null_parameters(void) {
    mqstate_client *client = connect_client();
    mqstate_value *value = (mqstate_value *)&g_passed; /* sentinels: must stay untouched */
    mqstate_version *version = (mqstate_version *)&g_failed;
    mqstate_connect_options *options = (mqstate_connect_options *)&g_port;
    mqstate_client *other = (mqstate_client *)&g_prefix;
    const uint8_t key[] = "k";
    const uint8_t *data = NULL;
    const char *text = NULL;
    size_t len = 0;
    int order = 0;

    CHECK_STATUS(mqstate_client_get(NULL, key, 1, &value), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("client is NULL");
    CHECK_STATUS(mqstate_client_get(client, NULL, 1, &value), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("key is NULL");
    CHECK_STATUS(mqstate_client_get(client, NULL, 0, &value), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_get(client, key, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("value_out is NULL");
    CHECK(value == (mqstate_value *)&g_passed);

    CHECK_STATUS(mqstate_client_set(NULL, key, 1, key, 1, MQSTATE_SET_ALWAYS, 0, NULL, &version),
                 MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_set(client, NULL, 1, key, 1, MQSTATE_SET_ALWAYS, 0, NULL, NULL),
                 MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_set(client, key, 1, NULL, 1, MQSTATE_SET_ALWAYS, 0, NULL, NULL),
                 MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("value is NULL");
    CHECK(version == (mqstate_version *)&g_failed);
    CHECK_STATUS(mqstate_client_del(NULL, key, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_del(client, NULL, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_vdel(NULL, key, 1, key, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_vdel(client, NULL, 1, key, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_vdel(client, key, 1, NULL, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_observe(NULL, key, 1, NULL, NULL, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_observe(client, key, 1, NULL, NULL, NULL),
                 MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("callback is NULL");
    CHECK_STATUS(mqstate_client_unobserve(NULL, key, 1), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_unobserve(client, NULL, 1), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_close(NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_id(NULL, &text), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_id(client, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_set_timeout_ms(NULL, 5), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_client_new(NULL, &other), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("options is NULL");
    CHECK_STATUS(mqstate_client_new_from_env(NULL), MQSTATE_NULL_PARAMETER);
    CHECK(other == (mqstate_client *)&g_prefix);

    CHECK_STATUS(mqstate_connect_options_new(NULL, 1883, &options), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("host is NULL");
    CHECK_STATUS(mqstate_connect_options_new("h", 1883, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_connect_options_from_url(NULL, &options), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_connect_options_from_env(NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_connect_options_clone(NULL, &options), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_connect_options_set_client_id(NULL, "x"), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_connect_options_set_tls(NULL, NULL, NULL, NULL, NULL),
                 MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_connect_options_set_request_timeout_ms(NULL, 5),
                 MQSTATE_NULL_PARAMETER);
    CHECK(options == (mqstate_connect_options *)&g_port);

    CHECK_STATUS(mqstate_version_parse(NULL, &version), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_version_parse("1:2:n", NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_version_new(1, 2, NULL, &version), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_version_string(NULL, &text, &len), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_version_parts(NULL, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_version_compare(NULL, NULL, &order), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_version_clone(NULL, &version), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_value_bytes(NULL, &data, &len), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_value_version(NULL, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_notification_key(NULL, &data, &len), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_notification_get_kind(NULL, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_notification_value(NULL, &data, &len), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_notification_version(NULL, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_notification_synthesized(NULL, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_notification_error(NULL, NULL, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_hex_encode(NULL, 3, NULL, 0, &len), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_hex_decode(NULL, NULL, 0, &len), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_error_message_len(NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_error_service_kind(NULL), MQSTATE_NULL_PARAMETER);
    CHECK(version == (mqstate_version *)&g_failed);
    CHECK(data == NULL && text == NULL && len == 0 && order == 0);

    /* _free(NULL) is a no-op. */
    mqstate_client_free(NULL);
    mqstate_connect_options_free(NULL);
    mqstate_value_free(NULL);
    mqstate_version_free(NULL);

    mqstate_client_free(client);
}

/* ------------------------------------------------------------------------------------------ */
/* Connecting                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static void test_connect_options(void) {
    mqstate_connect_options *options = NULL, *copy = NULL;
    mqstate_client *client = NULL;
    const char *id = NULL;
    char url[128];

    CHECK_STATUS(mqstate_connect_options_from_url("ws://nope", &options),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("scheme");
    CHECK(options == NULL);
    CHECK_STATUS(mqstate_connect_options_new("", 1883, &options), MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_connect_options_new("h", 0, &options), MQSTATE_INVALID_ARGUMENT);

    snprintf(url, sizeof url, "mqtt://127.0.0.1:%u?client_id=c-opts-%ld", (unsigned)g_port,
             (long)getpid());
    CHECK_OK(mqstate_connect_options_from_url(url, &options));
    CHECK_STATUS(mqstate_connect_options_set_client_id(options, ""), MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_connect_options_set_credentials(options, NULL, "pw"),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_connect_options_set_tls(options, NULL, "cert.pem", NULL, NULL),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_connect_options_set_request_timeout_ms(options, 0),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_connect_options_set_connect_timeout_ms(options, 10),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_connect_options_set_session(options, 1, 0), MQSTATE_INVALID_ARGUMENT);
    CHECK_OK(mqstate_connect_options_set_session(options, 30, 60));
    CHECK_OK(mqstate_connect_options_set_connect_timeout_ms(options, 3000));
    CHECK_OK(mqstate_connect_options_set_secret_files(options, NULL, NULL));
    CHECK_OK(mqstate_connect_options_set_tls(options, NULL, NULL, NULL, "server"));
    CHECK_OK(mqstate_connect_options_clear_tls(options));
    CHECK_OK(mqstate_connect_options_clone(options, &copy));
    mqstate_connect_options_free(options); /* the copy is independent */

    CHECK_OK(mqstate_client_new(copy, &client));
    mqstate_connect_options_free(copy); /* the client copied the options */
    if (client != NULL) {
        char want[64];
        snprintf(want, sizeof want, "c-opts-%ld", (long)getpid());
        CHECK_OK(mqstate_client_id(client, &id));
        CHECK(id != NULL && strcmp(id, want) == 0);
        mqstate_client_free(client);
    }
}

static void test_connect_from_env(void) {
    mqstate_connect_options *options = NULL;
    mqstate_client *client = NULL;
    const char *id = NULL;
    char port[16], want[64];

    snprintf(port, sizeof port, "%u", (unsigned)g_port);
    snprintf(want, sizeof want, "c-env-%ld", (long)getpid());
    /* No AIO_BROKER_HOSTNAME: the message names the variable. */
    unsetenv("AIO_BROKER_HOSTNAME");
    CHECK_STATUS(mqstate_client_new_from_env(&client), MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("AIO_BROKER_HOSTNAME");
    CHECK(client == NULL);

    setenv("AIO_BROKER_HOSTNAME", "127.0.0.1", 1);
    setenv("AIO_BROKER_TCP_PORT", port, 1);
    setenv("AIO_MQTT_USE_TLS", "false", 1);
    setenv("AIO_MQTT_CLIENT_ID", want, 1);
    CHECK_OK(mqstate_connect_options_from_env(&options));
    mqstate_connect_options_free(options);
    CHECK_OK(mqstate_client_new_from_env(&client));
    if (client != NULL) {
        uint8_t key[128];
        size_t key_len = make_key((char *)key, sizeof key, "env");
        CHECK_OK(mqstate_client_id(client, &id));
        CHECK(id != NULL && strcmp(id, want) == 0);
        CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"v", 1,
                                    MQSTATE_SET_ALWAYS, 0, NULL, NULL));
        CHECK_OK(mqstate_client_del(client, key, key_len, NULL));
        mqstate_client_free(client);
    }
    unsetenv("AIO_BROKER_HOSTNAME");
    unsetenv("AIO_BROKER_TCP_PORT");
    unsetenv("AIO_MQTT_USE_TLS");
    unsetenv("AIO_MQTT_CLIENT_ID");
}

static void test_connect_refused(void) {
    mqstate_connect_options *options = NULL;
    mqstate_client *client = (mqstate_client *)&g_port;
    mqstate_status status;
    /* Port 1 on loopback: nothing listens there. */
    CHECK_OK(mqstate_connect_options_new("127.0.0.1", 1, &options));
    CHECK_OK(mqstate_connect_options_set_connect_timeout_ms(options, 2000));
    status = mqstate_client_new(options, &client);
    CHECK(status == MQSTATE_CONNECTION_ERROR || status == MQSTATE_TIMEOUT);
    CHECK(client == (mqstate_client *)&g_port);
    {
        size_t len = 0;
        CHECK_OK(mqstate_error_message_len(&len));
        CHECK(len > 0);
    }
    mqstate_connect_options_free(options);
}

/* A socket that listens and never accepts: the TCP connection completes (in the backlog), the
 * MQTT CONNACK never comes. The connect times out: MQSTATE_TIMEOUT, naming host:port. */
static void test_connect_timeout(void) {
    mqstate_connect_options *options = NULL;
    mqstate_client *client = (mqstate_client *)&g_port;
    struct sockaddr_in addr;
    socklen_t addr_len = sizeof addr;
    char want[64];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    if (fd < 0) return;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(listen(fd, 8) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&addr, &addr_len) == 0);
    CHECK_OK(mqstate_connect_options_new("127.0.0.1", ntohs(addr.sin_port), &options));
    CHECK_OK(mqstate_connect_options_set_connect_timeout_ms(options, 1000));
    CHECK_STATUS(mqstate_client_new(options, &client), MQSTATE_TIMEOUT);
    CHECK(client == (mqstate_client *)&g_port);
    snprintf(want, sizeof want, "127.0.0.1:%u", (unsigned)ntohs(addr.sin_port));
    CHECK_MESSAGE_HAS(want);
    CHECK_MESSAGE_HAS("after 1s");
    /* Under the core's minimum of 1 s is refused where it is set. */
    CHECK_STATUS(mqstate_connect_options_set_connect_timeout_ms(options, 999),
                 MQSTATE_INVALID_ARGUMENT);
    mqstate_connect_options_free(options);
    close(fd);
}

/* ------------------------------------------------------------------------------------------ */
/* Operations                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Reads `key` and checks it holds `want` (want_len bytes) at version `want_version` (if not
 * NULL). */
static void check_value(const mqstate_client *client, const uint8_t *key, size_t key_len,
                        const uint8_t *want, size_t want_len,
                        const mqstate_version *want_version) {
    mqstate_value *value = NULL;
    const uint8_t *data = NULL;
    const mqstate_version *version = NULL;
    size_t len = 0;
    CHECK_OK(mqstate_client_get(client, key, key_len, &value));
    if (value == NULL) return;
    CHECK_OK(mqstate_value_bytes(value, &data, &len));
    CHECK(data != NULL);
    CHECK(len == want_len && (want_len == 0 || memcmp(data, want, want_len) == 0));
    CHECK_OK(mqstate_value_version(value, &version));
    CHECK(version != NULL);
    if (want_version != NULL && version != NULL) CHECK(compare_versions(version, want_version) == 0);
    mqstate_value_free(value);
}

static void test_binary_values_round_trip(void) {
    mqstate_client *client = connect_client();
    /* NUL, CR LF and high bytes, in the key and in the value. */
    static const uint8_t value[] = {'a', 0, '\r', '\n', 0, 0xff, '\r', '\n', '$', '-', '1'};
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "bin-");
    mqstate_version *version = NULL;
    mqstate_value *missing = (mqstate_value *)&g_port;
    uint8_t *big;
    size_t i;

    memcpy(key + key_len, "\0\r\n\xff", 4); /* binary bytes in the key too */
    key_len += 4;

    CHECK_OK(mqstate_client_set(client, key, key_len, value, sizeof value, MQSTATE_SET_ALWAYS,
                                0, NULL, &version));
    CHECK(version != NULL);
    check_value(client, key, key_len, value, sizeof value, version);

    /* An empty value (NULL is allowed when the length is 0). */
    CHECK_OK(mqstate_client_set(client, key, key_len, NULL, 0, MQSTATE_SET_ALWAYS, 0, NULL,
                                NULL));
    check_value(client, key, key_len, NULL, 0, NULL);

    /* A large value (the size the official integration tests use). */
    big = malloc(65000);
    CHECK(big != NULL);
    if (big != NULL) {
        for (i = 0; i < 65000; i++) big[i] = (uint8_t)(i * 7u);
        CHECK_OK(mqstate_client_set(client, key, key_len, big, 65000, MQSTATE_SET_ALWAYS, 0,
                                    NULL, NULL));
        check_value(client, key, key_len, big, 65000, NULL);
        free(big);
    }

    CHECK_OK(mqstate_client_del(client, key, key_len, NULL));
    CHECK_STATUS(mqstate_client_get(client, key, key_len, &missing), MQSTATE_NOT_FOUND);
    CHECK(missing == (mqstate_value *)&g_port); /* not written */
    CHECK_MESSAGE_HAS("no such key");
    CHECK_STATUS(mqstate_client_del(client, key, key_len, NULL), MQSTATE_NOT_FOUND);

    /* An empty key cannot be sent. */
    CHECK_STATUS(mqstate_client_get(client, key, 0, &missing), MQSTATE_INVALID_ARGUMENT);

    mqstate_version_free(version);
    mqstate_client_free(client);
}

static void test_conditions_and_vdel(void) {
    mqstate_client *client = connect_client();
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "cond");
    mqstate_version *first = NULL, *second = NULL;
    mqstate_version *untouched = (mqstate_version *)&g_port;
    const uint8_t *a = (const uint8_t *)"holder-a", *b = (const uint8_t *)"holder-b";

    mqstate_client_del(client, key, key_len, NULL);
    CHECK_OK(mqstate_client_set(client, key, key_len, a, 8, MQSTATE_SET_NX, 0, NULL, &first));
    CHECK_STATUS(mqstate_client_set(client, key, key_len, b, 8, MQSTATE_SET_NX, 0, NULL,
                                    &untouched),
                 MQSTATE_NOT_APPLIED);
    CHECK(untouched == (mqstate_version *)&g_port);
    CHECK_MESSAGE_HAS("not applied");
    /* NEX: same value renews (a strictly greater version), another value is refused. */
    CHECK_OK(mqstate_client_set(client, key, key_len, a, 8, MQSTATE_SET_NEX, 0, NULL, &second));
    if (first != NULL && second != NULL) {
        CHECK(compare_versions(first, second) == -1);
        CHECK(compare_versions(second, first) == 1);
    }
    CHECK_STATUS(mqstate_client_set(client, key, key_len, b, 8, MQSTATE_SET_NEX, 0, NULL, NULL),
                 MQSTATE_NOT_APPLIED);
    CHECK_STATUS(mqstate_client_set(client, key, key_len, b, 8, 7, 0, NULL, NULL),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("unknown SET condition 7");
    CHECK_STATUS(mqstate_client_set(client, key, key_len, b, 8, 7 | MQSTATE_SET_PERSIST, 0, NULL,
                                    NULL),
                 MQSTATE_INVALID_ARGUMENT);
    check_value(client, key, key_len, a, 8, second);
    /* PERSIST combines with a condition (sent as the aio-persistence user property). */
    CHECK_OK(mqstate_client_set(client, key, key_len, a, 8, MQSTATE_SET_NEX | MQSTATE_SET_PERSIST,
                                0, NULL, NULL));

    CHECK_STATUS(mqstate_client_vdel(client, key, key_len, b, 8, NULL), MQSTATE_NOT_APPLIED);
    check_value(client, key, key_len, a, 8, NULL);
    CHECK_OK(mqstate_client_vdel(client, key, key_len, a, 8, NULL));
    CHECK_STATUS(mqstate_client_vdel(client, key, key_len, a, 8, NULL), MQSTATE_NOT_FOUND);

    mqstate_version_free(first);
    mqstate_version_free(second);
    mqstate_client_free(client);
}

static void test_expiry(void) {
    mqstate_client *client = connect_client();
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "expiry");
    mqstate_value *value = NULL;
    mqstate_status status = MQSTATE_OK;
    int i;

    /* An expiry of 0 is refused (the protocol's PX must be > 0); NULL means no expiry. */
    CHECK_STATUS(mqstate_client_set(client, key, key_len, (const uint8_t *)"x", 1,
                                    MQSTATE_SET_ALWAYS, &(uint64_t){0}, NULL, NULL),
                 MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("expiry");
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"soon", 4,
                                MQSTATE_SET_ALWAYS, &(uint64_t){300}, NULL, NULL));
    check_value(client, key, key_len, (const uint8_t *)"soon", 4, NULL);
    for (i = 0; i < 50; i++) { /* at most 5 s */
        sleep_ms(100);
        value = NULL;
        status = mqstate_client_get(client, key, key_len, &value);
        if (status != MQSTATE_OK) break;
        mqstate_value_free(value);
    }
    CHECK_STATUS(status, MQSTATE_NOT_FOUND);
    mqstate_client_free(client);
}

static void test_versions(void) {
    mqstate_client *client = connect_client();
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "versions");
    mqstate_version *v = NULL, *parsed = NULL, *copy = NULL, *built = NULL;
    mqstate_hlc parts;
    char text[256], text2[256];

    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"x", 1,
                                MQSTATE_SET_ALWAYS, 0, NULL, &v));
    if (v == NULL) {
        mqstate_client_free(client);
        return;
    }
    version_text(v, text, sizeof text);
    /* The canonical form: 15-digit milliseconds, 5-digit counter, node id. */
    CHECK(strlen(text) >= 23 && text[15] == ':' && text[21] == ':');
    CHECK_OK(mqstate_version_parts(v, &parts));
    CHECK(parts.ms > 1600000000000ull); /* a real clock */
    CHECK(parts.node_id != NULL && strlen(parts.node_id) == parts.node_id_len);
    CHECK(parts.node_id != NULL && strcmp(parts.node_id, text + 22) == 0);

    /* String -> version -> parts and back. */
    CHECK_OK(mqstate_version_parse(text, &parsed));
    CHECK_OK(mqstate_version_clone(v, &copy));
    CHECK_OK(mqstate_version_new(parts.ms, parts.counter, parts.node_id, &built));
    if (parsed != NULL && copy != NULL && built != NULL) {
        CHECK(compare_versions(v, parsed) == 0);
        CHECK(compare_versions(v, copy) == 0);
        CHECK(compare_versions(v, built) == 0);
        CHECK(strcmp(version_text(built, text2, sizeof text2), text) == 0);
    }
    CHECK_STATUS(mqstate_version_new(1, 2, "a:b", &built), MQSTATE_INVALID_ARGUMENT);

    mqstate_version_free(v);
    mqstate_version_free(parsed);
    mqstate_version_free(copy);
    mqstate_version_free(built);
    mqstate_client_del(client, key, key_len, NULL);
    mqstate_client_free(client);
}

/* A key fenced by a lock's token: the service's errors are read back as messages and kinds. */
static void test_service_error_and_fencing(void) {
    mqstate_client *client = connect_client();
    uint8_t lock[128], key[128];
    size_t lock_len = make_key((char *)lock, sizeof lock, "lock");
    size_t key_len = make_key((char *)key, sizeof key, "fenced");
    mqstate_version *token1 = NULL, *token2 = NULL, *token_from_text = NULL;
    mqstate_service_error kind = MQSTATE_SERVICE_ERROR_NONE;
    const uint8_t *me = (const uint8_t *)"me";
    char text[256];

    mqstate_client_del(client, lock, lock_len, NULL);
    mqstate_client_del(client, key, key_len, NULL);
    /* Acquire the lease: the version of the SET is the fencing token. */
    CHECK_OK(mqstate_client_set(client, lock, lock_len, me, 2, MQSTATE_SET_NEX, &(uint64_t){10000}, NULL,
                                &token1));
    if (token1 == NULL) {
        mqstate_client_free(client);
        return;
    }
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"1", 1,
                                MQSTATE_SET_ALWAYS, 0, token1, NULL));

    /* Without the token: the service refuses. */
    CHECK_STATUS(mqstate_client_set(client, key, key_len, (const uint8_t *)"2", 1,
                                    MQSTATE_SET_ALWAYS, 0, NULL, NULL),
                 MQSTATE_SERVICE_ERROR);
    CHECK_MESSAGE_HAS("a fencing token is required for this request");
    CHECK_OK(mqstate_error_service_kind(&kind));
    CHECK(kind == MQSTATE_SERVICE_ERROR_FENCING_TOKEN_REQUIRED);

    /* The token as a string, parsed back, works as well. */
    CHECK_OK(mqstate_version_parse(version_text(token1, text, sizeof text), &token_from_text));
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"3", 1,
                                MQSTATE_SET_ALWAYS, 0, token_from_text, NULL));

    /* Renewing the lease gives a newer token; the key then refuses the older one. */
    CHECK_OK(mqstate_client_set(client, lock, lock_len, me, 2, MQSTATE_SET_NEX, &(uint64_t){10000}, NULL,
                                &token2));
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"4", 1,
                                MQSTATE_SET_ALWAYS, 0, token2, NULL));
    CHECK_STATUS(mqstate_client_set(client, key, key_len, (const uint8_t *)"5", 1,
                                    MQSTATE_SET_ALWAYS, 0, token1, NULL),
                 MQSTATE_SERVICE_ERROR);
    CHECK_MESSAGE_HAS("lower version");
    CHECK_OK(mqstate_error_service_kind(&kind));
    CHECK(kind == MQSTATE_SERVICE_ERROR_FENCING_TOKEN_LOWER_VERSION);
    check_value(client, key, key_len, (const uint8_t *)"4", 1, NULL);

    /* DEL of a fenced key needs the token too. */
    CHECK_STATUS(mqstate_client_del(client, key, key_len, NULL), MQSTATE_SERVICE_ERROR);
    CHECK_OK(mqstate_client_del(client, key, key_len, token2));
    /* A later success does not clear the last error; the next failure replaces it. */
    CHECK_MESSAGE_HAS("fencing token");
    CHECK_OK(mqstate_client_vdel(client, lock, lock_len, me, 2, NULL));
    CHECK_STATUS(mqstate_client_get(client, lock, lock_len, &(mqstate_value *){NULL}),
                 MQSTATE_NOT_FOUND);
    CHECK_OK(mqstate_error_service_kind(&kind));
    CHECK(kind == MQSTATE_SERVICE_ERROR_NONE);

    mqstate_version_free(token1);
    mqstate_version_free(token2);
    mqstate_version_free(token_from_text);
    mqstate_client_free(client);
}

/* ------------------------------------------------------------------------------------------ */
/* Notifications                                                                               */
/* ------------------------------------------------------------------------------------------ */

struct observer {
    pthread_mutex_t lock;
    pthread_t caller;           /* the thread that called observe */
    int sets, deletes, errors;  /* notifications received */
    int on_caller_thread;       /* a callback ran on the caller's thread (must not) */
    int destroyed;              /* destroy calls */
    int callbacks_after_destroy;
    uint8_t key[256];
    size_t key_len;
    uint8_t value[256];
    size_t value_len;
    char version[256];
    /* for the re-entrancy test */
    const mqstate_client *client;
    int unobserve_from_callback;
    mqstate_status unobserve_status;
};

static void observer_init(struct observer *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->lock, NULL);
    o->caller = pthread_self();
}

static void on_notification(void *user_data, const mqstate_notification *n) {
    struct observer *o = user_data;
    mqstate_notification_kind kind = 0;
    const uint8_t *key = NULL, *value = NULL;
    const mqstate_version *version = NULL;
    size_t key_len = 0, value_len = 0;
    bool synthesized = true;
    int unobserve = 0;

    mqstate_notification_get_kind(n, &kind);
    mqstate_notification_key(n, &key, &key_len);
    mqstate_notification_synthesized(n, &synthesized);
    pthread_mutex_lock(&o->lock);
    if (pthread_equal(pthread_self(), o->caller)) o->on_caller_thread = 1;
    if (o->destroyed) o->callbacks_after_destroy++;
    if (key_len <= sizeof o->key) {
        memcpy(o->key, key, key_len);
        o->key_len = key_len;
    }
    if (kind == MQSTATE_NOTIFICATION_SET) {
        o->sets++;
        if (mqstate_notification_value(n, &value, &value_len) == MQSTATE_OK &&
            value_len <= sizeof o->value) {
            memcpy(o->value, value, value_len);
            o->value_len = value_len;
        }
    } else if (kind == MQSTATE_NOTIFICATION_DELETE) {
        o->deletes++;
        /* A DELETE has no value. */
        if (mqstate_notification_value(n, &value, &value_len) != MQSTATE_NOT_FOUND) o->errors++;
    } else {
        o->errors++;
    }
    o->version[0] = '\0';
    if (mqstate_notification_version(n, &version) == MQSTATE_OK) {
        const char *text = NULL;
        size_t len = 0;
        if (mqstate_version_string(version, &text, &len) == MQSTATE_OK)
            snprintf(o->version, sizeof o->version, "%s", text);
    }
    if (synthesized) o->errors++; /* no reconnect happens in these tests */
    unobserve = o->unobserve_from_callback;
    pthread_mutex_unlock(&o->lock);

    /* Re-entrancy: calls into the library from the callback (no library lock is held). */
    if (unobserve) {
        mqstate_value *ignored = NULL;
        mqstate_status s = mqstate_client_get(o->client, key, key_len, &ignored);
        mqstate_value_free(ignored);
        if (s != MQSTATE_OK && s != MQSTATE_NOT_FOUND) o->errors++;
        s = mqstate_client_unobserve(o->client, key, key_len);
        pthread_mutex_lock(&o->lock);
        o->unobserve_status = s;
        pthread_mutex_unlock(&o->lock);
    }
}

static void on_destroy(void *user_data) {
    struct observer *o = user_data;
    pthread_mutex_lock(&o->lock);
    o->destroyed++;
    if (pthread_equal(pthread_self(), o->caller)) o->on_caller_thread = 1;
    pthread_mutex_unlock(&o->lock);
}

/* Waits (at most timeout_ms) until *field >= target. */
static int wait_for(struct observer *o, const int *field, int target, int timeout_ms) {
    int waited = 0, value;
    for (;;) {
        pthread_mutex_lock(&o->lock);
        value = *field;
        pthread_mutex_unlock(&o->lock);
        if (value >= target) return 1;
        if (waited >= timeout_ms) return 0;
        sleep_ms(10);
        waited += 10;
    }
}

static void test_observe_and_unobserve(void) {
    mqstate_client *client = connect_client();
    struct observer o;
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "observed");
    static const uint8_t value[] = {'o', 'n', 0, '\r', '\n'};
    mqstate_version *version = NULL;
    char text[256];
    int sets;

    observer_init(&o);
    mqstate_client_del(client, key, key_len, NULL);
    CHECK_OK(mqstate_client_observe(client, key, key_len, on_notification, on_destroy, &o));
    CHECK_OK(mqstate_client_set(client, key, key_len, value, sizeof value, MQSTATE_SET_ALWAYS, 0,
                                NULL, &version));
    CHECK(wait_for(&o, &o.sets, 1, 5000));
    pthread_mutex_lock(&o.lock);
    CHECK(o.value_len == sizeof value && memcmp(o.value, value, sizeof value) == 0);
    CHECK(o.key_len == key_len && memcmp(o.key, key, key_len) == 0);
    if (version != NULL) CHECK(strcmp(o.version, version_text(version, text, sizeof text)) == 0);
    pthread_mutex_unlock(&o.lock);

    CHECK_OK(mqstate_client_del(client, key, key_len, NULL));
    CHECK(wait_for(&o, &o.deletes, 1, 5000));

    /* unobserve returns after destroy has run. */
    CHECK_OK(mqstate_client_unobserve(client, key, key_len));
    pthread_mutex_lock(&o.lock);
    CHECK(o.destroyed == 1);
    sets = o.sets;
    pthread_mutex_unlock(&o.lock);

    /* No callback after that. */
    CHECK_OK(mqstate_client_set(client, key, key_len, value, 1, MQSTATE_SET_ALWAYS, 0, NULL,
                                NULL));
    sleep_ms(300);
    pthread_mutex_lock(&o.lock);
    CHECK(o.sets == sets && o.destroyed == 1 && o.callbacks_after_destroy == 0);
    CHECK(o.on_caller_thread == 0); /* callbacks ran on a library thread */
    CHECK(o.errors == 0);
    pthread_mutex_unlock(&o.lock);
    /* Unobserving a key that is not observed is not an error. */
    CHECK_OK(mqstate_client_unobserve(client, key, key_len));

    mqstate_client_del(client, key, key_len, NULL);
    mqstate_version_free(version);
    mqstate_client_free(client);
    pthread_mutex_destroy(&o.lock);
}

/* Freeing the client ends its observations: destroy has run when free returns. */
static void test_free_ends_observations(void) {
    mqstate_client *client = connect_client();
    struct observer o1, o2;
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "free-ends");

    observer_init(&o1);
    observer_init(&o2);
    CHECK_OK(mqstate_client_observe(client, key, key_len, on_notification, on_destroy, &o1));
    /* Two observations of one key; the second without destroy. */
    CHECK_OK(mqstate_client_observe(client, key, key_len, on_notification, NULL, &o2));
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"v", 1,
                                MQSTATE_SET_ALWAYS, 0, NULL, NULL));
    CHECK(wait_for(&o1, &o1.sets, 1, 5000));
    CHECK(wait_for(&o2, &o2.sets, 1, 5000));
    CHECK_OK(mqstate_client_del(client, key, key_len, NULL));
    CHECK(wait_for(&o1, &o1.deletes, 1, 5000));
    mqstate_client_free(client);
    CHECK(o1.destroyed == 1 && o1.errors == 0 && o1.on_caller_thread == 0);
    CHECK(o2.destroyed == 0 && o2.errors == 0);
    pthread_mutex_destroy(&o1.lock);
    pthread_mutex_destroy(&o2.lock);
}

/* A callback that calls the library, including unobserve of its own key. */
static void test_callback_reentrancy(void) {
    mqstate_client *client = connect_client();
    struct observer o;
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "reentrant");

    observer_init(&o);
    o.client = client;
    o.unobserve_from_callback = 1;
    o.unobserve_status = MQSTATE_UNKNOWN_ERROR;
    CHECK_OK(mqstate_client_observe(client, key, key_len, on_notification, on_destroy, &o));
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"v", 1,
                                MQSTATE_SET_ALWAYS, 0, NULL, NULL));
    /* destroy runs on the callback thread once the callback that unobserved returns. */
    CHECK(wait_for(&o, &o.destroyed, 1, 5000));
    pthread_mutex_lock(&o.lock);
    CHECK(o.sets == 1 && o.unobserve_status == MQSTATE_OK && o.errors == 0);
    pthread_mutex_unlock(&o.lock);
    mqstate_client_del(client, key, key_len, NULL);
    mqstate_client_free(client);
    CHECK(o.destroyed == 1);
    pthread_mutex_destroy(&o.lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Threads                                                                                     */
/* ------------------------------------------------------------------------------------------ */

#define THREADS 4
#define ROUNDS 40

struct worker {
    const mqstate_client *client;
    int index;
    int failures;
    char first_failure[512];
};

static void worker_fail(struct worker *w, const char *what, mqstate_status status) {
    if (w->failures++ == 0) {
        char msg[256];
        snprintf(w->first_failure, sizeof w->first_failure, "%s: %s (%s)", what,
                 mqstate_status_name(status), last_message(msg, sizeof msg));
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    char bad[32], msg[512], shared[128];
    uint8_t key[128], value[64];
    size_t key_len, value_len, shared_len;
    mqstate_version *v = NULL;
    mqstate_status s;
    int round;

    /* A distinctive error, to check later that the last error is per thread. */
    snprintf(bad, sizeof bad, "bad-version-%d", w->index);
    s = mqstate_version_parse(bad, &v);
    if (s != MQSTATE_INVALID_ARGUMENT) worker_fail(w, "parse", s);

    shared_len = make_key(shared, sizeof shared, "threads-shared");
    for (round = 0; round < ROUNDS; round++) {
        char name[64];
        mqstate_value *got = NULL;
        snprintf(name, sizeof name, "thread-%d-%d", w->index, round);
        key_len = make_key((char *)key, sizeof key, name);
        value_len = (size_t)snprintf((char *)value, sizeof value, "v%d\r\n%d", w->index, round);
        value[1] = 0; /* a NUL inside */
        s = mqstate_client_set(w->client, key, key_len, value, value_len, MQSTATE_SET_NX, 0,
                               NULL, NULL);
        if (s != MQSTATE_OK) worker_fail(w, "set", s);
        s = mqstate_client_get(w->client, key, key_len, &got);
        if (s != MQSTATE_OK) {
            worker_fail(w, "get", s);
        } else {
            const uint8_t *data = NULL;
            size_t len = 0;
            mqstate_value_bytes(got, &data, &len);
            if (len != value_len || memcmp(data, value, len) != 0)
                worker_fail(w, "get returned another value", MQSTATE_OK);
            mqstate_value_free(got);
        }
        s = mqstate_client_set(w->client, (const uint8_t *)shared, shared_len, value, value_len,
                               MQSTATE_SET_ALWAYS, 0, NULL, NULL);
        if (s != MQSTATE_OK) worker_fail(w, "set shared", s);
        s = mqstate_client_vdel(w->client, key, key_len, (const uint8_t *)"other", 5, NULL);
        if (s != MQSTATE_NOT_APPLIED) worker_fail(w, "vdel other", s);
        s = mqstate_client_vdel(w->client, key, key_len, value, value_len, NULL);
        if (s != MQSTATE_OK) worker_fail(w, "vdel", s);
        s = mqstate_client_del(w->client, key, key_len, NULL);
        if (s != MQSTATE_NOT_FOUND) worker_fail(w, "del of a deleted key", s);
    }
    /* The last error is this thread's: the NOT_FOUND of the last DEL, not another thread's. */
    last_message(msg, sizeof msg);
    if (strstr(msg, "DEL: no such key") == NULL) worker_fail(w, "last error of the thread", 0);
    s = mqstate_version_parse(bad, &v);
    last_message(msg, sizeof msg);
    if (strstr(msg, bad) == NULL) worker_fail(w, "last error names this thread's input", s);
    return NULL;
}

static void test_four_threads_share_a_client(void) {
    mqstate_client *client = connect_client();
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    char shared[128];
    size_t shared_len = make_key(shared, sizeof shared, "threads-shared");
    int i;

    for (i = 0; i < THREADS; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].client = client;
        workers[i].index = i;
        CHECK(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
    }
    for (i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        if (workers[i].failures != 0)
            fail_at(__FILE__, __LINE__, "thread %d: %d failures, first: %s", i,
                    workers[i].failures, workers[i].first_failure);
    }
    CHECK_OK(mqstate_client_del(client, (const uint8_t *)shared, shared_len, NULL));
    mqstate_client_free(client);
}

/* After close, calls fail with MQSTATE_DISCONNECTED; close is idempotent. */
static void test_close(void) {
    mqstate_client *client = connect_client();
    mqstate_value *value = (mqstate_value *)&g_port;
    struct observer o;
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "closed");

    observer_init(&o);
    CHECK_OK(mqstate_client_observe(client, key, key_len, on_notification, on_destroy, &o));
    CHECK_OK(mqstate_client_close(client));
    CHECK(o.destroyed == 1);
    CHECK_STATUS(mqstate_client_get(client, key, key_len, &value), MQSTATE_DISCONNECTED);
    CHECK(value == (mqstate_value *)&g_port);
    CHECK_OK(mqstate_client_close(client));
    mqstate_client_free(client);
    CHECK(o.destroyed == 1);
    pthread_mutex_destroy(&o.lock);
}

/* A request timeout set on the client applies to its later calls. */
static void test_client_timeout(void) {
    mqstate_client *client = connect_client();
    uint8_t key[128];
    size_t key_len = make_key((char *)key, sizeof key, "timeout");
    CHECK_OK(mqstate_client_set_timeout_ms(client, 3000));
    CHECK_STATUS(mqstate_client_get(client, key, key_len, &(mqstate_value *){NULL}),
                 MQSTATE_NOT_FOUND);
    CHECK_OK(mqstate_client_set_timeout_ms(client, 0));
    mqstate_client_free(client);
}

/* ------------------------------------------------------------------------------------------ */
/* Leases, locks, leader election                                                              */
/* ------------------------------------------------------------------------------------------ */

/* A value (lease holder, election leader) holds exactly `want`, and has no version. */
static void check_holder(mqstate_value *value, const char *want) {
    const uint8_t *data = NULL;
    const mqstate_version *version = (const mqstate_version *)&g_port;
    size_t len = 0;
    if (value == NULL) {
        fail_at(__FILE__, __LINE__, "no holder value (wanted \"%s\")", want);
        return;
    }
    CHECK_OK(mqstate_value_bytes(value, &data, &len));
    if (len != strlen(want) || memcmp(data, want, len) != 0)
        fail_at(__FILE__, __LINE__, "holder is \"%.*s\", expected \"%s\"", (int)len,
                (const char *)data, want);
    CHECK_STATUS(mqstate_value_version(value, &version), MQSTATE_NOT_FOUND);
    CHECK(version == (const mqstate_version *)&g_port);
}

static void test_lease(void) {
    mqstate_client *ca = connect_client(), *cb = connect_client();
    uint8_t name[128], key[128];
    size_t name_len = make_key((char *)name, sizeof name, "lease");
    size_t key_len = make_key((char *)key, sizeof key, "lease-protected");
    mqstate_lease *a = NULL, *b = NULL, *never = NULL;
    mqstate_version *t1 = NULL, *t2 = NULL, *current = NULL, *tb = NULL;
    mqstate_version *untouched = (mqstate_version *)&g_port;
    mqstate_value *holder = NULL;
    mqstate_service_error kind = MQSTATE_SERVICE_ERROR_NONE;

    mqstate_client_del(ca, name, name_len, NULL);
    mqstate_client_del(ca, key, key_len, NULL);
    CHECK_OK(mqstate_lease_new(ca, name, name_len, (const uint8_t *)"node-a", 6, &a));
    CHECK_OK(mqstate_lease_new(cb, name, name_len, (const uint8_t *)"node-b", 6, &b));
    CHECK_OK(mqstate_lease_new(ca, name, name_len, (const uint8_t *)"node-c", 6, &never));
    if (a == NULL || b == NULL || never == NULL) goto out;

    /* Not acquired yet: no token, nothing to renew, nobody holds it. */
    CHECK_STATUS(mqstate_lease_current_token(a, &untouched), MQSTATE_NOT_FOUND);
    CHECK_STATUS(mqstate_lease_renew(never, NULL), MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_lease_auto_renew(never, 0.5), MQSTATE_INVALID_ARGUMENT);
    CHECK_STATUS(mqstate_lease_holder(a, &holder), MQSTATE_NOT_FOUND);
    CHECK_STATUS(mqstate_lease_acquire(a, 0, NULL), MQSTATE_INVALID_ARGUMENT);
    CHECK(untouched == (mqstate_version *)&g_port && holder == NULL);

    /* A acquires; B is refused while A holds it. */
    CHECK_OK(mqstate_lease_acquire(a, 10000, &t1));
    CHECK_STATUS(mqstate_lease_acquire(b, 10000, &untouched), MQSTATE_NOT_APPLIED);
    CHECK_MESSAGE_HAS("someone else holds it");
    CHECK(untouched == (mqstate_version *)&g_port);
    CHECK_OK(mqstate_lease_holder(b, &holder));
    check_holder(holder, "node-a");
    mqstate_value_free(holder);
    holder = NULL;

    /* Renew: a strictly greater token, which is the current one. */
    CHECK_OK(mqstate_lease_renew(a, &t2));
    CHECK_OK(mqstate_lease_current_token(a, &current));
    if (t1 != NULL && t2 != NULL && current != NULL) {
        CHECK(compare_versions(t1, t2) == -1);
        CHECK(compare_versions(current, t2) == 0);
    }

    /* The token fences a key: the older token is refused once the newer one was used. */
    CHECK_OK(mqstate_client_set(ca, key, key_len, (const uint8_t *)"1", 1, MQSTATE_SET_ALWAYS,
                                0, t2, NULL));
    CHECK_STATUS(mqstate_client_set(ca, key, key_len, (const uint8_t *)"2", 1,
                                    MQSTATE_SET_ALWAYS, 0, t1, NULL),
                 MQSTATE_SERVICE_ERROR);
    CHECK_OK(mqstate_error_service_kind(&kind));
    CHECK(kind == MQSTATE_SERVICE_ERROR_FENCING_TOKEN_LOWER_VERSION);

    /* B waits a little, in vain. */
    CHECK_STATUS(mqstate_lease_acquire_wait(b, 10000, 300, NULL), MQSTATE_TIMEOUT);

    /* A releases (once); then B gets it at once with a newer token. */
    CHECK_OK(mqstate_lease_release(a));
    CHECK_STATUS(mqstate_lease_release(a), MQSTATE_NOT_FOUND);
    CHECK_STATUS(mqstate_lease_current_token(a, &untouched), MQSTATE_NOT_FOUND);
    CHECK_OK(mqstate_lease_acquire_wait(b, 10000, 5000, &tb));
    if (tb != NULL && t2 != NULL) CHECK(compare_versions(t2, tb) == -1);
    CHECK_OK(mqstate_lease_holder(a, &holder));
    check_holder(holder, "node-b");
    mqstate_value_free(holder);
    holder = NULL;
    /* A's release of B's lease deletes nothing. */
    CHECK_STATUS(mqstate_lease_release(a), MQSTATE_NOT_FOUND);
    CHECK_OK(mqstate_lease_release(b));
    CHECK_OK(mqstate_client_del(ca, key, key_len, tb));

out:
    mqstate_version_free(t1);
    mqstate_version_free(t2);
    mqstate_version_free(current);
    mqstate_version_free(tb);
    mqstate_lease_free(a);
    mqstate_lease_free(b);
    mqstate_lease_free(never);
    mqstate_client_free(ca);
    mqstate_client_free(cb);
}

/* Automatic renewal keeps a short lease past its ttl. */
static void test_lease_auto_renew(void) {
    mqstate_client *ca = connect_client(), *cb = connect_client();
    uint8_t name[128];
    size_t name_len = make_key((char *)name, sizeof name, "lease-auto");
    mqstate_lease *a = NULL, *b = NULL;
    mqstate_version *first = NULL, *later = NULL;
    mqstate_value *holder = NULL;

    mqstate_client_del(ca, name, name_len, NULL);
    CHECK_OK(mqstate_lease_new(ca, name, name_len, (const uint8_t *)"auto-a", 6, &a));
    CHECK_OK(mqstate_lease_new(cb, name, name_len, (const uint8_t *)"auto-b", 6, &b));
    if (a == NULL || b == NULL) goto out;
    CHECK_OK(mqstate_lease_acquire(a, 1000, &first));
    CHECK_STATUS(mqstate_lease_auto_renew(a, 1.5), MQSTATE_INVALID_ARGUMENT);
    CHECK_OK(mqstate_lease_auto_renew(a, 0.5));
    sleep_ms(2200); /* more than 2 ttls; renewed every 500 ms */
    CHECK_STATUS(mqstate_lease_acquire(b, 1000, NULL), MQSTATE_NOT_APPLIED);
    CHECK_OK(mqstate_lease_holder(b, &holder));
    check_holder(holder, "auto-a");
    mqstate_value_free(holder);
    CHECK_OK(mqstate_lease_current_token(a, &later));
    if (first != NULL && later != NULL) CHECK(compare_versions(first, later) == -1);
    CHECK_OK(mqstate_lease_release(a));
    /* Released: the renewal stopped, and the key stays free. */
    sleep_ms(500);
    CHECK_OK(mqstate_lease_acquire(b, 1000, NULL));
    CHECK_OK(mqstate_lease_release(b));
out:
    mqstate_version_free(first);
    mqstate_version_free(later);
    mqstate_lease_free(a);
    mqstate_lease_free(b);
    mqstate_client_free(ca);
    mqstate_client_free(cb);
}

/* Waits for the next lease event and checks its name and whether it carries a token. */
static void expect_lease_event(const mqstate_lease_events *events, const char *want, bool token) {
    mqstate_lease_event *event = NULL;
    const char *name = NULL, *reason = NULL;
    const mqstate_version *t = NULL;
    CHECK_OK(mqstate_lease_events_next(events, 20000, &event));
    if (event == NULL) return;
    CHECK_OK(mqstate_lease_event_name(event, &name));
    if (name != NULL && strcmp(name, want) != 0)
        fail_at(__FILE__, __LINE__, "lease event \"%s\", expected \"%s\"", name, want);
    CHECK_STATUS(mqstate_lease_event_token(event, &t), token ? MQSTATE_OK : MQSTATE_NOT_FOUND);
    CHECK_STATUS(mqstate_lease_event_reason(event, &reason), MQSTATE_NOT_FOUND);
    mqstate_lease_event_free(event);
}

static void test_lease_session_and_events(void) {
    mqstate_client *client = connect_client();
    uint8_t name[128];
    size_t name_len = make_key((char *)name, sizeof name, "lease-events");
    mqstate_lease *lease = NULL;
    mqstate_lease_events *events = NULL, *late = NULL;
    mqstate_lease_event *event = NULL;
    mqstate_value *holder = NULL;

    CHECK_OK(mqstate_lease_new_with_session(client, name, name_len, (const uint8_t *)"host", 4,
                                            (const uint8_t *)"s1", 2, &lease));
    if (lease == NULL) goto out;
    CHECK_STATUS(mqstate_lease_events_new(lease, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_OK(mqstate_lease_events_new(lease, &events));
    if (events == NULL) goto out;
    CHECK_OK(mqstate_lease_acquire(lease, 1000, NULL));
    expect_lease_event(events, "acquired", true);
    CHECK_OK(mqstate_lease_holder(lease, &holder));
    check_holder(holder, "host:s1");
    mqstate_value_free(holder);
    CHECK_OK(mqstate_lease_auto_renew(lease, 0.25));
    expect_lease_event(events, "renewed", true);
    CHECK_OK(mqstate_lease_release(lease));
    /* Renewals may come before the release is seen; the release is the last event. */
    for (int i = 0; i < 20; i++) {
        const char *n = NULL;
        if (mqstate_lease_events_next(events, 20000, &event) != MQSTATE_OK) break;
        mqstate_lease_event_name(event, &n);
        bool released = n != NULL && strcmp(n, "released") == 0;
        if (released) CHECK_STATUS(mqstate_lease_event_token(event, &(const mqstate_version *){NULL}), MQSTATE_NOT_FOUND);
        mqstate_lease_event_free(event);
        event = NULL;
        if (released) break;
        CHECK(n != NULL && strcmp(n, "renewed") == 0);
    }
    /* A stream made after the events sees none of them: the wait times out. */
    CHECK_OK(mqstate_lease_events_new(lease, &late));
    CHECK_STATUS(mqstate_lease_events_next(late, 200, &event), MQSTATE_TIMEOUT);
    CHECK(event == NULL);
    CHECK_STATUS(mqstate_lease_events_next(NULL, 200, &event), MQSTATE_NULL_PARAMETER);
out:
    mqstate_lease_events_free(late);
    mqstate_lease_events_free(events);
    mqstate_lease_free(lease);
    mqstate_client_free(client);
}

struct lock_waiter {
    const mqstate_lock *lock;
    mqstate_status status;
    mqstate_lock_guard *guard;
};

static void *lock_waiter_main(void *arg) {
    struct lock_waiter *w = arg;
    w->status = mqstate_lock_lock(w->lock, 10000, 10000, &w->guard);
    return NULL;
}

static void test_lock(void) {
    mqstate_client *ca = connect_client(), *cb = connect_client();
    uint8_t name[128], key[128];
    size_t name_len = make_key((char *)name, sizeof name, "lock-mutex");
    size_t key_len = make_key((char *)key, sizeof key, "lock-protected");
    mqstate_lock *la = NULL, *lb = NULL;
    mqstate_lock_guard *ga = NULL, *untouched = (mqstate_lock_guard *)&g_port;
    const mqstate_version *ta = NULL, *tb = NULL;
    struct lock_waiter waiter;
    pthread_t thread;

    memset(&waiter, 0, sizeof waiter);
    mqstate_client_del(ca, name, name_len, NULL);
    mqstate_client_del(ca, key, key_len, NULL);
    CHECK_OK(mqstate_lock_new(ca, name, name_len, (const uint8_t *)"worker-a", 8, &la));
    CHECK_OK(mqstate_lock_new(cb, name, name_len, (const uint8_t *)"worker-b", 8, &lb));
    if (la == NULL || lb == NULL) goto out;

    CHECK_OK(mqstate_lock_lock(la, 10000, 1000, &ga));
    if (ga == NULL) goto out;
    CHECK_OK(mqstate_lock_guard_token(ga, &ta));
    CHECK_OK(mqstate_client_set(ca, key, key_len, (const uint8_t *)"a", 1, MQSTATE_SET_ALWAYS, 0,
                                ta, NULL));
    /* Held: another holder times out. */
    CHECK_STATUS(mqstate_lock_lock(lb, 10000, 300, &untouched), MQSTATE_TIMEOUT);
    CHECK(untouched == (mqstate_lock_guard *)&g_port);

    /* Another thread waits for it; unlocking hands it over. */
    waiter.lock = lb;
    waiter.status = MQSTATE_UNKNOWN_ERROR;
    CHECK(pthread_create(&thread, NULL, lock_waiter_main, &waiter) == 0);
    sleep_ms(300);
    CHECK_OK(mqstate_lock_unlock(ga));
    CHECK_STATUS(mqstate_lock_unlock(ga), MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("unlocked already");
    pthread_join(thread, NULL);
    CHECK_STATUS(waiter.status, MQSTATE_OK);
    if (waiter.guard != NULL) {
        CHECK_OK(mqstate_lock_guard_token(waiter.guard, &tb));
        if (ta != NULL && tb != NULL) {
            CHECK(compare_versions(ta, tb) == -1);
            /* The new holder's token wins; the old one is refused. */
            CHECK_OK(mqstate_client_set(cb, key, key_len, (const uint8_t *)"b", 1,
                                        MQSTATE_SET_ALWAYS, 0, tb, NULL));
            CHECK_STATUS(mqstate_client_set(ca, key, key_len, (const uint8_t *)"late", 4,
                                            MQSTATE_SET_ALWAYS, 0, ta, NULL),
                         MQSTATE_SERVICE_ERROR);
            check_value(ca, key, key_len, (const uint8_t *)"b", 1, NULL);
            CHECK_OK(mqstate_client_del(cb, key, key_len, tb));
        }
        CHECK_OK(mqstate_lock_unlock(waiter.guard));
    }
out:
    mqstate_lock_guard_free(ga);
    mqstate_lock_guard_free(waiter.guard);
    mqstate_lock_free(la);
    mqstate_lock_free(lb);
    mqstate_client_free(ca);
    mqstate_client_free(cb);
}

/* mqstate_lock_edit callbacks: append "+", delete, or abandon. */
static bool edit_append(void *user_data, const uint8_t *old_value, size_t old_len,
                        const uint8_t **new_value, size_t *new_len) {
    uint8_t *buf = user_data;
    if (old_value == NULL || old_len > 60) return false;
    memcpy(buf, old_value, old_len);
    buf[old_len] = '+';
    *new_value = buf;
    *new_len = old_len + 1;
    return true;
}

static bool edit_delete(void *user_data, const uint8_t *old_value, size_t old_len,
                        const uint8_t **new_value, size_t *new_len) {
    (void)user_data; (void)old_value; (void)old_len; (void)new_len;
    *new_value = NULL;
    return true;
}

static bool edit_abandon(void *user_data, const uint8_t *old_value, size_t old_len,
                         const uint8_t **new_value, size_t *new_len) {
    (void)user_data; (void)old_value; (void)old_len; (void)new_value; (void)new_len;
    return false;
}

static void test_lock_edit_and_session(void) {
    mqstate_client *client = connect_client();
    uint8_t name[128], key[128], buf[64];
    size_t name_len = make_key((char *)name, sizeof name, "edit-lock");
    size_t key_len = make_key((char *)key, sizeof key, "edit-key");
    mqstate_lock *lock = NULL;
    mqstate_lock_guard *guard = NULL;
    mqstate_value *value = (mqstate_value *)&g_port, *holder = NULL;

    CHECK_OK(mqstate_lock_new_with_session(client, name, name_len, (const uint8_t *)"host", 4,
                                           (const uint8_t *)"s1", 2, &lock));
    if (lock == NULL) goto out;
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"1", 1,
                                MQSTATE_SET_ALWAYS, NULL, NULL, NULL));
    CHECK_OK(mqstate_lock_edit(lock, key, key_len, 10000, 10000, edit_append, buf, &value));
    if (value != NULL && value != (mqstate_value *)&g_port) {
        const uint8_t *data = NULL;
        size_t len = 0;
        CHECK_OK(mqstate_value_bytes(value, &data, &len));
        CHECK(len == 2 && memcmp(data, "1+", 2) == 0);
        mqstate_value_free(value);
    }
    check_value(client, key, key_len, (const uint8_t *)"1+", 2, NULL);
    /* Abandoned: nothing written, the lock released. */
    CHECK_STATUS(mqstate_lock_edit(lock, key, key_len, 10000, 10000, edit_abandon, NULL, NULL),
                 MQSTATE_NOT_APPLIED);
    check_value(client, key, key_len, (const uint8_t *)"1+", 2, NULL);
    CHECK_STATUS(mqstate_client_get(client, name, name_len, &holder), MQSTATE_NOT_FOUND);
    /* The holder is `holder:session` while locked. */
    CHECK_OK(mqstate_lock_lock(lock, 10000, 10000, &guard));
    check_value(client, name, name_len, (const uint8_t *)"host:s1", 7, NULL);
    CHECK_OK(mqstate_lock_unlock(guard));
    /* Deleting through the edit. */
    value = (mqstate_value *)&g_port;
    CHECK_OK(mqstate_lock_edit(lock, key, key_len, 10000, 10000, edit_delete, NULL, &value));
    CHECK(value == NULL);
    CHECK_STATUS(mqstate_client_get(client, key, key_len, &holder), MQSTATE_NOT_FOUND);
    CHECK_STATUS(mqstate_lock_edit(lock, key, key_len, 10000, 10000, NULL, NULL, NULL),
                 MQSTATE_NULL_PARAMETER);
out:
    mqstate_lock_guard_free(guard);
    mqstate_lock_free(lock);
    mqstate_client_free(client);
}

struct campaigner {
    const mqstate_election *election;
    mqstate_status status;
    mqstate_version *token;
};

static void *campaign_main(void *arg) {
    struct campaigner *c = arg;
    c->status = mqstate_election_campaign(c->election, 1000, 10000, &c->token);
    return NULL;
}

static void test_election(void) {
    mqstate_client *ca = connect_client(), *cb = connect_client();
    uint8_t name[128];
    size_t name_len = make_key((char *)name, sizeof name, "election");
    mqstate_election *e1 = NULL, *e2 = NULL;
    mqstate_version *t1 = NULL, *current = NULL;
    mqstate_value *leader = NULL;
    bool leads = false;
    struct campaigner c2;
    pthread_t thread;

    memset(&c2, 0, sizeof c2);
    mqstate_client_del(ca, name, name_len, NULL);
    CHECK_OK(mqstate_election_new(ca, name, name_len, (const uint8_t *)"n1", 2, &e1));
    CHECK_OK(mqstate_election_new(cb, name, name_len, (const uint8_t *)"n2", 2, &e2));
    if (e1 == NULL || e2 == NULL) goto out;

    CHECK_STATUS(mqstate_election_leader(e1, &leader), MQSTATE_NOT_FOUND);
    CHECK_OK(mqstate_election_is_leader(e1, &leads));
    CHECK(!leads);
    CHECK_STATUS(mqstate_election_resign(e1), MQSTATE_NOT_FOUND);

    CHECK_OK(mqstate_election_try_campaign(e1, 1500, &t1));
    CHECK(t1 != NULL);
    CHECK_STATUS(mqstate_election_try_campaign(e2, 1500, NULL), MQSTATE_NOT_APPLIED);
    CHECK_OK(mqstate_election_is_leader(e1, &leads));
    CHECK(leads);
    CHECK_OK(mqstate_election_is_leader(e2, &leads));
    CHECK(!leads);

    /* Past two terms, n1 still leads: its term is renewed automatically (every 750 ms). */
    sleep_ms(3200);
    CHECK_OK(mqstate_election_leader(e2, &leader));
    check_holder(leader, "n1");
    mqstate_value_free(leader);
    leader = NULL;
    /* The leader's current token has grown with the renewals; a standby has none. */
    CHECK_OK(mqstate_election_current_token(e1, &current));
    if (current != NULL && t1 != NULL) CHECK(compare_versions(t1, current) == -1);
    mqstate_version_free(current);
    current = NULL;
    CHECK_STATUS(mqstate_election_current_token(e2, &current), MQSTATE_NOT_FOUND);
    CHECK(current == NULL);
    CHECK_STATUS(mqstate_election_try_campaign(e2, 1500, NULL), MQSTATE_NOT_APPLIED);

    /* n2 campaigns (blocking, on another thread); n1 resigns; n2 is elected. */
    c2.election = e2;
    c2.status = MQSTATE_UNKNOWN_ERROR;
    CHECK(pthread_create(&thread, NULL, campaign_main, &c2) == 0);
    sleep_ms(300);
    CHECK_OK(mqstate_election_resign(e1));
    pthread_join(thread, NULL);
    CHECK_STATUS(c2.status, MQSTATE_OK);
    if (c2.token != NULL && t1 != NULL) CHECK(compare_versions(t1, c2.token) == -1);
    CHECK_OK(mqstate_election_is_leader(e1, &leads));
    CHECK(!leads);
    CHECK_OK(mqstate_election_is_leader(e2, &leads));
    CHECK(leads);
    CHECK_OK(mqstate_election_leader(e1, &leader));
    check_holder(leader, "n2");
    mqstate_value_free(leader);
    CHECK_STATUS(mqstate_election_resign(e1), MQSTATE_NOT_FOUND);
    CHECK_STATUS(mqstate_election_current_token(e1, &current), MQSTATE_NOT_FOUND);
    CHECK_OK(mqstate_election_resign(e2));
out:
    mqstate_version_free(t1);
    mqstate_version_free(c2.token);
    mqstate_election_free(e1);
    mqstate_election_free(e2);
    mqstate_client_free(ca);
    mqstate_client_free(cb);
}

/* NULL arguments of the lease / lock / election functions; a lease outliving its client. */
static void test_lock_api_nulls_and_closed_client(void) {
    mqstate_client *client = connect_client();
    const uint8_t n[] = "n";
    mqstate_lease *lease = (mqstate_lease *)&g_port;
    mqstate_lock *lock = (mqstate_lock *)&g_port;
    mqstate_election *election = (mqstate_election *)&g_port;
    mqstate_lease *real = NULL;
    mqstate_value *value = NULL;
    mqstate_version *token = NULL;
    const mqstate_version *borrowed = NULL;
    mqstate_lock_guard *guard = NULL;
    uint8_t name[128];
    size_t name_len = make_key((char *)name, sizeof name, "lease-closed");
    bool leads = false;

    CHECK_STATUS(mqstate_lease_new(NULL, n, 1, n, 1, &lease), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lease_new(client, NULL, 1, n, 1, &lease), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("name is NULL");
    CHECK_STATUS(mqstate_lease_new(client, n, 1, NULL, 1, &lease), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("holder is NULL");
    CHECK_STATUS(mqstate_lease_new(client, n, 1, n, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lease_new(client, n, 1, n, 0, &lease), MQSTATE_INVALID_ARGUMENT);
    CHECK(lease == (mqstate_lease *)&g_port);
    CHECK_STATUS(mqstate_lease_acquire(NULL, 1000, &token), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("lease is NULL");
    CHECK_STATUS(mqstate_lease_acquire_wait(NULL, 1000, 1000, &token), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lease_renew(NULL, &token), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lease_auto_renew(NULL, 0.5), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lease_release(NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lease_holder(NULL, &value), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lease_current_token(NULL, &token), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lock_new(NULL, n, 1, n, 1, &lock), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lock_new(client, n, 1, n, 1, NULL), MQSTATE_NULL_PARAMETER);
    CHECK(lock == (mqstate_lock *)&g_port);
    CHECK_STATUS(mqstate_lock_lock(NULL, 1000, 1000, &guard), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lock_guard_token(NULL, &borrowed), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_lock_unlock(NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_election_new(NULL, n, 1, n, 1, &election), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_election_new(client, n, 1, NULL, 1, &election), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("candidate is NULL");
    CHECK(election == (mqstate_election *)&g_port);
    CHECK_STATUS(mqstate_election_campaign(NULL, 1000, 1000, &token), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_election_try_campaign(NULL, 1000, &token), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_election_resign(NULL), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_election_current_token(NULL, &token), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_election_leader(NULL, &value), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_election_is_leader(NULL, &leads), MQSTATE_NULL_PARAMETER);
    CHECK(value == NULL && token == NULL && borrowed == NULL && guard == NULL);
    mqstate_lease_free(NULL);
    mqstate_lock_free(NULL);
    mqstate_lock_guard_free(NULL);
    mqstate_election_free(NULL);

    /* A lease used after its client was freed: DISCONNECTED, not a crash. */
    CHECK_OK(mqstate_lease_new(client, name, name_len, n, 1, &real));
    mqstate_client_free(client);
    if (real != NULL) {
        CHECK_STATUS(mqstate_lease_acquire(real, 1000, &token), MQSTATE_DISCONNECTED);
        CHECK(token == NULL);
        mqstate_lease_free(real);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Listing keys (SCAN)                                                                         */
/* ------------------------------------------------------------------------------------------ */

#define SCAN_KEYS 3000

/* What a scan listed: each numbered key PREFIX "scan/NNNN" counted, plus the binary one. */
struct scan_tally {
    pthread_mutex_t lock;
    int seen[SCAN_KEYS];
    int binary;  /* PREFIX "scan/bin" NUL CR LF 0xff */
    int strange; /* anything else (must stay 0) */
    int keys, pages, empty_pages;
};

static const uint8_t SCAN_BINARY_SUFFIX[] = {'b', 'i', 'n', 0, '\r', '\n', 0xff};

static size_t scan_key(uint8_t *buf, size_t len, int i) {
    char name[32];
    snprintf(name, sizeof name, "scan/%04d", i);
    return make_key((char *)buf, len, name);
}

static void tally_page(struct scan_tally *t, const mqstate_scan_page *page) {
    char base[128];
    size_t base_len = make_key(base, sizeof base, "scan/");
    size_t n = (size_t)-1, i;
    CHECK_OK(mqstate_scan_page_count(page, &n));
    if (n == (size_t)-1) return;
    pthread_mutex_lock(&t->lock);
    t->pages++;
    if (n == 0) t->empty_pages++;
    for (i = 0; i < n; i++) {
        const uint8_t *key = NULL;
        size_t len = 0;
        CHECK_OK(mqstate_scan_page_key(page, i, &key, &len));
        t->keys++;
        if (key == NULL || len <= base_len || memcmp(key, base, base_len) != 0) {
            t->strange++;
        } else if (len == base_len + sizeof SCAN_BINARY_SUFFIX &&
                   memcmp(key + base_len, SCAN_BINARY_SUFFIX, sizeof SCAN_BINARY_SUFFIX) == 0) {
            t->binary++;
        } else if (len == base_len + 4) {
            char digits[5];
            memcpy(digits, key + base_len, 4);
            digits[4] = 0;
            int k = atoi(digits);
            if (k >= 0 && k < SCAN_KEYS) t->seen[k]++;
            else t->strange++;
        } else {
            t->strange++;
        }
    }
    pthread_mutex_unlock(&t->lock);
}

/* Reads pages until the end (MQSTATE_NOT_FOUND); returns the status that ended the loop. */
static mqstate_status scan_to_end(const mqstate_scan *scan, struct scan_tally *t) {
    mqstate_status s;
    mqstate_scan_page *page = NULL;
    while ((s = mqstate_scan_next_page(scan, &page)) == MQSTATE_OK) {
        tally_page(t, page);
        mqstate_scan_page_free(page);
        page = NULL;
    }
    return s;
}

static void check_tally(struct scan_tally *t, int binary) {
    int i, missing = 0, twice = 0;
    for (i = 0; i < SCAN_KEYS; i++) {
        if (t->seen[i] == 0) missing++;
        if (t->seen[i] > 1) twice++;
    }
    if (missing || twice || t->strange || t->binary != binary)
        fail_at(__FILE__, __LINE__, "%d keys missing, %d listed twice, %d unexpected, binary key %d times",
                missing, twice, t->strange, t->binary);
    CHECK(t->keys == SCAN_KEYS + binary);
}

static void *scan_reader_main(void *arg) {
    void **args = arg;
    mqstate_status s = scan_to_end(args[0], args[1]);
    CHECK_STATUS(s, MQSTATE_NOT_FOUND);
    return NULL;
}

/* 3,000 keys (and a binary one) listed exactly once over several pages; a page outlives its
 * scan and client; two threads reading one scan share its pages. */
static void test_scan_pages(void) {
    mqstate_client *client = connect_client();
    uint8_t key[160], pattern[160];
    size_t key_len, pattern_len;
    int i;
    struct scan_tally *t = calloc(1, sizeof *t);
    mqstate_scan *scan = NULL;
    mqstate_scan_page *page = (mqstate_scan_page *)&g_port, *kept = NULL;
    bool done = true;

    if (t == NULL) {
        CHECK(t != NULL);
        mqstate_client_free(client);
        return;
    }
    pthread_mutex_init(&t->lock, NULL);
    for (i = 0; i < SCAN_KEYS; i++) {
        key_len = scan_key(key, sizeof key, i);
        mqstate_status s = mqstate_client_set(client, key, key_len, (const uint8_t *)"v", 1,
                                              MQSTATE_SET_ALWAYS, NULL, NULL, NULL);
        if (s != MQSTATE_OK) {
            CHECK_OK(s);
            break;
        }
    }
    key_len = make_key((char *)key, sizeof key, "scan/");
    memcpy(key + key_len, SCAN_BINARY_SUFFIX, sizeof SCAN_BINARY_SUFFIX);
    key_len += sizeof SCAN_BINARY_SUFFIX;
    CHECK_OK(mqstate_client_set(client, key, key_len, (const uint8_t *)"v", 1, MQSTATE_SET_ALWAYS,
                                NULL, NULL, NULL));

    /* Every key once, over several pages, then MQSTATE_NOT_FOUND (page_out untouched). */
    pattern_len = make_key((char *)pattern, sizeof pattern, "scan/*");
    CHECK_OK(mqstate_scan_new(client, pattern, pattern_len, &scan));
    CHECK_OK(mqstate_scan_is_done(scan, &done));
    CHECK(!done);
    CHECK_OK(mqstate_scan_next_page(scan, &kept)); /* kept past the scan and the client */
    if (kept != NULL) tally_page(t, kept);
    CHECK_OK(mqstate_scan_is_done(scan, &done));
    CHECK(!done);
    CHECK_STATUS(scan_to_end(scan, t), MQSTATE_NOT_FOUND);
    CHECK_MESSAGE_HAS("done");
    CHECK_OK(mqstate_scan_is_done(scan, &done));
    CHECK(done);
    CHECK_STATUS(mqstate_scan_next_page(scan, &page), MQSTATE_NOT_FOUND);
    CHECK(page == (mqstate_scan_page *)&g_port);
    check_tally(t, 1);
    CHECK(t->pages >= SCAN_KEYS / 500);
    printf("    %d keys in %d pages (%d empty)\n", t->keys, t->pages, t->empty_pages);
    mqstate_scan_free(scan);
    scan = NULL;

    /* A binary pattern (a NUL inside): only the binary key. */
    memset(t->seen, 0, sizeof t->seen);
    t->binary = t->strange = t->keys = t->pages = t->empty_pages = 0;
    pattern_len = make_key((char *)pattern, sizeof pattern, "scan/bin");
    pattern[pattern_len++] = 0;
    pattern[pattern_len++] = '*';
    CHECK_OK(mqstate_scan_new(client, pattern, pattern_len, &scan));
    CHECK_STATUS(scan_to_end(scan, t), MQSTATE_NOT_FOUND);
    CHECK(t->keys == 1 && t->binary == 1 && t->strange == 0);
    mqstate_scan_free(scan);
    scan = NULL;

    /* Two threads reading one scan: calls are serialised, each page goes to one of them. */
    memset(t->seen, 0, sizeof t->seen);
    t->binary = t->strange = t->keys = t->pages = t->empty_pages = 0;
    pattern_len = make_key((char *)pattern, sizeof pattern, "scan/????");
    CHECK_OK(mqstate_scan_new(client, pattern, pattern_len, &scan));
    if (scan != NULL) {
        pthread_t threads[2];
        void *args[2] = {scan, t};
        for (i = 0; i < 2; i++) CHECK(pthread_create(&threads[i], NULL, scan_reader_main, args) == 0);
        for (i = 0; i < 2; i++) pthread_join(threads[i], NULL);
        check_tally(t, 0);
        mqstate_scan_free(scan);
    }

    /* The first page, still readable after its scan and its client are freed. */
    mqstate_client_free(client);
    if (kept != NULL) {
        size_t n = 0;
        const uint8_t *first = NULL;
        size_t first_len = 0;
        CHECK_OK(mqstate_scan_page_count(kept, &n));
        CHECK(n > 0);
        CHECK_OK(mqstate_scan_page_key(kept, 0, &first, &first_len));
        CHECK(first != NULL && first_len > 0);
        CHECK_STATUS(mqstate_scan_page_key(kept, n, &first, &first_len), MQSTATE_INVALID_ARGUMENT);
        CHECK_MESSAGE_HAS("out of range");
        mqstate_scan_page_free(kept);
    }
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* An empty pattern is refused before anything is sent; a malformed one is the server's error
 * on the first page; NULL arguments are statuses; a scan outliving its client. */
static void test_scan_errors(void) {
    mqstate_client *client = connect_client();
    mqstate_scan *scan = (mqstate_scan *)&g_port, *real = NULL;
    mqstate_scan_page *page = (mqstate_scan_page *)&g_port;
    const uint8_t *key = NULL;
    size_t n = 0, len = 0;
    bool done = false;
    uint8_t pattern[160];
    size_t pattern_len = make_key((char *)pattern, sizeof pattern, "k[");
    mqstate_service_error kind = MQSTATE_SERVICE_ERROR_NONE;

    /* NULL arguments. */
    CHECK_STATUS(mqstate_scan_new(NULL, pattern, pattern_len, &scan), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("client is NULL");
    CHECK_STATUS(mqstate_scan_new(client, NULL, 1, &scan), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("pattern is NULL");
    CHECK_STATUS(mqstate_scan_new(client, NULL, 0, &scan), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_scan_new(client, pattern, pattern_len, NULL), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("scan_out is NULL");
    CHECK_STATUS(mqstate_scan_next_page(NULL, &page), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("scan is NULL");
    CHECK_STATUS(mqstate_scan_is_done(NULL, &done), MQSTATE_NULL_PARAMETER);
    CHECK_STATUS(mqstate_scan_page_count(NULL, &n), MQSTATE_NULL_PARAMETER);
    CHECK_MESSAGE_HAS("page is NULL");
    CHECK_STATUS(mqstate_scan_page_key(NULL, 0, &key, &len), MQSTATE_NULL_PARAMETER);
    mqstate_scan_free(NULL);
    mqstate_scan_page_free(NULL);

    /* An empty pattern: MQSTATE_INVALID_ARGUMENT, with the message set as for other errors. */
    CHECK_STATUS(mqstate_scan_new(client, pattern, 0, &scan), MQSTATE_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("pattern is empty");
    CHECK(scan == (mqstate_scan *)&g_port);

    /* A malformed pattern: the server's error on the first page; the scan stays where it was
     * (asking again sends the same request, and fails the same way). */
    CHECK_OK(mqstate_scan_new(client, pattern, pattern_len, &real));
    if (real != NULL) {
        int round;
        for (round = 0; round < 2; round++) {
            CHECK_STATUS(mqstate_scan_next_page(real, &page), MQSTATE_SERVICE_ERROR);
            CHECK_MESSAGE_HAS("no closing ']'");
            CHECK_OK(mqstate_error_service_kind(&kind));
            CHECK(kind != MQSTATE_SERVICE_ERROR_NONE);
            CHECK(page == (mqstate_scan_page *)&g_port);
            CHECK_OK(mqstate_scan_is_done(real, &done));
            CHECK(!done);
        }
        CHECK_STATUS(mqstate_scan_next_page(real, NULL), MQSTATE_NULL_PARAMETER);
        CHECK_STATUS(mqstate_scan_is_done(real, NULL), MQSTATE_NULL_PARAMETER);
        CHECK_MESSAGE_HAS("done_out is NULL");
        mqstate_scan_free(real);
        real = NULL;
    }

    /* After close: making a scan sends nothing, so it succeeds (and an empty pattern is still
     * MQSTATE_INVALID_ARGUMENT); its page is MQSTATE_DISCONNECTED. It may outlive its client. */
    pattern_len = make_key((char *)pattern, sizeof pattern, "*");
    CHECK_OK(mqstate_client_close(client));
    CHECK_STATUS(mqstate_scan_new(client, pattern, 0, &scan), MQSTATE_INVALID_ARGUMENT);
    CHECK_OK(mqstate_scan_new(client, pattern, pattern_len, &real));
    mqstate_client_free(client);
    if (real != NULL) {
        CHECK_STATUS(mqstate_scan_next_page(real, &page), MQSTATE_DISCONNECTED);
        CHECK(page == (mqstate_scan_page *)&g_port);
        mqstate_scan_free(real);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Shared vectors (the JSON files of tests/vectors, via tests/vectors_to_lines.py)             */
/* ------------------------------------------------------------------------------------------ */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the converter's hex fields (this test's own decoder, independent of the library's).
 * Returns a malloc'd NUL-terminated buffer; *len_out excludes the NUL. */
static char *unhex(const char *hex, size_t *len_out) {
    size_t n = strlen(hex) / 2, i;
    char *out = malloc(n + 1);
    if (out == NULL) abort();
    for (i = 0; i < n; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) abort();
        out[i] = (char)(hi * 16 + lo);
    }
    out[n] = '\0';
    if (len_out != NULL) *len_out = n;
    return out;
}

#define MAX_FIELDS 8

/* Splits a line on tabs in place (empty fields kept). Returns the number of fields. */
static int split_tabs(char *line, char **fields) {
    int n = 0;
    char *p = line;
    size_t len = strlen(line);
    if (len > 0 && line[len - 1] == '\n') line[len - 1] = '\0';
    while (n < MAX_FIELDS) {
        char *tab = strchr(p, '\t');
        fields[n++] = p;
        if (tab == NULL) break;
        *tab = '\0';
        p = tab + 1;
    }
    return n;
}

struct vector_counts {
    int hlc_valid, hlc_malformed, hlc_order, hlc_equal, hex_encode, hex_decode, hex_decode_error;
    int expected_total, total;
};

static mqstate_version *parse_hex_version(const char *hex) {
    char *text = unhex(hex, NULL);
    mqstate_version *v = NULL;
    CHECK_OK(mqstate_version_parse(text, &v));
    if (v == NULL) fail_at(__FILE__, __LINE__, "  (vector text \"%s\")", text);
    free(text);
    return v;
}

static void vector_hlc_valid(char **f) {
    /* text, ms, counter, node_id, display */
    char *text = unhex(f[1], NULL), *display = unhex(f[5], NULL);
    size_t node_len = 0;
    char *node = unhex(f[4], &node_len);
    mqstate_version *v = NULL;
    CHECK_OK(mqstate_version_parse(text, &v));
    if (v != NULL) {
        mqstate_hlc parts;
        char buf[512], ms[32], counter[32];
        CHECK_OK(mqstate_version_parts(v, &parts));
        snprintf(ms, sizeof ms, "%llu", (unsigned long long)parts.ms);
        snprintf(counter, sizeof counter, "%llu", (unsigned long long)parts.counter);
        if (strcmp(ms, f[2]) != 0 || strcmp(counter, f[3]) != 0 || parts.node_id_len != node_len ||
            memcmp(parts.node_id, node, node_len) != 0 ||
            strcmp(version_text(v, buf, sizeof buf), display) != 0)
            fail_at(__FILE__, __LINE__, "valid HLC \"%s\": got %s:%s:%s, display \"%s\"", text, ms,
                    counter, parts.node_id, buf);
        mqstate_version_free(v);
    }
    free(text);
    free(display);
    free(node);
}

static void vector_hlc_malformed(char **f) {
    char *text = unhex(f[1], NULL);
    mqstate_version *v = NULL;
    mqstate_status s = mqstate_version_parse(text, &v);
    if (s != MQSTATE_INVALID_ARGUMENT || v != NULL)
        fail_at(__FILE__, __LINE__, "malformed HLC \"%s\" (%s): %s", text, f[2],
                mqstate_status_name(s));
    else
        CHECK_MESSAGE_HAS("malformed HLC");
    mqstate_version_free(v);
    free(text);
}

static void vector_hlc_compare(char **f, int expected) {
    mqstate_version *a = parse_hex_version(f[1]), *b = parse_hex_version(f[2]);
    if (a != NULL && b != NULL) {
        int ab = compare_versions(a, b), ba = compare_versions(b, a);
        if (ab != expected || ba != -expected)
            fail_at(__FILE__, __LINE__, "compare %s vs %s: %d / %d, expected %d", f[1], f[2], ab,
                    ba, expected);
    }
    mqstate_version_free(a);
    mqstate_version_free(b);
}

static void vector_hex_encode(char **f) {
    size_t len = 0, written = 0;
    char *bytes = unhex(f[1], &len);
    char *buf = malloc(2 * len + 1);
    if (buf == NULL) abort();
    /* One byte short: refused, nothing written. */
    CHECK_STATUS(mqstate_hex_encode((const uint8_t *)bytes, len, buf, 2 * len, &written),
                 MQSTATE_BUFFER_TOO_SMALL);
    CHECK(written == 0);
    CHECK_OK(mqstate_hex_encode((const uint8_t *)bytes, len, buf, 2 * len + 1, &written));
    if (written != 2 * len || strcmp(buf, f[2]) != 0)
        fail_at(__FILE__, __LINE__, "hex_encode: \"%s\", expected \"%s\"", buf, f[2]);
    free(bytes);
    free(buf);
}

static void vector_hex_decode(char **f) {
    size_t want_len = 0, written = 0;
    char *text = unhex(f[1], NULL), *want = unhex(f[2], &want_len);
    uint8_t *buf = malloc(want_len + 1);
    if (buf == NULL) abort();
    CHECK_OK(mqstate_hex_decode(text, buf, want_len, &written));
    if (written != want_len || memcmp(buf, want, want_len) != 0)
        fail_at(__FILE__, __LINE__, "hex_decode \"%s\": wrong bytes", text);
    if (want_len > 0)
        CHECK_STATUS(mqstate_hex_decode(text, buf, want_len - 1, &written),
                     MQSTATE_BUFFER_TOO_SMALL);
    free(text);
    free(want);
    free(buf);
}

static void vector_hex_decode_error(char **f) {
    size_t written = 77;
    char *text = unhex(f[1], NULL);
    uint8_t buf[64];
    mqstate_status s = mqstate_hex_decode(text, buf, sizeof buf, &written);
    if (s != MQSTATE_INVALID_ARGUMENT || written != 77) {
        fail_at(__FILE__, __LINE__, "hex_decode \"%s\" (%s): %s", text, f[2],
                mqstate_status_name(s));
    } else if (strcmp(f[2], "odd_hex_length") == 0) {
        CHECK_MESSAGE_HAS("odd number of digits");
    } else if (strcmp(f[2], "invalid_hex_char") == 0) {
        char needle[32];
        snprintf(needle, sizeof needle, "at byte %s ", f[3]);
        CHECK_MESSAGE_HAS(needle);
    } else {
        fail_at(__FILE__, __LINE__, "unknown hex error kind %s", f[2]);
    }
    free(text);
}

static void test_shared_vectors(void) {
    FILE *file = fopen(g_vectors_path, "r");
    struct vector_counts c;
    char *line = NULL;
    size_t cap = 0;

    memset(&c, 0, sizeof c);
    c.expected_total = -1;
    if (file == NULL) {
        fail_at(__FILE__, __LINE__, "cannot open %s", g_vectors_path);
        return;
    }
    while (getline(&line, &cap, file) != -1) {
        char *f[MAX_FIELDS];
        int n = split_tabs(line, f);
        const char *kind = f[0];
        if (strcmp(kind, "end") == 0 && n == 2) {
            c.expected_total = atoi(f[1]);
            continue;
        }
        c.total++;
        if (strcmp(kind, "hlc_valid") == 0 && n == 6) {
            c.hlc_valid++;
            vector_hlc_valid(f);
        } else if (strcmp(kind, "hlc_malformed") == 0 && n == 3) {
            c.hlc_malformed++;
            vector_hlc_malformed(f);
        } else if (strcmp(kind, "hlc_order") == 0 && n == 3) {
            c.hlc_order++;
            vector_hlc_compare(f, -1);
        } else if (strcmp(kind, "hlc_equal") == 0 && n == 3) {
            c.hlc_equal++;
            vector_hlc_compare(f, 0);
        } else if (strcmp(kind, "hex_encode") == 0 && n == 3) {
            c.hex_encode++;
            vector_hex_encode(f);
        } else if (strcmp(kind, "hex_decode") == 0 && n == 3) {
            c.hex_decode++;
            vector_hex_decode(f);
        } else if (strcmp(kind, "hex_decode_error") == 0 && n == 4) {
            c.hex_decode_error++;
            vector_hex_decode_error(f);
        } else {
            fail_at(__FILE__, __LINE__, "unknown vector line: %s (%d fields)", kind, n);
        }
    }
    free(line);
    fclose(file);
    CHECK(c.expected_total == c.total);
    CHECK(c.hlc_valid > 0 && c.hlc_malformed > 0 && c.hlc_order > 0 && c.hlc_equal > 0);
    CHECK(c.hex_encode > 0 && c.hex_decode > 0 && c.hex_decode_error > 0);
    printf("    vectors: %d HLC valid, %d HLC malformed, %d HLC ordering, %d HLC equal, "
           "%d hex encode, %d hex decode, %d hex decode errors\n",
           c.hlc_valid, c.hlc_malformed, c.hlc_order, c.hlc_equal, c.hex_encode, c.hex_decode,
           c.hex_decode_error);
}

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    long port;
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT VECTORS_FILE\n", argv[0]);
        return 2;
    }
    port = strtol(argv[1], NULL, 10);
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "bad port %s\n", argv[1]);
        return 2;
    }
    g_port = (uint16_t)port;
    g_vectors_path = argv[2];
    snprintf(g_prefix, sizeof g_prefix, "c-test-%ld-", (long)getpid());

    /* First, while no other thread of ours exists (setenv is not thread-safe). */
    run("connect from the AIO_* environment", test_connect_from_env);
    run("status names, stable values, panic boundary, message truncation",
        test_status_names_and_panic);
    run("NULL parameters give MQSTATE_NULL_PARAMETER and leave outputs alone",
        test_null_parameters);
    run("connect options: URL, setters, validation, copies", test_connect_options);
    run("connection refused is an error, client_out untouched", test_connect_refused);
    run("a connect that times out is MQSTATE_TIMEOUT naming host:port", test_connect_timeout);
    run("binary keys and values (NUL, CR LF), empty and 65000-byte values, not found",
        test_binary_values_round_trip);
    run("NX / NEX not applied, VDEL mismatch / not found", test_conditions_and_vdel);
    run("expiry (PX)", test_expiry);
    run("versions: string, parts, parse, new, clone, compare", test_versions);
    run("service errors read back (fencing tokens)", test_service_error_and_fencing);
    run("observe: notifications on a library thread, destroy after unobserve",
        test_observe_and_unobserve);
    run("free ends observations (destroy called)", test_free_ends_observations);
    run("callback re-enters the library and unobserves itself", test_callback_reentrancy);
    run("4 threads share one client", test_four_threads_share_a_client);
    run("close: later calls are DISCONNECTED", test_close);
    run("per-client request timeout", test_client_timeout);
    run("lease: acquire, refused, holder, renew, fencing, wait, release", test_lease);
    run("lease: automatic renewal past the ttl", test_lease_auto_renew);
    run("lease: holder:session, and its events (acquired, renewed, released)", test_lease_session_and_events);
    run("lock: lock, timeout, hand-over to a waiting thread, fencing", test_lock);
    run("lock: edit with a callback (write, abandon, delete), holder:session",
        test_lock_edit_and_session);
    run("election: try_campaign, renewed term, campaign, resign, leader", test_election);
    run("lease / lock / election: NULL parameters; a lease outliving its client",
        test_lock_api_nulls_and_closed_client);
    run("scan: 3,000 keys once over pages, binary keys, two readers, a page outliving its scan",
        test_scan_pages);
    run("scan: empty pattern, malformed pattern (service error), NULL arguments, closed client",
        test_scan_errors);
    run("shared vectors: HLC parse / display / order, hex", test_shared_vectors);

    printf("C tests: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
