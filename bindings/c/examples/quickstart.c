/*
 * mqstate quick start in C: connect, set, get, a conditional set, a change notification,
 * delete, and a lock whose fencing token protects a write.
 *
 * Build (from the repository root, after `cargo build -p mqstate-ffi`, with the pkg-config
 * file scripts/test-c generates in target/debug/pkgconfig):
 *
 *   export PKG_CONFIG_PATH=$PWD/target/debug/pkgconfig
 *   cc -std=c11 bindings/c/examples/quickstart.c $(pkg-config --cflags --libs mqstate) -o quickstart
 *
 * Run it against a local state store (`mqstate serve` listens on mqtt://127.0.0.1:1883):
 *
 *   ./quickstart [mqtt://127.0.0.1:1883]
 */
#define _POSIX_C_SOURCE 200809L

#include <mqstate.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Prints what failed, with the library's message (the calling thread's last error). */
static int report(const char *what, mqstate_status status) {
    char message[512];
    size_t len = 0;
    mqstate_error_message(message, sizeof message, &len);
    fprintf(stderr, "%s: %s: %s\n", what, mqstate_status_name(status), message);
    return 1;
}

/* Runs on a library thread, once per change of the observed key. */
static void on_change(void *user_data, const mqstate_notification *notification) {
    const char *name = user_data;
    mqstate_notification_kind kind = 0;
    const uint8_t *value = NULL;
    size_t len = 0;
    mqstate_notification_get_kind(notification, &kind);
    if (kind == MQSTATE_NOTIFICATION_SET &&
        mqstate_notification_value(notification, &value, &len) == MQSTATE_OK) {
        printf("[%s] set to \"%.*s\"\n", name, (int)len, (const char *)value);
    } else if (kind == MQSTATE_NOTIFICATION_DELETE) {
        printf("[%s] deleted\n", name);
    }
}

/* Runs once when the observation ends (after its last notification). */
static void on_end(void *user_data) {
    printf("[%s] observation ended\n", (const char *)user_data);
}

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : "mqtt://127.0.0.1:1883";
    static const uint8_t key[] = "door";
    const size_t key_len = sizeof key - 1;
    mqstate_connect_options *options = NULL;
    mqstate_client *client = NULL;
    mqstate_version *version = NULL;
    mqstate_value *value = NULL;
    mqstate_status status;
    const char *text = NULL;
    const uint8_t *data = NULL;
    size_t len = 0;
    struct timespec pause = {0, 200 * 1000 * 1000};

    if ((status = mqstate_connect_options_from_url(url, &options)) != MQSTATE_OK)
        return report("options", status);
    status = mqstate_client_new(options, &client);
    mqstate_connect_options_free(options); /* the client keeps its own copy */
    if (status != MQSTATE_OK) return report("connect", status);

    /* Be told about changes of the key (on a library thread). */
    if ((status = mqstate_client_observe(client, key, key_len, on_change, on_end,
                                         (void *)"door watcher")) != MQSTATE_OK)
        return report("observe", status);

    /* SET, and the version the store gave the value. */
    status = mqstate_client_set(client, key, key_len, (const uint8_t *)"open", 4,
                                MQSTATE_SET_ALWAYS, NULL, NULL, &version);
    if (status != MQSTATE_OK) return report("set", status);
    mqstate_version_string(version, &text, NULL);
    printf("set door = open, version %s\n", text);
    mqstate_version_free(version);

    /* GET: the value and its version (borrowed from the value). */
    status = mqstate_client_get(client, key, key_len, &value);
    if (status == MQSTATE_OK) {
        const mqstate_version *v = NULL;
        mqstate_value_bytes(value, &data, &len);
        mqstate_value_version(value, &v);
        mqstate_version_string(v, &text, NULL);
        printf("get door -> \"%.*s\" (version %s)\n", (int)len, (const char *)data, text);
        mqstate_value_free(value);
    } else if (status == MQSTATE_NOT_FOUND) {
        printf("get door -> no such key\n");
    } else {
        return report("get", status);
    }

    /* NX: only if the key does not exist. It does, so this is not applied. */
    status = mqstate_client_set(client, key, key_len, (const uint8_t *)"closed", 6,
                                MQSTATE_SET_NX, 0, NULL, NULL);
    printf("set door = closed if absent -> %s\n", mqstate_status_name(status));

    nanosleep(&pause, NULL); /* give the notification a moment to arrive */
    status = mqstate_client_del(client, key, key_len, NULL);
    printf("del door -> %s\n", mqstate_status_name(status));
    nanosleep(&pause, NULL);

    /* Ends the observation: on_end has run when this returns. */
    mqstate_client_unobserve(client, key, key_len);

    /* A lock (a lease with a fencing token): writes under it carry the token, so that a
     * holder that lost the lock without knowing cannot overwrite the next holder's work. */
    {
        static const uint8_t lock_name[] = "pump-lock", holder[] = "edge-node-7";
        static const uint8_t speed[] = "pump/speed";
        mqstate_lock *lock = NULL;
        mqstate_lock_guard *guard = NULL;
        const mqstate_version *token = NULL;
        if ((status = mqstate_lock_new(client, lock_name, sizeof lock_name - 1, holder,
                                       sizeof holder - 1, &lock)) != MQSTATE_OK)
            return report("lock_new", status);
        /* Hold it for at most 10 s; wait at most 5 s for it. */
        if ((status = mqstate_lock_lock(lock, 10000, 5000, &guard)) != MQSTATE_OK)
            return report("lock", status);
        mqstate_lock_guard_token(guard, &token);
        mqstate_version_string(token, &text, NULL);
        printf("locked pump-lock, fencing token %s\n", text);
        status = mqstate_client_set(client, speed, sizeof speed - 1, (const uint8_t *)"1200", 4,
                                    MQSTATE_SET_ALWAYS, NULL, token, NULL);
        printf("set pump/speed = 1200 with the token -> %s\n", mqstate_status_name(status));
        status = mqstate_client_del(client, speed, sizeof speed - 1, token);
        printf("del pump/speed with the token -> %s\n", mqstate_status_name(status));
        printf("unlock -> %s\n", mqstate_status_name(mqstate_lock_unlock(guard)));
        mqstate_lock_guard_free(guard);
        mqstate_lock_free(lock);
    }

    mqstate_client_free(client);
    return 0;
}
