/*
 * A small throughput / latency benchmark of the C API: THREADS threads share one client and
 * each runs ROUNDS x (SET then GET) of its own key with a VALUE_SIZE-byte value, each call
 * waiting for its reply (so THREADS requests are in flight at most).
 *
 *   bench URL [THREADS [ROUNDS [VALUE_SIZE]]]
 *
 * Prints one line per run: requests/s, and the p50 / p99 latency of one request. Run by
 * scripts/bench-c against a release build and a local `mqstate serve`.
 */
#define _POSIX_C_SOURCE 200809L

#include <mqstate.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct worker {
    const mqstate_client *client;
    int index, rounds;
    size_t value_size;
    double *latencies_us; /* 2 * rounds */
    int failures;
};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void *run_worker(void *arg) {
    struct worker *w = arg;
    char key[64];
    uint8_t *value = malloc(w->value_size ? w->value_size : 1);
    size_t key_len = (size_t)snprintf(key, sizeof key, "bench-c-%d", w->index);
    int i;
    if (value == NULL) abort();
    memset(value, 'v', w->value_size);
    for (i = 0; i < w->rounds; i++) {
        mqstate_value *got = NULL;
        double t0 = now_us(), t1, t2;
        if (mqstate_client_set(w->client, (const uint8_t *)key, key_len, value, w->value_size,
                               MQSTATE_SET_ALWAYS, NULL, NULL, NULL) != MQSTATE_OK)
            w->failures++;
        t1 = now_us();
        if (mqstate_client_get(w->client, (const uint8_t *)key, key_len, &got) != MQSTATE_OK)
            w->failures++;
        t2 = now_us();
        mqstate_value_free(got);
        w->latencies_us[2 * i] = t1 - t0;
        w->latencies_us[2 * i + 1] = t2 - t1;
    }
    mqstate_client_del(w->client, (const uint8_t *)key, key_len, NULL);
    free(value);
    return NULL;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *url = argc > 1 ? argv[1] : "mqtt://127.0.0.1:1883";
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int rounds = argc > 3 ? atoi(argv[3]) : 5000;
    size_t value_size = argc > 4 ? (size_t)atol(argv[4]) : 64;
    mqstate_connect_options *options = NULL;
    mqstate_client *client = NULL;
    struct worker *workers;
    pthread_t *ids;
    double *all, start, elapsed_s;
    size_t total;
    int i, failures = 0;

    if (threads < 1 || rounds < 1) {
        fprintf(stderr, "usage: %s URL [THREADS [ROUNDS [VALUE_SIZE]]]\n", argv[0]);
        return 2;
    }
    if (mqstate_connect_options_from_url(url, &options) != MQSTATE_OK ||
        mqstate_client_new(options, &client) != MQSTATE_OK) {
        fprintf(stderr, "cannot connect to %s\n", url);
        mqstate_connect_options_free(options);
        return 1;
    }
    mqstate_connect_options_free(options);
    workers = calloc((size_t)threads, sizeof *workers);
    ids = calloc((size_t)threads, sizeof *ids);
    total = (size_t)threads * (size_t)rounds * 2;
    all = malloc(total * sizeof *all);
    if (workers == NULL || ids == NULL || all == NULL) abort();
    for (i = 0; i < threads; i++) {
        workers[i].client = client;
        workers[i].index = i;
        workers[i].rounds = rounds;
        workers[i].value_size = value_size;
        workers[i].latencies_us = all + (size_t)i * (size_t)rounds * 2;
    }
    start = now_us();
    for (i = 0; i < threads; i++) pthread_create(&ids[i], NULL, run_worker, &workers[i]);
    for (i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    elapsed_s = (now_us() - start) / 1e6;
    for (i = 0; i < threads; i++) failures += workers[i].failures;
    qsort(all, total, sizeof *all, compare_doubles);
    printf("C API, %d thread(s) sharing one client, %zu-byte values: %zu requests (SET+GET) in "
           "%.2f s = %.0f requests/s; latency p50 %.0f us, p99 %.0f us; %d failures\n",
           threads, value_size, total, elapsed_s, (double)total / elapsed_s, all[total / 2],
           all[total * 99 / 100], failures);
    free(all);
    free(ids);
    free(workers);
    mqstate_client_free(client);
    return failures == 0 ? 0 : 1;
}
