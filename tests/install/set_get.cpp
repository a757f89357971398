// Install test (scripts/test-install): a C++ program built against the unpacked C SDK, with
// pkg-config or with CMake's find_package(mqstate). It sets a key and reads it back.
//
//   ./set_get_cpp mqtt://127.0.0.1:PORT KEY
#include <mqstate.h>

#include <cstdio>
#include <memory>
#include <string>

namespace {

struct ClientFree {
    void operator()(mqstate_client *client) const { mqstate_client_free(client); }
};
struct ValueFree {
    void operator()(mqstate_value *value) const { mqstate_value_free(value); }
};

int fail(const char *what, mqstate_status status) {
    char message[512];
    size_t len = 0;
    mqstate_error_message(message, sizeof message, &len);
    std::fprintf(stderr, "%s: %s: %s\n", what, mqstate_status_name(status), message);
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s URL KEY\n", argv[0]);
        return 2;
    }
    const std::string key = argv[2];
    const std::string expected = "set from C++";
    mqstate_connect_options *options = nullptr;
    mqstate_client *raw_client = nullptr;
    mqstate_status status = mqstate_connect_options_from_url(argv[1], &options);
    if (status != MQSTATE_OK) return fail("options", status);
    status = mqstate_client_new(options, &raw_client);
    mqstate_connect_options_free(options);
    if (status != MQSTATE_OK) return fail("connect", status);
    std::unique_ptr<mqstate_client, ClientFree> client(raw_client);

    const auto *key_bytes = reinterpret_cast<const uint8_t *>(key.data());
    status = mqstate_client_set(client.get(), key_bytes, key.size(),
                                reinterpret_cast<const uint8_t *>(expected.data()),
                                expected.size(), MQSTATE_SET_ALWAYS, nullptr, nullptr, nullptr);
    if (status != MQSTATE_OK) return fail("set", status);
    mqstate_value *raw_value = nullptr;
    status = mqstate_client_get(client.get(), key_bytes, key.size(), &raw_value);
    if (status != MQSTATE_OK) return fail("get", status);
    std::unique_ptr<mqstate_value, ValueFree> value(raw_value);
    const uint8_t *data = nullptr;
    size_t len = 0;
    mqstate_value_bytes(value.get(), &data, &len);
    const std::string got(reinterpret_cast<const char *>(data), len);
    std::printf("C++: set %s, got \"%s\"\n", key.c_str(), got.c_str());
    if (got != expected) {
        std::fprintf(stderr, "C++: expected \"%s\"\n", expected.c_str());
        return 1;
    }
    return 0;
}
