#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

int cli_fail(const char *what, hostfirst_status st) {
    fprintf(stderr, "hostfirst: %s: %s: %s\n", what && *what ? what : "''", hostfirst_status_name(st),
            hostfirst_last_error_message());
    return 1;
}

/* The JSON form of byte c inside a string literal: an escape written into tmp, or NULL when c stands as it is. */
static const char *json_escape(unsigned char c, char tmp[8]) {
    switch (c) {
        case '"': return "\\\"";
        case '\\': return "\\\\";
        case '\b': return "\\b";
        case '\f': return "\\f";
        case '\n': return "\\n";
        case '\r': return "\\r";
        case '\t': return "\\t";
        default:
            if (c >= 0x20) return NULL;
            snprintf(tmp, 8, "\\u%04x", c);
            return tmp;
    }
}

void cli_json_string(FILE *out, const char *s) {
    char tmp[8];
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *e = json_escape(*p, tmp);
        if (e) fputs(e, out);
        else fputc(*p, out);
    }
    fputc('"', out);
}

/* Room for `more` bytes and a NUL after o->len; 0 (and o->oom set) when it cannot be had. */
static int out_reserve(cli_out *o, size_t more) {
    if (o->oom) return 0;
    if (more < o->cap - o->len) return 1;
    size_t cap = o->cap ? o->cap : 4096;
    while (more >= cap - o->len) {
        if (cap > (SIZE_MAX >> 1)) {
            cap = SIZE_MAX;
            break;
        }
        cap <<= 1;
    }
    char *t = more < cap - o->len ? realloc(o->text, cap) : NULL;
    if (!t) {
        o->oom = 1;
        o->oom_bytes = cap;
        return 0;
    }
    o->text = t;
    o->cap = cap;
    return 1;
}

static void out_append(cli_out *o, const char *s, size_t n) {
    if (!out_reserve(o, n)) return;
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = '\0';
}

void cli_out_printf(cli_out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return; /* an encoding error (none of the CLI's formats has one): nothing to add */
    if ((size_t)n < sizeof small) {
        out_append(o, small, (size_t)n);
        return;
    }
    if (!out_reserve(o, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(o->text + o->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    o->len += (size_t)n;
}

void cli_out_puts(cli_out *o, const char *s) { out_append(o, s, strlen(s)); }

void cli_out_putc(cli_out *o, char c) { out_append(o, &c, 1); }

void cli_out_json_string(cli_out *o, const char *s) {
    char tmp[8];
    cli_out_putc(o, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *e = json_escape(*p, tmp);
        if (e) cli_out_puts(o, e);
        else cli_out_putc(o, (char)*p);
    }
    cli_out_putc(o, '"');
}

void cli_out_free(cli_out *o) {
    free(o->text);
    o->text = NULL;
    o->len = o->cap = 0;
}

int cli_out_emit(cli_out *o, const char *what) {
    if (o->oom) {
        fprintf(stderr, "hostfirst: %s: OUT_OF_MEMORY: cannot allocate %zu bytes for the output\n", what && *what ? what : "''",
                o->oom_bytes);
        cli_out_free(o);
        return 1;
    }
    errno = 0;
    int bad = fwrite(o->text ? o->text : "", 1, o->len, stdout) != o->len;
    bad |= fflush(stdout) != 0;
    int e = errno;
    cli_out_free(o);
    if (bad) {
        fprintf(stderr, "hostfirst: %s: writing the output failed: %s\n", what && *what ? what : "''",
                e ? strerror(e) : "the stream reported an error");
        return 1;
    }
    return 0;
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

int cli_parse_page_cache(const char *cmd, const char *text, hostfirst_page_cache *out) {
    static const char *const names[] = {"keep", "drop", "bypass"};
    static const hostfirst_page_cache values[] = {HOSTFIRST_PAGE_CACHE_KEEP, HOSTFIRST_PAGE_CACHE_DROP,
                                                  HOSTFIRST_PAGE_CACHE_BYPASS};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = values[i];
            return 0;
        }
    }
    return cli_usage_error(cmd, "--page-cache wants keep, drop or bypass, got '%s'", text);
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
