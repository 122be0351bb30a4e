/* A program that uses the experimental tier (HOSTFIRST_EXPERIMENTAL), for tests/it/windows.rs's check of its
 * per-minor guard: built against the header, it imports hostfirst_experimental_MAJOR_MINOR, so it runs with the DLL
 * of its own minor and is refused with another minor's. Prints one line from main. Never shipped. */
#define HOSTFIRST_EXPERIMENTAL
#include <stdio.h>
#include "hostfirst.h"

int main(void) {
    printf("census warnings: %zu\n", hostfirst_census_warning_count());
    return 0;
}
