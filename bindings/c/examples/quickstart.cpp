// mqstate quick start in C++17: a small RAII wrapper over the C API (exceptions for errors,
// std::optional for "no such key", std::function for notifications, a lock held by a scope).
//
// Build (from the repository root, after `cargo build -p mqstate-ffi`, with the pkg-config
// file scripts/test-c generates in target/debug/pkgconfig):
//
//   export PKG_CONFIG_PATH=$PWD/target/debug/pkgconfig
//   c++ -std=c++17 bindings/c/examples/quickstart.cpp $(pkg-config --cflags --libs mqstate) -o quickstart_cpp
//
// Run it against a local state store (`mqstate serve`): ./quickstart_cpp [mqtt://127.0.0.1:1883]

#include <mqstate.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

namespace mq {

// A failed call: the status and the library's message.
class Error : public std::runtime_error {
public:
    explicit Error(mqstate_status status)
        : std::runtime_error(std::string(mqstate_status_name(status)) + ": " + last_message()),
          status_(status) {}
    mqstate_status status() const noexcept { return status_; }

private:
    static std::string last_message() {
        std::size_t len = 0;
        mqstate_error_message_len(&len);
        std::string message(len + 1, '\0');
        std::size_t written = 0;
        mqstate_error_message(message.data(), message.size(), &written);
        message.resize(written);
        return message;
    }
    mqstate_status status_;
};

inline void check(mqstate_status status) {
    if (status != MQSTATE_OK) throw Error(status);
}

// unique_ptr deleters calling the library's _free functions.
template <auto Free>
struct Deleter {
    template <class T>
    void operator()(T *handle) const noexcept { Free(handle); }
};
using OptionsPtr = std::unique_ptr<mqstate_connect_options, Deleter<mqstate_connect_options_free>>;
using ClientPtr = std::unique_ptr<mqstate_client, Deleter<mqstate_client_free>>;
using ValuePtr = std::unique_ptr<mqstate_value, Deleter<mqstate_value_free>>;
using VersionPtr = std::unique_ptr<mqstate_version, Deleter<mqstate_version_free>>;

inline const std::uint8_t *bytes(std::string_view s) {
    return reinterpret_cast<const std::uint8_t *>(s.data());
}

inline std::string version_string(const mqstate_version *version) {
    const char *text = nullptr;
    std::size_t len = 0;
    check(mqstate_version_string(version, &text, &len));
    return std::string(text, len);
}

struct Change {
    bool deleted;
    std::string value;    // the new value of a SET
    std::string version;  // empty when the notification has none
};

class Client {
public:
    explicit Client(const std::string &url) {
        mqstate_connect_options *options = nullptr;
        check(mqstate_connect_options_from_url(url.c_str(), &options));
        OptionsPtr owned(options);
        mqstate_client *client = nullptr;
        check(mqstate_client_new(owned.get(), &client));
        client_.reset(client);
    }

    // The value, or std::nullopt when there is no such key.
    std::optional<std::string> get(std::string_view key) const {
        mqstate_value *value = nullptr;
        mqstate_status status = mqstate_client_get(client_.get(), bytes(key), key.size(), &value);
        if (status == MQSTATE_NOT_FOUND) return std::nullopt;
        check(status);
        ValuePtr owned(value);
        const std::uint8_t *data = nullptr;
        std::size_t len = 0;
        check(mqstate_value_bytes(owned.get(), &data, &len));
        return std::string(reinterpret_cast<const char *>(data), len);
    }

    // Sets the key; returns the new version, or std::nullopt if the condition failed.
    std::optional<std::string> set(std::string_view key, std::string_view value,
                                   mqstate_set_condition condition = MQSTATE_SET_ALWAYS) const {
        mqstate_version *version = nullptr;
        mqstate_status status = mqstate_client_set(client_.get(), bytes(key), key.size(),
                                                   bytes(value), value.size(), condition,
                                                   nullptr, nullptr, &version);
        if (status == MQSTATE_NOT_APPLIED) return std::nullopt;
        check(status);
        VersionPtr owned(version);
        return version_string(owned.get());
    }

    // True if the key existed.
    bool del(std::string_view key) const {
        mqstate_status status = mqstate_client_del(client_.get(), bytes(key), key.size(), nullptr);
        if (status == MQSTATE_NOT_FOUND) return false;
        check(status);
        return true;
    }

