#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <ctype.h>
#include <errno.h>
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

/* A decimal number at *p (digits only), moved past; 0 when there is none or it overflows. */
static int take_u64(const char **p, uint64_t *out) {
    if (!isdigit((unsigned char)**p)) return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(*p, &end, 10);
    if (errno == ERANGE) return 0;
    *p = end;
    *out = (uint64_t)v;
    return 1;
}

int cli_parse_raw(const char *cmd, const char *text, cli_raw *out) {
    cli_raw r;
    memset(&r, 0, sizeof r);
    char name[32];
    size_t n = strcspn(text, ":@");
    if (n == 0 || n >= sizeof name)
        return cli_usage_error(cmd, "--raw '%s' is not DTYPE[:SHAPE][@OFFSET] (e.g. U16, U16:-1,1024, U16@1024)", text);
    for (size_t i = 0; i < n; i++) name[i] = (char)toupper((unsigned char)text[i]);
    name[n] = '\0';
    if (hostfirst_dtype_from_name(name, &r.dtype) != HOSTFIRST_STATUS_OK)
        return cli_usage_error(cmd, "--raw '%s': unknown dtype '%s' (the safetensors names: U8, I8, U16, I16, U32, I32, "
                                    "U64, I64, F16, BF16, F32, F64, BOOL, ...)",
                               text, name);
    const char *p = text + n;
    if (*p == ':') {
        p++;
        for (;;) {
            if (r.rank == HOSTFIRST_MAX_RANK)
                return cli_usage_error(cmd, "--raw '%s': more than %d dimensions", text, HOSTFIRST_MAX_RANK);
            if (r.rank == 0 && p[0] == '-' && p[1] == '1' && (p[2] == ',' || p[2] == '@' || p[2] == '\0')) {
                r.shape[r.rank++] = HOSTFIRST_FILE_RAW_INFER;
                p += 2;
            } else if (take_u64(&p, &r.shape[r.rank])) {
                r.rank++;
            } else {
                return cli_usage_error(cmd,
                                       "--raw '%s': SHAPE is dimensions joined by ',' (non-negative integers; the "
                                       "first may be -1, inferred from the file's size)",
                                       text);
            }
            if (*p != ',') break;
            p++;
        }
    } else {
        r.shape[0] = HOSTFIRST_FILE_RAW_INFER; /* np.memmap's default: 1-D over the whole file */
        r.rank = 1;
    }
    if (*p == '@') {
        p++;
        if (!take_u64(&p, &r.offset))
            return cli_usage_error(cmd, "--raw '%s': OFFSET is a number of bytes (a non-negative integer)", text);
    }
    if (*p) return cli_usage_error(cmd, "--raw '%s': unexpected '%s' (the form is DTYPE[:SHAPE][@OFFSET])", text, p);
    r.set = 1;
    *out = r;
    return 0;
}

int cli_open(const char *path, const cli_raw *raw, hostfirst_file **out) {
    int is_raw = raw && raw->set;
    hostfirst_status st =
        is_raw ? hostfirst_file_open_raw(path, raw->dtype, raw->shape, raw->rank, raw->offset, CLI_RAW_NAME, out)
               : hostfirst_file_open(path, out);
    if (st == HOSTFIRST_STATUS_OK) return 0;
    /* The library names its C calls; say what that is on the command line. */
    const char *hint = NULL;
    if (!is_raw && st == HOSTFIRST_STATUS_NOT_SAFETENSORS)
        hint = "a headerless file opens with --raw DTYPE[:SHAPE][@OFFSET] (e.g. --raw U16)";
    else if (is_raw && st == HOSTFIRST_STATUS_OTHER_FORMAT)
        hint = "without --raw it opens by its header (or give --raw the @OFFSET of its data)";
    fprintf(stderr, "hostfirst: %s: %s: %s%s%s\n", path && *path ? path : "''", hostfirst_status_name(st),
            hostfirst_last_error_message(), hint ? "; from the command line: " : "", hint ? hint : "");
    return 1;
}
