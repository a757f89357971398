/*
 * Install test (scripts/test-install): a C program built against the unpacked C SDK, with
 * pkg-config or with CMake's find_package(mqstate). It sets a key and reads it back.
 *
 *   ./set_get_c mqtt://127.0.0.1:PORT KEY
 */
#include <mqstate.h>

#include <stdio.h>
#include <string.h>

static int fail(const char *what, mqstate_status status) {
    char message[512];
    size_t len = 0;
    mqstate_error_message(message, sizeof message, &len);
    fprintf(stderr, "%s: %s: %s\n", what, mqstate_status_name(status), message);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL KEY\n", argv[0]);
        return 2;
    }
    const char *key = argv[2];
    const char *expected = "set from C";
    mqstate_connect_options *options = NULL;
    mqstate_client *client = NULL;
    mqstate_value *value = NULL;
    mqstate_status status;
    const uint8_t *data = NULL;
    size_t len = 0;

    if ((status = mqstate_connect_options_from_url(argv[1], &options)) != MQSTATE_OK)
        return fail("options", status);
    status = mqstate_client_new(options, &client);
    mqstate_connect_options_free(options);
    if (status != MQSTATE_OK) return fail("connect", status);

    status = mqstate_client_set(client, (const uint8_t *)key, strlen(key),
                                (const uint8_t *)expected, strlen(expected), MQSTATE_SET_ALWAYS,
                                NULL, NULL, NULL);
    if (status != MQSTATE_OK) return fail("set", status);
    status = mqstate_client_get(client, (const uint8_t *)key, strlen(key), &value);
    if (status != MQSTATE_OK) return fail("get", status);
    mqstate_value_bytes(value, &data, &len);
    int same = len == strlen(expected) && memcmp(data, expected, len) == 0;
    printf("C: set %s, got \"%.*s\"\n", key, (int)len, (const char *)data);
    mqstate_value_free(value);
    mqstate_client_free(client);
    if (!same) {
        fprintf(stderr, "C: expected \"%s\"\n", expected);
        return 1;
    }
    return 0;
}