    // Calls `on_change` (on a library thread) for each change of the key, until unobserve.
    void observe(std::string_view key, std::function<void(const Change &)> on_change) const {
        auto *context = new std::function<void(const Change &)>(std::move(on_change));
        mqstate_status status = mqstate_client_observe(client_.get(), bytes(key), key.size(),
                                                       &Client::trampoline, &Client::destroy,
                                                       context);
        if (status != MQSTATE_OK) {
            delete context;  // on failure the library never calls destroy
            throw Error(status);
        }
    }

    // Stops observing; the callback's context is destroyed when this returns.
    void unobserve(std::string_view key) const {
        check(mqstate_client_unobserve(client_.get(), bytes(key), key.size()));
    }

private:
    static void trampoline(void *user_data, const mqstate_notification *n) noexcept {
        try {  // nothing may unwind into the library
            Change change{false, {}, {}};
            mqstate_notification_kind kind{};
            if (mqstate_notification_get_kind(n, &kind) != MQSTATE_OK) return;
            if (kind == MQSTATE_NOTIFICATION_ERROR) return;
            change.deleted = kind == MQSTATE_NOTIFICATION_DELETE;
            const std::uint8_t *data = nullptr;
            std::size_t len = 0;
            if (mqstate_notification_value(n, &data, &len) == MQSTATE_OK)
                change.value.assign(reinterpret_cast<const char *>(data), len);
            const mqstate_version *version = nullptr;
            if (mqstate_notification_version(n, &version) == MQSTATE_OK)
                change.version = version_string(version);
            (*static_cast<std::function<void(const Change &)> *>(user_data))(change);
        } catch (...) {
        }
    }

    static void destroy(void *user_data) noexcept {
        delete static_cast<std::function<void(const Change &)> *>(user_data);
    }

    ClientPtr client_;
    friend class Lock;
};

// A distributed lock held for the lifetime of the object (RAII): the constructor waits for
// it, the destructor unlocks. token() fences the writes it protects.
class Lock {
public:
    Lock(const Client &client, std::string_view name, std::string_view holder,
         std::chrono::milliseconds ttl, std::chrono::milliseconds timeout) {
        mqstate_lock *lock = nullptr;
        check(mqstate_lock_new(client.client_.get(), bytes(name), name.size(), bytes(holder),
                               holder.size(), &lock));
        lock_.reset(lock);
        mqstate_lock_guard *guard = nullptr;
        check(mqstate_lock_lock(lock_.get(), static_cast<std::uint64_t>(ttl.count()),
                                static_cast<std::uint64_t>(timeout.count()), &guard));
        guard_.reset(guard);
    }
    ~Lock() { mqstate_lock_unlock(guard_.get()); }
    Lock(const Lock &) = delete;
    Lock &operator=(const Lock &) = delete;

    const mqstate_version *token() const {
        const mqstate_version *token = nullptr;
        check(mqstate_lock_guard_token(guard_.get(), &token));
        return token;
    }

private:
    std::unique_ptr<mqstate_lock, Deleter<mqstate_lock_free>> lock_;
    std::unique_ptr<mqstate_lock_guard, Deleter<mqstate_lock_guard_free>> guard_;
};

}  // namespace mq

int main(int argc, char **argv) {
    const std::string url = argc > 1 ? argv[1] : "mqtt://127.0.0.1:1883";
    try {
        mq::Client client(url);
        client.observe("door", [](const mq::Change &change) {
            if (change.deleted)
                std::cout << "[door watcher] deleted\n";
            else
                std::cout << "[door watcher] set to \"" << change.value << "\" (version "
                          << change.version << ")\n";
        });
        std::cout << "set door = open, version " << client.set("door", "open").value_or("?")
                  << "\n";
        std::cout << "get door -> " << client.get("door").value_or("(no such key)") << "\n";
        auto nx = client.set("door", "closed", MQSTATE_SET_NX);
        std::cout << "set door = closed if absent -> " << (nx ? "applied" : "not applied")
                  << "\n";
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::cout << "del door -> " << (client.del("door") ? "deleted" : "no such key") << "\n";
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        client.unobserve("door");

        mq::Lock lock(client, "pump-lock", "edge-node-7", std::chrono::seconds(10),
                      std::chrono::seconds(5));
        std::cout << "locked pump-lock, fencing token " << mq::version_string(lock.token())
                  << "\n";
    } catch (const mq::Error &e) {
        std::cerr << "mqstate: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
