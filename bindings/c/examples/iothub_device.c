/* A device that prints each cloud-to-device message and completes it.
 *
 *   mqstate serve --iothub-device dev1
 *   ./iothub_device "HostName=...;DeviceId=dev1;SharedAccessKey=..." 127.0.0.1 8883
 *   mqstate iothub send dev1 hello -P colour=blue
 *
 * Plain TCP (the local hub); stops after 10 s without a message.
 */
#include <stdio.h>
#include <stdlib.h>

#include <mqstate.h>

static void fail(const char *what, mqstate_status status) {
    char message[512];
    size_t written = 0;
    mqstate_error_message(message, sizeof message, &written);
    fprintf(stderr, "%s: %s: %s\n", what, mqstate_status_name(status), message);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s CONNECTION_STRING HOST PORT\n", argv[0]);
        return 2;
    }
    mqstate_iothub_device *device = NULL;
    mqstate_status s = mqstate_iothub_device_new(argv[1], argv[2], (uint16_t)atoi(argv[3]),
                                                 false, NULL, 0, &device);
    if (s != MQSTATE_OK) fail("connect", s);
    printf("connected; waiting for messages\n");
    for (;;) {
        mqstate_c2d_message *msg = NULL;
        s = mqstate_iothub_device_receive(device, 10000, &msg);
        if (s == MQSTATE_TIMEOUT) break;
        if (s != MQSTATE_OK) fail("receive", s);
        const uint8_t *data = NULL;
        size_t len = 0;
        const char *id = NULL;
        mqstate_c2d_message_payload(msg, &data, &len);
        if (mqstate_c2d_message_system_property(msg, "message_id", &id) != MQSTATE_OK) id = "(none)";
        printf("message %s: %.*s\n", id, (int)len, (const char *)data);
        size_t count = 0;
        mqstate_c2d_message_property_count(msg, &count);
        for (size_t i = 0; i < count; i++) {
            const char *name = NULL, *value = NULL;
            mqstate_c2d_message_property(msg, i, &name, &value);
            printf("  %s = %s\n", name, value ? value : "(null)");
        }
        s = mqstate_c2d_complete(msg);
        mqstate_c2d_message_free(msg);
        if (s != MQSTATE_OK) fail("complete", s);
    }
    mqstate_iothub_device_free(device);
    return 0;
}
