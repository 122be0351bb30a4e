#define _POSIX_C_SOURCE 200809L /* open_memstream */
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

const char *cli_dims_text(const uint64_t *d, uint32_t rank, char *buf, size_t cap) {
    size_t at = 0;
    if (cap == 0) return buf;
    buf[0] = '\0';
    /* step 0: "[", steps 1..rank: the dims, step rank + 1: "]" */
    for (uint32_t i = 0; i <= rank + 1 && at + 1 < cap; i++) {
        int n = i == 0      ? snprintf(buf, cap, "[")
                : i <= rank ? snprintf(buf + at, cap - at, "%s%llu", i > 1 ? ", " : "", (unsigned long long)d[i - 1])
                            : snprintf(buf + at, cap - at, "]");
        if (n < 0) break;
        at += (size_t)n;
    }
    return buf;
}

FILE *cli_memstream_open(cli_memstream *m) {
    m->text = NULL;
    m->len = 0;
#ifdef _WIN32
    m->f = tmpfile();
#else
    m->f = open_memstream(&m->text, &m->len);
#endif
    return m->f;
}

int cli_memstream_close(cli_memstream *m) {
#ifdef _WIN32
    FILE *f = m->f;
    m->f = NULL;
    long n = fflush(f) == 0 && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0 || !(m->text = malloc((size_t)n + 1))) {
        fclose(f);
        return 1;
    }
    m->len = fread(m->text, 1, (size_t)n, f);
    m->text[m->len] = '\0';
    return fclose(f) != 0 || m->len != (size_t)n;
#else
    int rc = fclose(m->f);
    m->f = NULL;
    return rc != 0;
#endif
}
