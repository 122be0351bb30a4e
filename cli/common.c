#include <stdlib.h>
#include <string.h>
#include "cli.h"

int cli_fail(const char *what, hostfirst_status st) {
    fprintf(stderr, "hostfirst: %s: %s: %s\n", what && *what ? what : "''", hostfirst_status_name(st),
            hostfirst_last_error_message());
    return 1;
}

void cli_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
            case '"': fputs("\\\"", out); break;
            case '\\': fputs("\\\\", out); break;
            case '\b': fputs("\\b", out); break;
            case '\f': fputs("\\f", out); break;
            case '\n': fputs("\\n", out); break;
            case '\r': fputs("\\r", out); break;
            case '\t': fputs("\\t", out); break;
            default:
                if (*p < 0x20) fprintf(out, "\\u%04x", *p);
                else fputc(*p, out);
        }
    }
    fputc('"', out);
}

const char *cli_device_spec(hostfirst_device d, char *buf, size_t cap) {
    if (hostfirst_device_format(d, buf, cap, NULL) != HOSTFIRST_STATUS_OK) snprintf(buf, cap, "?");
    return buf;
}

const char *cli_bytes(uint64_t n, char *buf, size_t cap) {
    const double k = 1024.0;
    double x = (double)n;
    if (x >= k * k * k) snprintf(buf, cap, "%.2f GiB", x / (k * k * k));
    else if (x >= k * k) snprintf(buf, cap, "%.2f MiB", x / (k * k));
    else if (x >= k) snprintf(buf, cap, "%.2f KiB", x / k);
    else snprintf(buf, cap, "%llu B", (unsigned long long)n);
    return buf;
}

int cli_parse_u64(const char *s, uint64_t *out) {
    char *end = NULL;
    if (!s || !*s || *s == '-') return 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end) return 0;
    *out = (uint64_t)v;
    return 1;
}
