/* A device that prints each cloud-to-device message and settles it: rejects it when its
 * property "action" is "reject", abandons its first delivery when it is "abandon" (the hub
 * delivers it again, its delivery count one higher), completes it otherwise. Reject and
 * abandon need AMQP; over MQTT they fail with MQSTATE_NOT_SUPPORTED and the message is
 * completed instead.
 *
 *   mqstate serve --iothub-device dev1 --iothub-ca-out hub-ca.pem
 *   ./iothub_device "HostName=...;DeviceId=dev1;SharedAccessKey=..." 127.0.0.1 8883
 *   ./iothub_device "HostName=...;DeviceId=dev1;SharedAccessKey=..." 127.0.0.1 5671 amqp hub-ca.pem
 *   mqstate iothub send dev1 hello -P action=reject --ack full
 *
 * MQTT over plain TCP (the local hub's device endpoint), or AMQP over TLS trusting CA_FILE
 * (the local hub's AMQP endpoint and the certificate it generated). Stops after 10 s without
 * a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mqstate.h>

static void fail(const char *what, mqstate_status status) {
    char message[512];
    size_t written = 0;
    mqstate_error_message(message, sizeof message, &written);
    fprintf(stderr, "%s: %s: %s\n", what, mqstate_status_name(status), message);
    exit(1);
}

static void check(const char *what, mqstate_status status) {
    if (status != MQSTATE_OK) fail(what, status);
}

/* The value of the application property `name`, or NULL. */
static const char *property(const mqstate_c2d_message *msg, const char *name) {
    size_t count = 0;
    mqstate_c2d_message_property_count(msg, &count);
    for (size_t i = 0; i < count; i++) {
        const char *n = NULL, *value = NULL;
        if (mqstate_c2d_message_property(msg, i, &n, &value) == MQSTATE_OK && strcmp(n, name) == 0)
            return value;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 6) {
        fprintf(stderr, "usage: %s CONNECTION_STRING HOST PORT [mqtt|amqp CA_FILE]\n", argv[0]);
        return 2;
    }
    bool amqp = argc == 6 && strcmp(argv[4], "amqp") == 0;
    mqstate_iothub_options *options = NULL;
    check("options", mqstate_iothub_options_new(argv[1], &options));
    check("host", mqstate_iothub_options_set_host(options, argv[2]));
    check("port", mqstate_iothub_options_set_port(options, (uint16_t)atoi(argv[3])));
    if (argc == 6) {
        check("transport", mqstate_iothub_options_set_transport(options, argv[4]));
        check("CA file", mqstate_iothub_options_set_ca_file(options, argv[5]));
    } else {
        check("TLS", mqstate_iothub_options_set_tls(options, false));
    }
    /* An X.509 device ("...;x509=true") would add:
     * mqstate_iothub_options_set_client_cert(options, "dev1.pem", "dev1.key"); */
    mqstate_iothub_device *device = NULL;
    mqstate_status s = mqstate_iothub_device_connect(options, &device);
    mqstate_iothub_options_free(options); /* the device keeps a copy */
    check("connect", s);
    printf("connected over %s; waiting for messages\n", amqp ? "AMQP" : "MQTT");
    for (;;) {
        mqstate_c2d_message *msg = NULL;
        s = mqstate_iothub_device_receive(device, 10000, &msg);
        if (s == MQSTATE_TIMEOUT) break;
        check("receive", s);
        const uint8_t *data = NULL;
        size_t len = 0;
        const char *id = NULL;
        mqstate_c2d_message_payload(msg, &data, &len);
        if (mqstate_c2d_message_system_property(msg, "message_id", &id) != MQSTATE_OK) id = "(none)";
        uint32_t deliveries = 0; /* MQSTATE_NOT_FOUND over MQTT, which does not carry it */
        mqstate_c2d_message_delivery_count(msg, &deliveries);
        printf("message %s (delivery count %u): %.*s\n", id, (unsigned)deliveries, (int)len,
               (const char *)data);
        const char *action = property(msg, "action");
        if (action && strcmp(action, "reject") == 0) {
            s = mqstate_c2d_reject(msg); /* dead-lettered: Rejected feedback */
        } else if (action && strcmp(action, "abandon") == 0 && deliveries == 0) {
            s = mqstate_c2d_abandon(msg); /* delivered again, delivery count 1 */
        } else {
            s = mqstate_c2d_complete(msg);
        }
        if (s == MQSTATE_NOT_SUPPORTED) {
            printf("  %s is not possible over MQTT: completed\n", action);
            s = mqstate_c2d_complete(msg);
        }
        mqstate_c2d_message_free(msg);
        check("settle", s);
    }
    mqstate_iothub_device_free(device);
    return 0;
}
