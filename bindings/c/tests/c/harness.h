/*
 * The test harness shared by test_mqstate.c and test_iothub.c: per-case pass/fail counting,
 * CHECK macros that report the file, line and the library's last error message, and small
 * time helpers. Header-only (static functions) and included by one translation unit each;
 * the including file defines _POSIX_C_SOURCE and includes "mqstate.h" first.
 *
 * A test case is a `void (*)(void)` run with run("name", fn); a failed check marks the case
 * failed and goes on. Checks may run on other threads (the report lock orders them).
 */
#ifndef MQSTATE_TEST_HARNESS_H
#define MQSTATE_TEST_HARNESS_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int g_passed;
static int g_failed;
static int g_case_failed; /* set by a failed check in the current test case */
static pthread_mutex_t g_report_lock = PTHREAD_MUTEX_INITIALIZER;

static void fail_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&g_report_lock);
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_case_failed = 1;
    pthread_mutex_unlock(&g_report_lock);
}

/* The calling thread's last error message, written to buf (copy it if kept). */
static const char *last_message(char *buf, size_t len) {
    size_t written = 0;
    if (mqstate_error_message(buf, len, &written) != MQSTATE_OK) {
        snprintf(buf, len, "(mqstate_error_message failed)");
    }
    return buf;
}

#define CHECK(cond)                                                                             \
    do {                                                                                        \
        if (!(cond)) fail_at(__FILE__, __LINE__, "check failed: %s", #cond);                    \
    } while (0)

#define CHECK_STATUS(expr, expected)                                                            \
    do {                                                                                        \
        mqstate_status got_ = (expr);                                                           \
        mqstate_status want_ = (expected);                                                      \
        if (got_ != want_) {                                                                    \
            char msg_[512];                                                                     \
            fail_at(__FILE__, __LINE__, "%s returned %s, expected %s (last error: %s)", #expr,  \
                    mqstate_status_name(got_), mqstate_status_name(want_),                      \
                    got_ == MQSTATE_OK ? "-" : last_message(msg_, sizeof msg_));                \
        }                                                                                       \
    } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, MQSTATE_OK)

/* The last error message of this thread contains `needle`. */
#define CHECK_MESSAGE_HAS(needle)                                                               \
    do {                                                                                        \
        char msg_[1024];                                                                        \
        last_message(msg_, sizeof msg_);                                                        \
        if (strstr(msg_, (needle)) == NULL)                                                     \
            fail_at(__FILE__, __LINE__, "last error \"%s\" does not contain \"%s\"", msg_,      \
                    (needle));                                                                  \
    } while (0)

/* `got` (a C string, possibly NULL) equals `want`. */
#define CHECK_STR(got, want)                                                                    \
    do {                                                                                        \
        const char *g_ = (got);                                                                 \
        const char *w_ = (want);                                                                \
        if (g_ == NULL || strcmp(g_, w_) != 0)                                                  \
            fail_at(__FILE__, __LINE__, "%s is \"%s\", expected \"%s\"", #got,                  \
                    g_ ? g_ : "(NULL)", w_);                                                    \
    } while (0)

/* Runs one test case and prints "ok - NAME" or "FAIL - NAME". */
static void run(const char *name, void (*test)(void)) {
    g_case_failed = 0;
    test();
    if (g_case_failed) {
        g_failed++;
        printf("FAIL - %s\n", name);
    } else {
        g_passed++;
        printf("ok - %s\n", name);
    }
    fflush(stdout);
}

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

#endif /* MQSTATE_TEST_HARNESS_H */
