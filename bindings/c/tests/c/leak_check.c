/*
 * The sanitizer's self-check (scripts/test-c): this program leaks versions on purpose.
 * The test script expects LeakSanitizer to report it, which shows that the leak check of
 * test_mqstate.c does see the library's allocations (and that no suppression hides them).
 */
#include "mqstate.h"

#include <stdio.h>

#define LEAKED 64

/* Parses LEAKED versions and drops every pointer (no mqstate_version_free). The scan for
 * reachable memory is conservative (the last pointer may linger in a register or on the
 * stack), hence several: the script expects most of them to be reported. */
static int leak(void) {
    int i;
    for (i = 0; i < LEAKED; i++) {
        mqstate_version *v = NULL;
        if (mqstate_version_parse("1:2:leak-check", &v) != MQSTATE_OK) return 2;
    }
    return 0;
}

int main(void) {
    if (leak() != 0) return 2;
    printf("leaked %d mqstate_version handles on purpose\n", LEAKED);
    return 0;
}
